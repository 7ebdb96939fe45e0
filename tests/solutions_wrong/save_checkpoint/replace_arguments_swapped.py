"""os.replace(dst, src): moves the old checkpoint onto the temporary file's name."""

import os

import torch


def save_checkpoint(path, state, rank):
    if rank == 0:
        torch.save(state, path + ".tmp")
        os.replace(path, path + ".tmp")
