"""Environment check: every rank sends rank + 1; all-reduce must return the sum on every rank."""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="out", help="folder for metrics.json (rank 0 writes)")
    args = parser.parse_args()

    # torchrun tells every process who it is through environment variables
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

    start = time.perf_counter()
    dist.init_process_group(backend)  # meet the other ranks (address and port: from torchrun)
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
