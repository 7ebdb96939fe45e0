"""Copies the finished temporary file over the checkpoint instead of renaming it."""

import shutil

import torch


def save_checkpoint(path, state, rank):
    if rank == 0:
        torch.save(state, path + ".tmp")
        shutil.copyfile(path + ".tmp", path)
