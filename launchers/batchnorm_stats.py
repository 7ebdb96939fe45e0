"""Pitfall 4, BatchNorm: each rank normalises with its own batch statistics.

    torchrun --nproc-per-node 2 launchers/batchnorm_stats.py

One global batch of notebook 04's images, split over the ranks. For the first BatchNorm
layer of notebook 04's CNN, each rank computes the statistics of (a) its own slice, as
plain BatchNorm does under DDP, (b) the whole global batch, synchronised by hand with one
all-reduce of [sum, sum of squares, count] per channel, which is what SyncBatchNorm does
in every forward, and (c) the whole batch in one process (every rank can compute it: all
ranks build the same global batch). On GPUs it also runs SyncBatchNorm itself.
"""

import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from train_step1_data import Net, make_dataset


def synced_batch_stats(h):
    """Mean and (biased) variance per channel over ALL ranks' samples: one all-reduce."""
    dims = [d for d in range(h.dim()) if d != 1]  # every dimension except the channels
    count = torch.tensor([h.numel() / h.shape[1]], dtype=h.dtype, device=h.device)
    stats = torch.cat([h.sum(dims), (h * h).sum(dims), count])
    dist.all_reduce(stats)  # sum over ranks of [sum, sum of squares, count]
    c = h.shape[1]
    mean = stats[:c] / stats[-1]
    return mean, stats[c : 2 * c] / stats[-1] - mean * mean


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--global-batch", type=int, default=48)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="out", help="folder for metrics.json (rank 0 writes)")
    args = parser.parse_args()

    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    if args.device == "cuda":
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        backend = "nccl" if world_size <= torch.cuda.device_count() else "gloo"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend)
    os.makedirs(args.out, exist_ok=True)

    torch.manual_seed(0)
    model = Net().to(device)
    conv = model.features[0][0]  # the first conv; BatchNorm normalises its output
    x, _ = make_dataset(args.global_batch, seed=1)  # the same global batch on every rank
    mine = x.chunk(world_size)[rank].to(device)  # this rank's slice
    with torch.no_grad():
        h_local, h_all = conv(mine), conv(x.to(device))
        local_mean, local_var = h_local.mean((0, 2, 3)), h_local.var((0, 2, 3), unbiased=False)
        synced_mean, synced_var = synced_batch_stats(h_local)
        single_mean, single_var = h_all.mean((0, 2, 3)), h_all.var((0, 2, 3), unbiased=False)

    def diff(a, b):
        return (a - b).abs().max().item()

    record = {"samples": len(mine),
              "local_mean_diff": diff(local_mean, single_mean),
              "local_var_diff": diff(local_var, single_var),
              "synced_mean_diff": diff(synced_mean, single_mean),
              "synced_var_diff": diff(synced_var, single_var),
              "local_mean_ch0": local_mean[0].item(), "single_mean_ch0": single_mean[0].item()}

    try:  # the real thing: GPU tensors only
        sync_model = nn.SyncBatchNorm.convert_sync_batchnorm(Net()).to(device)
        sync_model.load_state_dict(model.state_dict())
        sync_model(mine)  # train mode: every BatchNorm all-reduces its statistics
        bn = sync_model.features[0][1]
        reference = Net().to(device)
        reference.load_state_dict(model.state_dict())
        reference(x.to(device))  # one process, the whole batch
        record["syncbn_running_mean_diff"] = diff(bn.running_mean,
                                                  reference.features[0][1].running_mean)
        syncbn = "ran"
    except ValueError as error:
        syncbn = str(error)

    gathered = [None] * world_size
    dist.gather_object(record, gathered if rank == 0 else None)
    if rank == 0:
        with open(os.path.join(args.out, "metrics.json"), "w") as f:
            json.dump({"world_size": world_size, "backend": backend, "ranks": gathered,
                       "global_batch": args.global_batch, "syncbn": syncbn}, f)
        for r, rec in enumerate(gathered):
            print(f"rank {r}: {rec['samples']} samples, |own mean - single-process mean| "
                  f"{rec['local_mean_diff']:.2e}, hand-synced {rec['synced_mean_diff']:.2e}")
        print("SyncBatchNorm:", syncbn)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
