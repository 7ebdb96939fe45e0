"""Notebook 08 §3, printing: every rank prints; where do the lines end up?

    torchrun --nproc-per-node 2 launchers/print_ranks.py

Each rank prints --lines lines. `print(a, b, c)` writes its pieces one after the other,
so when all ranks share one output pipe (plain torchrun) the pieces of different ranks
interleave inside a line. The fixes are torchrun's own options: `--tee 3 --log-dir DIR`
(one log file per rank, lines prefixed with their rank), `--local-ranks-filter 0` (only rank
0 on the console), or logging from rank 0 only.
"""

import argparse
import json
import os

import torch
import torch.distributed as dist


def device_and_backend(requested: str, local_rank: int, local_world_size: int,
                       n_gpus: int) -> tuple[torch.device, str]:
    """Where this rank computes and how the ranks talk: the one place that decides.
    NCCL needs a GPU of its own for every rank of this node (LOCAL_WORLD_SIZE, not the
    job's WORLD_SIZE: 2 nodes x 8 GPUs is 16 ranks on 8 GPUs each)."""
    if requested == "cuda":
        device = torch.device("cuda", local_rank % n_gpus)
        return device, "nccl" if local_world_size <= n_gpus else "gloo"
    return torch.device("cpu"), "gloo"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=40)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="the tier's: printing is the same on all")
    parser.add_argument("--out", default="out", help="folder for metrics.json (rank 0 writes)")
    args = parser.parse_args()

    n_gpus = torch.cuda.device_count() if args.device == "cuda" else 0
    device, backend = device_and_backend(args.device, int(os.environ["LOCAL_RANK"]),
                                         int(os.environ["LOCAL_WORLD_SIZE"]), n_gpus)
    if device.type == "cuda":
        torch.cuda.set_device(device)  # before init: NCCL binds this rank to its GPU
    dist.init_process_group(backend, device_id=device if backend == "nccl" else None)
    os.makedirs(args.out, exist_ok=True)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    dist.barrier()  # start together, to make the interleaving likely
    for i in range(args.lines):
        print("rank", rank, "line", i, "of", args.lines)  # several writes per line
    dist.barrier()
    if rank == 0:
        print(f"rank 0 alone: {world_size} ranks printed {args.lines} lines each")
        with open(os.path.join(args.out, "metrics.json"), "w") as f:
            json.dump({"world_size": world_size, "backend": backend,
                       "ranks": [{"lines": args.lines}] * world_size}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
