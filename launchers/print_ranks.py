"""Notebook 08 §3, printing: each rank prints --lines lines, each in two writes with a barrier
between them, so that ranks sharing one output (plain torchrun) interleave inside every line;
--one-write writes each line whole (a fix).

    torchrun --nproc-per-node 2 launchers/print_ranks.py
"""

import torch.distributed as dist
from common.devices import init_distributed
from common.pitfall_harness import pitfall_parser, write_metrics


def main():
    parser = pitfall_parser(__doc__)  # --pg-timeout, --device, --out
    parser.add_argument("--lines", type=int, default=40)
    parser.add_argument("--one-write", action="store_true", help="the fix: each line in one write")
    args = parser.parse_args()

    device, backend = init_distributed(args.device, timeout=args.pg_timeout)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    dist.barrier()  # start together
    for i in range(args.lines):
        if args.one_write:  # the line and its newline in one write: nothing can come between
            print(f"rank {rank} line {i} of {args.lines}\n", end="", flush=True)
        else:
            print("rank", rank, "line", i, end="", flush=True)  # the first half of the line
            dist.barrier()  # every rank between its two writes at once: the race, made certain
            print(" of", args.lines, flush=True)  # the rest, newline included
        dist.barrier()  # every line apart from the next one
    if rank == 0:
        print(f"rank 0 alone: {world_size} ranks printed {args.lines} lines each")
        write_metrics(args.out, world_size=world_size, backend=backend,
                      ranks=[{"lines": args.lines}] * world_size)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
