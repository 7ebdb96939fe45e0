"""Notebook 01's GIL race: the work that DP's threads, or separate processes, run, and the race.

Not a launcher: a small module that notebook 01 imports (nb01.gil_work). It is a file
because the processes of the race are started with "spawn" (a fresh interpreter, safe on
macOS and after CUDA use, where forking a process is not), and a spawned process can only
run code it can import: not a function or a class defined in a notebook.
"""

import copy
import math
import threading
import time

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


def calibrate(work, target_s):
    """Repetitions per share so that each share takes about ``target_s`` seconds."""
    reps = {}
    for name, (model, x) in work.items():
        forward_only(model, x, 2)
        t = time.perf_counter()
        forward_only(model, x, 5)
        reps[name] = max(2, round(target_s / ((time.perf_counter() - t) / 5)))
    return reps


def speedups(work, reps, name, pool, rounds):
    """Two equal shares of ``name``'s forward work, best of ``rounds``: one thread after the
    other, 2 threads, 2 processes (``pool``). Speed-ups over one thread."""
    model, x = work[name]
    models = [model, copy.deepcopy(model)]
    best = {"one thread": 1e9, "2 threads": 1e9, "2 processes": 1e9}
    for _ in range(rounds):
        t = time.perf_counter()
        for m in models:
            forward_only(m, x, reps[name])
        best["one thread"] = min(best["one thread"], time.perf_counter() - t)
        t = time.perf_counter()
        threads = [threading.Thread(target=forward_only, args=(m, x, reps[name])) for m in models]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        best["2 threads"] = min(best["2 threads"], time.perf_counter() - t)
        t = time.perf_counter()
        pool.map(share_in_process, [name, name])
        best["2 processes"] = min(best["2 processes"], time.perf_counter() - t)
    return {"threads": best["one thread"] / best["2 threads"],
            "processes": best["one thread"] / best["2 processes"]}
