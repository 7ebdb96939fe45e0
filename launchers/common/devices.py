"""Where a rank computes and how the ranks talk, chosen in one place (notebook 03 writes it out).

Every launcher calls this with what torchrun told its rank; the CPU runs call it too, so the
one branch the GPU tiers take is the same code the course runs here. `init_distributed` is
notebook 03's torchrun preamble in one call, for the launchers after it (importing it
imports torch.distributed.nn first, as notebook 03 explains).
"""

import os

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401 - before any process group: see ddp_first_run.py


def device_and_backend(requested: str, local_rank: int, local_world_size: int,
                       n_gpus: int) -> tuple[torch.device, str]:
    """Where this rank computes and how the ranks talk: the one place that decides.
    NCCL needs a GPU of its own for every rank of this node (LOCAL_WORLD_SIZE, not the
    job's WORLD_SIZE: 2 nodes x 8 GPUs is 16 ranks on 8 GPUs each)."""
    if requested == "cuda":
        device = torch.device("cuda", local_rank % n_gpus)
        return device, "nccl" if local_world_size <= n_gpus else "gloo"
    return torch.device("cpu"), "gloo"


def init_distributed(requested: str, **init_kwargs) -> tuple[torch.device, str]:
    """Under torchrun: pick this rank's device and backend, make its GPU current, join the
    process group (`init_kwargs`: e.g. timeout=). Returns (device, backend)."""
    n_gpus = torch.cuda.device_count() if requested == "cuda" else 0
    device, backend = device_and_backend(requested, int(os.environ["LOCAL_RANK"]),
                                         int(os.environ["LOCAL_WORLD_SIZE"]), n_gpus)
    if device.type == "cuda":
        torch.cuda.set_device(device)  # before init: NCCL binds this rank to its GPU
    # device_id: NCCL connects the ranks now, so a broken GPU or network fails here
    dist.init_process_group(backend, device_id=device if backend == "nccl" else None,
                            **init_kwargs)
    return device, backend
