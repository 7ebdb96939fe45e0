"""Wrong answers for notebook 04: the sampler's padding missed (rank 3 one index short), and a
save that writes the checkpoint's own path (tests/planted/save_checkpoint.py)."""

import torch

shares = [[[0, 4, 8], [1, 5, 9], [2, 6, 10], [3, 7]], [[0, 4], [1, 5], [2, 6], [3, 7]]]


def save_checkpoint(path, state, rank):
    if rank == 0:
        torch.save(state, path)
