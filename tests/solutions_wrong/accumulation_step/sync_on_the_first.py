"""Planted mistake, off by one: the micro-batch outside no_sync is the first, not the last:
one all-reduce per step, but the later micro-batches' gradients never leave their rank."""

from contextlib import nullcontext

import torch.nn.functional as F


def accumulation_step(ddp_model, optimizer, micro_batches):
    K = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        with ddp_model.no_sync() if i > 0 else nullcontext():
            (F.cross_entropy(ddp_model(x), y) / K).backward()
    optimizer.step()
    optimizer.zero_grad()
