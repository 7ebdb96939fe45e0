"""Planted mistake: optimizer.step() inside the loop: K small steps instead of one large one."""

from contextlib import nullcontext

import torch.nn.functional as F


def accumulation_step(ddp_model, optimizer, micro_batches):
    K = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        with ddp_model.no_sync() if i < K - 1 else nullcontext():
            (F.cross_entropy(ddp_model(x), y) / K).backward()
        optimizer.step()
        optimizer.zero_grad()
