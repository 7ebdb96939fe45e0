"""What the pitfall launchers of notebooks 08 and 09 share and is not their lesson.

A broken launcher and its fix differ in a few lines of their training loop. Their common
flags, each rank's batches (with 08's watchdog and corrupt sample), the parameter checksum,
rank 0's metrics.json, 09 §1's model with an auxiliary head, its step timer and 09 §3's
report of the samplers' shares are the same in both, so they live here and each launcher
reads as its pitfall. Every collective stays in the launchers: a rank's stack dump names the
launcher line it waits at.
"""

import argparse
import faulthandler
import json
import os
import time
from contextlib import contextmanager
from datetime import timedelta

import torch
import torch.distributed as dist

from common.glyphs import Net, make_dataset


def pitfall_parser(doc, watchdog=False):
    """The flags every pitfall launcher takes: --pg-timeout, --device, --out (and --watchdog);
    the launcher adds its own, then parses."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--pg-timeout", type=lambda s: timedelta(seconds=float(s)),
                        help="seconds per collective (default: torch's, 30 min gloo, 10 NCCL)")
    if watchdog:
        parser.add_argument("--watchdog", type=float, default=0,
                            help="dump stacks after S s; 0: off")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="out", help="folder for metrics.json (rank 0 writes)")
    return parser


def checksum(model):
    """The sum of every parameter, in float64: equal on all ranks while they are in step."""
    return sum(p.double().sum().item() for p in model.parameters())


def write_metrics(out, **metrics):
    """Rank 0's metrics.json in folder `out`: what the notebook reads of the run."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "metrics.json"), "w") as f:
        json.dump(metrics, f)


class NetWithAux(Net):
    """Net plus an auxiliary classifier on the same features (notebook 09 §1)."""

    def __init__(self):
        super().__init__()
        self.aux = torch.nn.Linear(self.head.in_features, self.head.out_features)

    def forward(self, x, use_aux):
        features = self.features(x).amax(dim=(2, 3))
        logits = self.head(features)
        return (logits, self.aux(features)) if use_aux else (logits, None)


@contextmanager
def timed_step(device, times, calls):
    """Append the block's seconds to `times` (GPU work included) and the number of
    collectives it made to `calls` (every collective advances the group's sequence number)."""
    group = dist.distributed_c10d._get_default_group()
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # nothing queued from before counts as this step
    before = group._get_sequence_number_for_group()
    tick = time.perf_counter()
    yield
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # GPU work is asynchronous: time it, not its launch
    times.append(time.perf_counter() - tick)
    calls.append(group._get_sequence_number_for_group() - before)


def report_shares(out, size, gathered, backend):
    """Rank 0 (notebook 09 §3): each epoch's order per rank, the evaluation's count, and
    metrics.json. `gathered`: every rank's {"epochs": [[indices]], "evaluated": [indices]}."""
    counted = sorted(i for record in gathered for i in record["evaluated"])
    for epoch in range(len(gathered[0]["epochs"])):
        print(f"epoch {epoch}: " + "   ".join(f"rank {r}: {rec['epochs'][epoch]}"
                                             for r, rec in enumerate(gathered)))
    print(f"evaluation counted {len(counted)} samples of {size}")
    write_metrics(out, world_size=len(gathered), backend=backend, ranks=gathered, size=size,
                  evaluated_count=len(counted), evaluated_distinct=len(set(counted)))


def rank_batches(args, rank, world_size, bad_step=None):
    """Notebook 08's training data: this rank's batches of notebook 04's glyphs, --batch-size
    samples for each of --steps steps, every rank's its own. Before each step it re-arms the
    watchdog (--watchdog S: a rank whose step takes longer than S seconds prints its stack,
    faulthandler). At bad_step the last rank's batch holds a NaN: a corrupt sample, on one
    rank only."""
    x_all, y_all = make_dataset(args.steps * args.batch_size * world_size, seed=1)
    try:
        for step in range(args.steps):
            if getattr(args, "watchdog", 0):  # fires only if this step takes too long
                faulthandler.dump_traceback_later(args.watchdog, exit=False)
            first = (step * world_size + rank) * args.batch_size
            x = x_all[first : first + args.batch_size].clone()
            if step == bad_step and rank == world_size - 1:
                x[0, 0, 0, 0] = float("nan")
            yield x, y_all[first : first + args.batch_size]
    finally:  # the loop ended, or left early (break): no dump after it
        faulthandler.cancel_dump_traceback_later()
