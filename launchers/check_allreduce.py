"""Environment check: every rank sends rank + 1; all-reduce must return the sum on every rank."""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from common.devices import device_and_backend  # launchers/common/devices.py


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="out", help="folder for metrics.json (rank 0 writes)")
    args = parser.parse_args()

    # torchrun tells every process who it is through environment variables
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    device, backend = device_and_backend(args.device, int(os.environ["LOCAL_RANK"]),
                                         int(os.environ["LOCAL_WORLD_SIZE"]),
                                         torch.cuda.device_count() if args.device == "cuda" else 0)
    if device.type == "cuda":
        torch.cuda.set_device(device)  # before init: NCCL binds this rank to its GPU

    start = time.perf_counter()
    # meet the other ranks (address and port: from torchrun); device_id: NCCL connects now
    dist.init_process_group(backend, device_id=device if backend == "nccl" else None)
    init_seconds = time.perf_counter() - start

    value = torch.tensor([rank + 1.0], device=device)
    sent = value.item()
    dist.all_reduce(value)  # in place: every rank now holds the sum over all ranks
    received = value.item()
    print(f"pid {os.getpid()} on {device} via {backend}: sent {sent:g}, received {received:g}")

    per_rank = [None] * world_size
    dist.all_gather_object(per_rank, {"rank": rank, "sent": sent, "received": received})
    if rank == 0:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "metrics.json"), "w") as f:
            json.dump({"world_size": world_size, "backend": backend,
                       "init_seconds": init_seconds, "ranks": per_rank}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
