"""What a run of the training chain records: each step's time, its all-reduces, and metrics.json
(notebooks 04, 05).

Not the lesson: the launchers time their steps and write their figures for the notebooks to
read; how they do it is the same in every step of the chain.
"""

import json
import os
import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook


class StepClock:
    """The wall time of each optimizer step. Time spent between steps on something else
    (evaluation) is left out: call restart() after it."""

    def __init__(self, device):
        self.device, self.times = device, []
        self.restart()

    def restart(self):
        """Time the next step from now."""
        self.tick = time.perf_counter()

    def step(self):
        """An optimizer step ended: record its seconds (the last one: times[-1])."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # GPU work is asynchronous: time it, not its launch
        now = time.perf_counter()
        self.times.append(now - self.tick)
        self.tick = now

    def figures(self):
        """The median step time after the first steps (they warm up), and the first step's."""
        timed = sorted(self.times[2:] or self.times)
        return {"step_time_median_s": timed[len(timed) // 2] if timed else None,
                "first_step_s": self.times[0] if self.times else None}


class AllreduceCount:
    """DDP's own all-reduce, registered as a comm hook that counts the buckets it reduces (the
    hook notebook 05 builds before step 5): `count` after the run."""

    def __init__(self, ddp_model):
        self.count = 0
        ddp_model.register_comm_hook(None, self.allreduce)

    def allreduce(self, state, bucket):  # DDP calls this once per gradient bucket it reduces
        self.count += 1
        return allreduce_hook(state, bucket)  # the all-reduce DDP does by default


def write_metrics(out, mine, **figures):
    """A collective (every rank calls it): rank 0 gathers each rank's own figures `mine` as
    "ranks" and writes them with `figures` to out/metrics.json."""
    gathered = [None] * dist.get_world_size()
    dist.gather_object(mine, gathered if dist.get_rank() == 0 else None)
    if dist.get_rank() == 0:
        with open(os.path.join(out, "metrics.json"), "w") as f:
            json.dump({**figures, "ranks": gathered}, f)
