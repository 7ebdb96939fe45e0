"""Reference answers for notebook 04 (used only when COURSE_SOLUTIONS is set)."""

import os

import torch

# DistributedSampler, 11 samples, 4 ranks, shuffle=False: the indices padded to 12 by repeating
# the first one, rank r taking every 4th from r; drop_last=True cuts them to 8 instead
shares = [[[0, 4, 8], [1, 5, 9], [2, 6, 10], [3, 7, 0]], [[0, 4], [1, 5], [2, 6], [3, 7]]]


def save_checkpoint(path, state, rank):
    """Rank 0: write state to path; a crash at any moment leaves the old file or the new one."""
    if rank != 0:
        return  # the replicas are identical: one writer
    tmp = path + ".tmp"  # beside the checkpoint: the same file system, so the rename is atomic
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())  # the bytes on the disk before the name points at them (power loss)
    os.replace(tmp, path)  # one step: a reader finds the old file or the new one, whole
