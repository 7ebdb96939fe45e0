"""Notebook 08 §2 (BROKEN ON PURPOSE): a mismatched raw collective, and how to make it speak.

    torchrun --nproc-per-node 2 launchers/collective_mismatch.py --pg-timeout 5
    TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun --nproc-per-node 2 launchers/collective_mismatch.py

Every rank all-reduces a tensor, but each a different shape (3 + rank). Plain, the backend
pairs them anyway: a crash or a wrong result, with no word of why. With
TORCH_DISTRIBUTED_DEBUG=DETAIL every collective is checked first across ranks, and the
error names the operation and the shapes. (Notebook 08 shows `monitored_barrier` on its
live ranks.)
"""

import argparse
import os
from datetime import timedelta

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
    parser.add_argument("--pg-timeout", type=lambda s: timedelta(seconds=float(s)),
                        help="seconds per collective (default: torch's, 30 min gloo, 10 NCCL)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="out")
    args = parser.parse_args()

    n_gpus = torch.cuda.device_count() if args.device == "cuda" else 0
    device, backend = device_and_backend(args.device, int(os.environ["LOCAL_RANK"]),
                                         int(os.environ["LOCAL_WORLD_SIZE"]), n_gpus)
    if device.type == "cuda":
        torch.cuda.set_device(device)  # before init: NCCL binds this rank to its GPU
    dist.init_process_group(backend, timeout=args.pg_timeout,
                            device_id=device if backend == "nccl" else None)
    rank = dist.get_rank()
    t = torch.ones(3 + rank, device=device)  # BUG: the shapes differ across ranks
    dist.all_reduce(t)
    print(f"all_reduce returned {t.tolist()} (no error: it paired tensors of different shapes)")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
