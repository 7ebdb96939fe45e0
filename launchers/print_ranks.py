"""Notebook 08 §3, printing: every rank prints; where do the lines end up?

    torchrun --nproc-per-node 2 launchers/print_ranks.py

Each rank prints --lines lines, each in two writes, and the ranks wait for each other (a
barrier) between the two: when all ranks share one output pipe (plain torchrun) the pieces of
different ranks interleave inside a line. Ranks writing at once do that by chance; the
barrier makes it happen on every line, so the symptom shows on every run. The fixes are
torchrun's own options: `--tee 3 --log-dir DIR` (one log file per rank, lines prefixed with
their rank), `--local-ranks-filter 0` (only rank 0 on the console), or logging from rank 0
only.
"""

import argparse

import torch
import torch.distributed as dist
from common.devices import init_distributed
from common.pitfall_harness import write_metrics


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=40)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="the tier's: printing is the same on all")
    parser.add_argument("--out", default="out", help="folder for metrics.json (rank 0 writes)")
    args = parser.parse_args()

    device, backend = init_distributed(args.device)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    dist.barrier()  # start together
    for i in range(args.lines):
        print("rank", rank, "line", i, end="", flush=True)  # the first half of the line
        dist.barrier()  # every rank between its two writes at once: the race, made certain
        print(" of", args.lines, flush=True)  # the rest, newline included
        dist.barrier()  # every line's halves apart from the next line's
    dist.barrier()
    if rank == 0:
        print(f"rank 0 alone: {world_size} ranks printed {args.lines} lines each")
        write_metrics(args.out, world_size=world_size, backend=backend,
                      ranks=[{"lines": args.lines}] * world_size)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
