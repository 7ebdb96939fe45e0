"""Saves on every rank (ignores rank)."""

import os

import torch


def save_checkpoint(path, state, rank):
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)
