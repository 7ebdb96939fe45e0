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


def allreduces(steps, K):
    """All-reduces of the whole run, (large batch, no_sync, sync every micro-batch), given
    its optimizer steps: Net's gradients fit in one bucket, so one all-reduce per
    synchronised backward: one per step, but K per step when every micro-batch syncs."""
    return steps, steps, K * steps
