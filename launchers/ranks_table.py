"""Who is who: every rank reports what torchrun told it and what it runs on.

    torchrun --nproc-per-node 2 launchers/ranks_table.py
"""

import argparse
import json
import os
import socket

import torch
import torch.distributed as dist


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="out", help="folder for metrics.json (rank 0 writes)")
    args = parser.parse_args()

    # torchrun started this file WORLD_SIZE times; each copy learns who it is from its environment
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    if args.device == "cuda":
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        # NCCL needs a GPU of its own per rank; ranks that share a GPU use gloo
        backend = "nccl" if world_size <= torch.cuda.device_count() else "gloo"
    else:
        device, backend = torch.device("cpu"), "gloo"
    # blocks until all WORLD_SIZE ranks have met at MASTER_ADDR:MASTER_PORT, then connects them
    dist.init_process_group(backend)

    row = {
        "rank": dist.get_rank(),
        "local_rank": local_rank,
        "world_size": dist.get_world_size(),
        "pid": os.getpid(),
        "parent_pid": os.getppid(),
        "host": socket.gethostname(),
        "device": str(device),
        "backend": dist.get_backend(),
        "master": f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
    }
    print("hello from", json.dumps(row))  # every rank prints: this lesson is about ranks

    rows = [None] * world_size
    dist.all_gather_object(rows, row)  # our first collective: everyone gets everyone's row
    if rank == 0:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "metrics.json"), "w") as f:
            json.dump({"world_size": world_size, "backend": backend, "ranks": rows}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
