"""What notebook 09 §3's two sampler launchers share and is not their lesson.

sampler_forgot_set_epoch.py and sampler_fixed.py differ in two lines: `set_epoch`, and the
shares an evaluation takes. Their flags, and rank 0's report of what every rank was given,
are the same in both, so they live here and each launcher reads as its sampler loop.
"""

import argparse

import torch
import torch.distributed as dist
from common.pitfall_harness import report_shares


def sampler_parser(doc):
    """The flags of both sampler launchers: --size, --epochs, --device, --out."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--size", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="the tier's: the sampler is the same on all")
    parser.add_argument("--out", default="out", help="folder for metrics.json (rank 0 writes)")
    return parser


def gather_shares(args, seen, evaluated, backend):
    """Every rank's samples (`seen`: one list per epoch; `evaluated`: its evaluation share) to
    rank 0, which prints each epoch's order per rank and the evaluation's count, and writes
    metrics.json."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    gathered = [None] * world_size
    dist.gather_object({"epochs": seen, "evaluated": evaluated}, gathered if rank == 0 else None)
    if rank == 0:
        report_shares(args.out, args.size, gathered, backend)
