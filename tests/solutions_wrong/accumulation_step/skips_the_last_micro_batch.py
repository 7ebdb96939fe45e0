"""Planted mistake, off by one: range(K - 1) drops the last micro-batch (its samples are
never trained on)."""

from contextlib import nullcontext

import torch.nn.functional as F


def accumulation_step(ddp_model, optimizer, micro_batches):
    K = len(micro_batches)
    for i in range(K - 1):
        x, y = micro_batches[i]
        with ddp_model.no_sync() if i < K - 2 else nullcontext():
            (F.cross_entropy(ddp_model(x), y) / K).backward()
    optimizer.step()
    optimizer.zero_grad()
