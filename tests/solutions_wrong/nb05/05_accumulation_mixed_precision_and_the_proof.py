"""Deliberately wrong answers to notebook 05's tasks, for a run of the whole notebook: the
accumulation step with its forward outside no_sync (K all-reduces per step), and a
prediction that lets no_sync's all-reduces grow with K (twice the K = 4 run's)."""

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


def allreduces_k8(steps):
    return 2 * steps, 8 * steps
