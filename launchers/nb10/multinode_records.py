"""Notebook 10's data and records, shared by every attempt of multinode_train.py: not its lesson.

`global_batch` makes the whole job's batch of a step from the step's own seed (a regression
on 20 features), so every rank and every attempt, resumed or not, sees the same data;
`rank_share` is one rank's slice of it, whatever the number of ranks.
`log_step` is rank 0's line per step in progress.jsonl, which the notebook reads to draw
every attempt's steps, the killed ones included.
"""

import json
import os

import torch


def global_batch(step, size):
    """The whole job's batch for `step`: identical on every rank, every attempt."""
    g = torch.Generator().manual_seed(10_000 + step)
    x = torch.randn(size, 20, generator=g)
    true_weights = torch.randn(20, 1, generator=torch.Generator().manual_seed(42))
    return x, x @ true_weights + 0.1 * torch.randn(size, 1, generator=g)


def rank_share(step, size, rank, world_size):
    """This rank's slice of the step's global batch of `size` samples (x, y)."""
    if size % world_size:
        raise SystemExit(f"--global-batch {size} must divide by {world_size} ranks")
    per_rank = size // world_size
    x, y = global_batch(step, size)
    mine = slice(rank * per_rank, (rank + 1) * per_rank)
    return x[mine], y[mine]


def log_step(out, step, loss, world):
    """Append this process's step to out/progress.jsonl (every attempt's steps stay there)."""
    with open(os.path.join(out, "progress.jsonl"), "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "step": step, "loss": loss,
                            "world": world}) + "\n")
