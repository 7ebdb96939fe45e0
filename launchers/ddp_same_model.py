"""Notebook 01's model under DDP: every rank reports its memory, to compare with DataParallel.

    torchrun --nproc-per-node 2 launchers/ddp_same_model.py --steps 5

Each rank reports the tensor bytes of its step by kind (weights, gradients, DDP's gradient
buckets, optimizer state, its share of the batch, what autograd saves, outputs and their
gradient: the same accounting as notebook 01's ledger, nb01/tensor_bytes.py), its peak
resident memory (RSS: what the OS sees, allocator caches and libraries included) and, on a
GPU, the allocator's peak.
"""

import argparse
import json
import os

import psutil
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from common.devices import init_distributed
from nb01.tensor_bytes import nbytes, peak_rss_bytes, saved_bytes
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=256, help="global, split over ranks")
    parser.add_argument("--in-features", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="out", help="folder for metrics.json (rank 0 writes)")
    args = parser.parse_args()

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device, backend = init_distributed(args.device)
    rss_before = psutil.Process().memory_info().rss  # before the model (the first DDP(...)
    # also imports torch._dynamo: tens of MB of Python modules, on every rank alike)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(args.in_features, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, args.classes)).to(device)
    ddp_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.01, momentum=0.9)
    per_rank = args.batch_size // world_size  # each rank: its own share of the global batch
    data = torch.Generator().manual_seed(1000 + rank)
    losses, held = [], {}
    for _ in range(args.steps):
        x = torch.randn(per_rank, args.in_features, generator=data).to(device)
        y = torch.randint(args.classes, (per_rank,), generator=data).to(device)
        optimizer.zero_grad(set_to_none=True)
        known = {t.untyped_storage().data_ptr() for t in [x, y, *model.parameters()]}
        saved, hooks = saved_bytes(known)  # count what the forward and the loss keep
        with hooks:
            out = ddp_model(x)
            loss = F.cross_entropy(out, y)
        out.register_hook(lambda g: held.update({"output grads": g.nbytes}))
        loss.backward()  # all-reduce of the gradients: no device collects the others' work
        optimizer.step()  # every rank steps its own replica
        losses.append(loss.item())
        held.update({"weights": nbytes(model.parameters()),
                     "gradients": nbytes(p.grad for p in model.parameters()),
                     "optimizer state": nbytes(v for st in optimizer.state.values()
                                               for v in st.values() if torch.is_tensor(v)),
                     "batch": nbytes([x, y]), "activations": sum(saved.values()),
                     "outputs": out.nbytes})
    # DDP's buckets: a second copy of the gradients, unless gradient_as_bucket_view=True
    logging = ddp_model._get_ddp_logging_data()
    buckets = sum(int(b) for b in str(logging.get("bucket_sizes", "")).split(",") if b)
    held["DDP buckets"] = 0 if logging.get("gradient_as_bucket_view") else buckets
    if rank == 0:
        print(f"{args.steps} steps, global batch {per_rank * world_size}, loss {losses[-1]:.4f}")

    cuda_peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    record = {"rank": rank, "rss_before_model": rss_before, "peak_rss": peak_rss_bytes(),
              "cuda_peak": cuda_peak, "tensor_bytes": held}
    print(f"rank {rank}: tensors {sum(held.values()) / 2**20:.1f} MB, peak RSS "
          f"{record['peak_rss'] / 2**20:.0f} MB (+{(record['peak_rss'] - rss_before) / 2**20:.0f} "
          "MB over its start)")
    gathered = [None] * world_size
    dist.gather_object(record, gathered if rank == 0 else None)
    if rank == 0:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "metrics.json"), "w") as f:
            json.dump({"world_size": world_size, "backend": backend, "params":
                       sum(p.numel() for p in model.parameters()), "ranks": gathered}, f)
    del ddp_model  # release DDP before the process group (see ddp_first_run.py)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
