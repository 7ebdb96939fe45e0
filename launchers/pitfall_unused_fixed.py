"""Notebook 09 §1, unused parameters, fixed two ways, timed side by side.

    torchrun --nproc-per-node 2 launchers/pitfall_unused_fixed.py

(a) `find_unused_parameters=True`: after every forward DDP walks the autograd graph to find
    the parameters that will get no gradient, and marks them ready itself; after backward
    it all-reduces a map of the parameters each rank used (one more collective per step).
(b) the better fix: every parameter takes part in every step (the auxiliary loss is always
    computed, weighted 0 on the steps that do not want it), and DDP needs no search.
Both are trained in the same run, step for step alternately, so their step times compare.
Each step's collectives are counted with the process group's sequence number.
"""

import argparse
import json
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401 - before init_process_group: see ddp_first_run.py
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from train_step1_data import Net, make_dataset


def device_and_backend(requested: str, local_rank: int, local_world_size: int,
                       n_gpus: int) -> tuple[torch.device, str]:
    """Where this rank computes and how the ranks talk: the one place that decides.
    NCCL needs a GPU of its own for every rank of this node (LOCAL_WORLD_SIZE, not the
    job's WORLD_SIZE: 2 nodes x 8 GPUs is 16 ranks on 8 GPUs each)."""
    if requested == "cuda":
        device = torch.device("cuda", local_rank % n_gpus)
        return device, "nccl" if local_world_size <= n_gpus else "gloo"
    return torch.device("cpu"), "gloo"


class NetWithAux(Net):
    """Net plus an auxiliary classifier on the same features."""

    def __init__(self):
        super().__init__()
        self.aux = torch.nn.Linear(self.head.in_features, self.head.out_features)

    def forward(self, x, use_aux):
        features = self.features(x).amax(dim=(2, 3))
        logits = self.head(features)
        return (logits, self.aux(features)) if use_aux else (logits, None)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=16, help="per rank")
    parser.add_argument("--pg-timeout", type=lambda s: timedelta(seconds=float(s)),
                        help="seconds per collective (default: torch's, 30 min gloo, 10 NCCL)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="out", help="folder for metrics.json (rank 0 writes)")
    args = parser.parse_args()

    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    n_gpus = torch.cuda.device_count() if args.device == "cuda" else 0
    device, backend = device_and_backend(args.device, int(os.environ["LOCAL_RANK"]),
                                         int(os.environ["LOCAL_WORLD_SIZE"]), n_gpus)
    if device.type == "cuda":
        torch.cuda.set_device(device)  # before init: NCCL binds this rank to its GPU
    dist.init_process_group(backend, timeout=args.pg_timeout,
                            device_id=device if backend == "nccl" else None)
    os.makedirs(args.out, exist_ok=True)

    torch.manual_seed(0)
    ids = [device.index] if device.type == "cuda" else None
    variants = {}
    for name in ("find_unused", "always_used"):
        torch.manual_seed(0)
        model = NetWithAux().to(device)
        ddp_model = DDP(model, device_ids=ids, find_unused_parameters=name == "find_unused")
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        variants[name] = (model, ddp_model, optimizer)
    times = {name: [] for name in variants}
    calls = {name: [] for name in variants}  # collectives per step
    group = dist.distributed_c10d._get_default_group()  # every collective advances its count
    x_all, y_all = make_dataset(args.steps * args.batch_size * world_size, seed=1)

    for step in range(args.steps):
        first = (step * world_size + rank) * args.batch_size
        x, y = x_all[first : first + args.batch_size], y_all[first : first + args.batch_size]
        x, y = x.to(device), y.to(device)
        for name, (_model, ddp_model, optimizer) in variants.items():
            if device.type == "cuda":
                torch.cuda.synchronize(device)  # nothing queued from before counts as this step
            before = group._get_sequence_number_for_group()
            tick = time.perf_counter()
            if name == "find_unused":  # (a) the branch stays conditional; DDP searches
                logits, aux_logits = ddp_model(x, use_aux=step % 2 == 0)
                aux_weight = 0.3
            else:  # (b) the branch runs every step; its loss counts on even steps only
                logits, aux_logits = ddp_model(x, use_aux=True)
                aux_weight = 0.3 if step % 2 == 0 else 0.0
            loss = F.cross_entropy(logits, y)
            if aux_logits is not None:
                loss = loss + aux_weight * F.cross_entropy(aux_logits, y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if device.type == "cuda":
                torch.cuda.synchronize(device)  # GPU work is asynchronous: time it, not its launch
            times[name].append(time.perf_counter() - tick)
            calls[name].append(group._get_sequence_number_for_group() - before)
        if rank == 0:
            print(f"step {step}  loss {loss.item():.4f}", flush=True)

    checksum = sum(p.double().sum().item() for p in variants["always_used"][0].parameters())
    gathered = [None] * world_size
    dist.gather_object({"checksum": checksum}, gathered if rank == 0 else None)
    if rank == 0:
        buckets = {n: v[1]._get_ddp_logging_data()["num_buckets_reduced"]  # in the last step
                   for n, v in variants.items()}
        with open(os.path.join(args.out, "metrics.json"), "w") as f:
            json.dump({"world_size": world_size, "backend": backend, "ranks": gathered,
                       "steps": args.steps, "step_s": times, "collectives_per_step": calls,
                       "buckets": buckets}, f)
    del variants, ddp_model  # release DDP before the process group (see ddp_first_run.py)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
