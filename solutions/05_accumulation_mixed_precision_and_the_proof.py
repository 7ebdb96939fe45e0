"""Reference solutions for notebook 05's tasks (used only when COURSE_SOLUTIONS is set)."""

from contextlib import nullcontext

import torch.nn.functional as F


def accumulation_step(ddp_model, optimizer, micro_batches):
    """One optimizer step over K micro-batches, the large batch's step with one all-reduce.

    The first K-1 run inside no_sync, forward and backward (DDP decides at the forward
    whether its backward all-reduces): their gradients accumulate locally. The last runs
    outside it: its backward all-reduces the accumulated sum once. Each loss is divided by
    K, so the sum is the mean over the large batch.
    """
    K = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        with ddp_model.no_sync() if i < K - 1 else nullcontext():
            loss = F.cross_entropy(ddp_model(x), y)
            (loss / K).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def allreduces_k8(steps):
    """All-reduces of the two K = 8 runs, (no_sync, sync every micro-batch), from the K = 4
    runs' optimizer steps: 8 micro-batches of 4 are the same 32 samples per step, so the same
    steps. Net's gradients fit in one bucket: one all-reduce per synchronised backward. no_sync
    lets only the last micro-batch sync, once per step whatever K; syncing every micro-batch
    makes all 8 reduce."""
    return steps, 8 * steps
