"""Notebook 01's GIL race: the work that DP's threads, or separate processes, run.

Not a launcher: a small module that notebook 01 imports. It lives in a file because the
processes of the race are started with "spawn" (a fresh interpreter, safe on macOS and after
CUDA use, where forking a process is not), and a spawned process can only run code it can
import: not a function or a class defined in a notebook.
"""

import math

import torch
import torch.nn as nn


class ManyTinyOps(nn.Module):
    """Many tiny layers with a little Python between them: its time goes to the interpreter."""

    def __init__(self, layers=40, width=4):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(layers))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            gate = sum(math.cos(0.1 * i * j) for j in range(16)) / 16  # Python-level arithmetic
            x = x + gate * torch.tanh(layer(x))
        return x


def forward_only(model, x, reps):  # what each of DP's threads runs
    for _ in range(reps):
        model(x)


WORKER = {}  # in each worker process: its own copy of the work, and the starting barrier


def start_worker(barrier, work, reps):
    """Runs once in each new worker process: one core, its own copy of the models."""
    torch.set_num_threads(1)
    WORKER.update(barrier=barrier, work=work, reps=reps)


def share_in_process(name):
    """One share of the work, in a worker process, started together with the other worker."""
    WORKER["barrier"].wait(timeout=60)
    model, x = WORKER["work"][name]
    forward_only(model, x, WORKER["reps"][name])
