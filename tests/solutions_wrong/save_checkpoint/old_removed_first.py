"""Deletes the old checkpoint before the new one is written."""

import os

import torch


def save_checkpoint(path, state, rank):
    if rank == 0:
        if os.path.exists(path):
            os.remove(path)
        torch.save(state, path + ".tmp")
        os.replace(path + ".tmp", path)
