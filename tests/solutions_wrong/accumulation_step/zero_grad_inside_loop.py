"""Planted mistake: zero_grad before every micro-batch's backward erases the gradients
accumulated so far: the step sees the last micro-batch's alone."""

from contextlib import nullcontext

import torch.nn.functional as F


def accumulation_step(ddp_model, optimizer, micro_batches):
    K = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        optimizer.zero_grad()
        with ddp_model.no_sync() if i < K - 1 else nullcontext():
            (F.cross_entropy(ddp_model(x), y) / K).backward()
    optimizer.step()
