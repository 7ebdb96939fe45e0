"""Planted mistake: the whole loop runs inside no_sync, the last micro-batch too: no
all-reduce at all, so the ranks never average their gradients."""

import torch.nn.functional as F


def accumulation_step(ddp_model, optimizer, micro_batches):
    K = len(micro_batches)
    with ddp_model.no_sync():
        for x, y in micro_batches:
            (F.cross_entropy(ddp_model(x), y) / K).backward()
    optimizer.step()
    optimizer.zero_grad()
