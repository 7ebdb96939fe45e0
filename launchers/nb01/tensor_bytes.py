"""Counting a step's bytes as notebook 01's ledger does: not the lesson of its launcher.

Notebook 01 rebuilds DataParallel over virtual devices (its ledger, nb01/dp_lab.py) and runs
the same model under DDP (ddp_same_model.py); both count what a device holds the same way,
with these: the bytes autograd saves for backward, tensors' bytes, the process's peak RSS.
"""

import resource
import sys

import torch


def saved_bytes(known):
    """A hook that sums the bytes autograd saves for backward, skipping storages in `known`."""
    saved = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in known:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    return saved, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)


def storages(*tensors):
    return {t.untyped_storage().data_ptr() for t in tensors}


def nbytes(tensors):
    return sum(t.nbytes for t in tensors if t is not None)


def peak_rss_bytes():
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB
