"""DDP training that survives beyond one machine: any number of nodes, restarts, resume.

    torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d \
        --rdzv-endpoint HEAD_NODE:29400 --rdzv-id job42 launchers/multinode_train.py

What it adds to a single-node DDP script:
- every rank prints who it is: RANK, LOCAL_RANK, GROUP_RANK (its node), WORLD_SIZE;
- a checkpoint every --save-every steps, written by rank 0 to a temporary file, synced to
  disk and renamed over the last one (a crash or a power cut mid-write never leaves a torn
  checkpoint);
- on start it resumes from that checkpoint if there is one: after torchrun restarts a
  failed group (--max-restarts), training continues where the checkpoint left it;
- the batch of step s is the same whatever the world size: a global batch drawn from
  seed s and split between the ranks, so a resumed run replays the same data;
- rank 0 appends each step (its pid, step, loss, world size) to progress.jsonl, so the
  steps of every attempt, the killed ones included, stay in one file;
- --dtype float64 trains in double precision, to compare two runs by their mathematics
  rather than by fp32 rounding.
"""

import argparse
import json
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401 - before init_process_group: see ddp_first_run.py
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def device_and_backend(requested: str, local_rank: int, local_world_size: int,
                       n_gpus: int) -> tuple[torch.device, str]:
    """Where this rank computes and how the ranks talk: the one place that decides.
    NCCL needs a GPU of its own for every rank of this node (LOCAL_WORLD_SIZE, not the
    job's WORLD_SIZE: 2 nodes x 8 GPUs is 16 ranks on 8 GPUs each)."""
    if requested == "cuda":
        device = torch.device("cuda", local_rank % n_gpus)
        return device, "nccl" if local_world_size <= n_gpus else "gloo"
    return torch.device("cpu"), "gloo"


def global_batch(step, size):
    """The whole job's batch for `step`: identical on every rank, every attempt."""
    g = torch.Generator().manual_seed(10_000 + step)
    x = torch.randn(size, 20, generator=g)
    true_weights = torch.randn(20, 1, generator=torch.Generator().manual_seed(42))
    return x, x @ true_weights + 0.1 * torch.randn(size, 1, generator=g)


def save_checkpoint(path, model, optimizer, step):
    """Model, optimizer (its momentum) and step, to a temporary file renamed over `path`."""
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "step": step}, f)
        f.flush()
        os.fsync(f.fileno())  # on disk before the rename: a power cut cannot leave it torn
    os.replace(tmp, path)  # atomic: readers see the old checkpoint or the new one
    folder = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(folder)  # the rename on disk too, or a power cut may bring the old one back
    finally:
        os.close(folder)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--global-batch", type=int, default=96, help="split over all ranks")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--save-every", type=int, default=5, help="checkpoint every N steps")
    parser.add_argument("--step-seconds", type=float, default=0.0, help="pretend work per step")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="out", help="metrics.json, progress.jsonl, checkpoints")
    args = parser.parse_args()

    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    n_gpus = torch.cuda.device_count() if args.device == "cuda" else 0
    device, backend = device_and_backend(args.device, int(os.environ["LOCAL_RANK"]),
                                         int(os.environ["LOCAL_WORLD_SIZE"]), n_gpus)
    if device.type == "cuda":
        torch.cuda.set_device(device)  # before init: NCCL binds this rank to its GPU
    dist.init_process_group(backend, device_id=device if backend == "nccl" else None)
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    identity = {name: os.environ[name] for name in
                ("RANK", "LOCAL_RANK", "GROUP_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")}
    identity.update(host=socket.gethostname(), pid=os.getpid(), restart=restart)
    print("identity", *(f"{k}={v}" for k, v in identity.items()), flush=True)

    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 1)).to(device, dtype)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    os.makedirs(args.out, exist_ok=True)
    ckpt_path = os.path.join(args.out, "checkpoint.pt")
    start_step = 0
    if os.path.exists(ckpt_path):  # every rank loads it (a shared filesystem across nodes)
        ckpt = torch.load(ckpt_path, map_location=device)
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        start_step = ckpt["step"]
        if rank == 0:
            print(f"resumed from checkpoint at step {start_step} (restart {restart})", flush=True)
    ddp_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)

    if args.global_batch % world_size:
        raise SystemExit(f"--global-batch {args.global_batch} must divide by {world_size} ranks")
    per_rank = args.global_batch // world_size
    losses = []
    for step in range(start_step, args.steps):
        x, y = global_batch(step, args.global_batch)
        mine = slice(rank * per_rank, (rank + 1) * per_rank)  # this rank's share of the batch
        x, y = x[mine].to(device, dtype), y[mine].to(device, dtype)
        loss = nn.functional.mse_loss(ddp_model(x), y)
        optimizer.zero_grad()
        loss.backward()  # averaged over ranks: the same update as the whole global batch
        optimizer.step()
        losses.append(loss.item())
        time.sleep(args.step_seconds)
        done = step + 1
        if rank == 0:
            print(f"step {done:3d}/{args.steps}  loss {loss.item():.4f}  world {world_size}",
                  flush=True)
            with open(os.path.join(args.out, "progress.jsonl"), "a") as f:  # every attempt's
                f.write(json.dumps({"pid": os.getpid(), "step": done, "loss": loss.item(),
                                    "world": world_size}) + "\n")
            if done % args.save_every == 0 or done == args.steps:
                save_checkpoint(ckpt_path, model, optimizer, done)
        dist.barrier()  # nobody runs ahead of the checkpoint it may have to resume from

    gathered = [None] * world_size
    dist.gather_object(identity, gathered if rank == 0 else None)
    if rank == 0:
        torch.save(model.state_dict(), os.path.join(args.out, "final.pt"))
        with open(os.path.join(args.out, "metrics.json"), "w") as f:
            json.dump({"world_size": world_size, "backend": backend, "ranks": gathered,
                       "restart_count": restart, "resumed_from_step": start_step,
                       "steps": args.steps, "losses_this_attempt": losses,
                       "cpu_capability": torch.backends.cpu.get_cpu_capability()}, f)
    del ddp_model  # release DDP before the process group (see ddp_first_run.py)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
