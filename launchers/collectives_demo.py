"""Who is who, then the collectives shown as data, on tensors tagged with each rank.

    torchrun --nproc-per-node 3 launchers/collectives_demo.py

Every rank first reports what torchrun told it (rank, pid, device, backend). Then rank r's
tensors hold 10*r + position (rank 1: 10, 11, 12, ...), so every number in a result says
where it came from; every rank records each tensor before and after each call.
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


def tagged(rank, length, device):
    """[10r, 10r+1, ..., 10r+length-1]: the tens say which rank, the units which position."""
    return torch.arange(length, dtype=torch.float32, device=device) + 10 * rank


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--length", type=int, default=4, help="elements per tensor")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="out", help="folder for metrics.json (rank 0 writes)")
    args = parser.parse_args()

    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    # init_process_group blocks until all WORLD_SIZE ranks have met at MASTER_ADDR:MASTER_PORT
    device, backend = device_and_backend(args.device, int(os.environ["LOCAL_RANK"]),
                                         int(os.environ["LOCAL_WORLD_SIZE"]),
                                         torch.cuda.device_count() if args.device == "cuda" else 0)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, device_id=device if backend == "nccl" else None)
    # gloo copies CUDA tensors through host memory for its collectives, but its send/recv
    # take CPU tensors only: with gloo (ranks sharing a GPU) the tensors stay on the CPU
    device = device if backend == "nccl" else torch.device("cpu")

    # 1. who am I? every rank prints its row: this part is about ranks
    identity = {
        "rank": dist.get_rank(),
        "local_rank": local_rank,
        "world_size": dist.get_world_size(),
        "pid": os.getpid(),
        "parent_pid": os.getppid(),
        "device": str(device),
        "backend": dist.get_backend(),
        "master": f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
    }
    print("hello from", json.dumps(identity))

    # 2. the collectives, each on freshly tagged tensors
    p, length = world_size, args.length
    seen = {}  # op name -> {"before": [...], "after": [...]} on this rank

    # broadcast: rank 0's tensor is copied to every rank
    x = tagged(rank, length, device)
    before = x.tolist()
    dist.broadcast(x, src=0)
    seen["broadcast"] = {"before": before, "after": x.tolist()}

    # all_reduce SUM: every rank ends with the element-wise sum over ranks
    x = tagged(rank, length, device)
    before = x.tolist()
    dist.all_reduce(x, op=dist.ReduceOp.SUM)
    seen["all_reduce_sum"] = {"before": before, "after": x.tolist()}

    # all_reduce AVG: the mean, what DDP does to gradients
    x = tagged(rank, length, device)
    before = x.tolist()
    dist.all_reduce(x, op=dist.ReduceOp.AVG)
    seen["all_reduce_avg"] = {"before": before, "after": x.tolist()}

    # all_gather: every rank ends with every rank's tensor, in rank order
    x = tagged(rank, length, device)
    gathered = torch.empty(p * length, device=device)
    dist.all_gather_single(gathered, x)
    seen["all_gather"] = {"before": x.tolist(), "after": gathered.tolist()}

    # reduce_scatter: sum over ranks, then rank r keeps only the r-th of p equal chunks
    x = tagged(rank, p * length, device)
    mine = torch.empty(length, device=device)
    dist.reduce_scatter_single(mine, x, op=dist.ReduceOp.SUM)
    seen["reduce_scatter"] = {"before": x.tolist(), "after": mine.tolist()}

    # send/recv: each rank sends to its right neighbour and receives from its left one
    x = tagged(rank, length, device)
    inbox = torch.full((length,), -1.0, device=device)
    right, left = (rank + 1) % p, (rank - 1) % p
    if p > 1:
        ops = [dist.P2POp(dist.isend, x, right), dist.P2POp(dist.irecv, inbox, left)]
        for request in dist.batch_isend_irecv(ops):  # both at once: nobody waits for the other
            request.wait()
    else:  # a ring of one: the neighbour is oneself, and the backends refuse to send to self
        inbox.copy_(x)
    seen["send_recv"] = {"before": x.tolist(), "after": inbox.tolist()}

    print(f"rank {rank}: all_reduce_sum {seen['all_reduce_sum']['before']} -> "
          f"{seen['all_reduce_sum']['after']}")
    per_rank = [None] * world_size
    dist.all_gather_object(per_rank, {"identity": identity, "ops": seen})  # everyone's records
    if rank == 0:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "metrics.json"), "w") as f:
            json.dump({"world_size": world_size, "backend": backend, "ranks": per_rank}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
