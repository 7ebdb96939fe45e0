"""Planted mistake: each micro-batch's loss is not divided by K, so the accumulated gradient
is K times the large batch's mean."""

from contextlib import nullcontext

import torch.nn.functional as F


def accumulation_step(ddp_model, optimizer, micro_batches):
    K = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        with ddp_model.no_sync() if i < K - 1 else nullcontext():
            F.cross_entropy(ddp_model(x), y).backward()
    optimizer.step()
    optimizer.zero_grad()
