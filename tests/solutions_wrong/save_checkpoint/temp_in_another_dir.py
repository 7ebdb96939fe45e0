"""A temporary file in the system's temp directory (perhaps another file system), moved over."""

import os
import shutil
import tempfile

import torch


def save_checkpoint(path, state, rank):
    if rank == 0:
        fd, tmp = tempfile.mkstemp(suffix=".pt")
        os.close(fd)
        torch.save(state, tmp)
        shutil.move(tmp, path)
