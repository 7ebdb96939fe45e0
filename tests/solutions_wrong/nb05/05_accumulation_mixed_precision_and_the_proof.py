"""Deliberately wrong answers to notebook 05's tasks, for a run of the whole notebook: the
accumulation step with its forward outside no_sync (K all-reduces per step), and a
prediction that forgets that no_sync still syncs once per step."""

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


def allreduces(steps, K):
    return steps, 0, K * steps
