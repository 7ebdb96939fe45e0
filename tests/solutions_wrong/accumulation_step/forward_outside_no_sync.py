"""Planted mistake: only the backward is inside no_sync; the forward, outside it, has
already told DDP to all-reduce (its docstring: the forward pass should be included)."""

from contextlib import nullcontext

import torch.nn.functional as F


def accumulation_step(ddp_model, optimizer, micro_batches):
    K = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        loss = F.cross_entropy(ddp_model(x), y) / K
        with ddp_model.no_sync() if i < K - 1 else nullcontext():
            loss.backward()
    optimizer.step()
    optimizer.zero_grad()
