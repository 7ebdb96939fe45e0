"""Planted mistake: accumulation without no_sync: DDP all-reduces after every micro-batch,
K times the traffic for the same gradient."""

import torch.nn.functional as F


def accumulation_step(ddp_model, optimizer, micro_batches):
    K = len(micro_batches)
    for x, y in micro_batches:
        (F.cross_entropy(ddp_model(x), y) / K).backward()
    optimizer.step()
    optimizer.zero_grad()
