"""Writes the checkpoint's own path: a crash mid-write leaves half a file there."""

import torch


def save_checkpoint(path, state, rank):
    if rank == 0:
        torch.save(state, path)
