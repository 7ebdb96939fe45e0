"""Writes the temporary file and stops there: the checkpoint is never replaced."""

import torch


def save_checkpoint(path, state, rank):
    if rank == 0:
        torch.save(state, path + ".tmp")
