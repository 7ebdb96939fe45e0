"""Opens the temporary file, renames it over the checkpoint, then writes into it."""

import os

import torch


def save_checkpoint(path, state, rank):
    if rank == 0:
        f = open(path + ".tmp", "wb")
        os.replace(path + ".tmp", path)
        torch.save(state, f)
        f.close()
