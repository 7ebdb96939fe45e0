"""Notebook 09 §2, BatchNorm: each rank normalises with its own batch statistics.

    torchrun --nproc-per-node 2 launchers/batchnorm_stats.py

One global batch of notebook 04's images, split over the ranks. For the first BatchNorm
layer of notebook 04's CNN, each rank computes the statistics of (a) its own slice, as
plain BatchNorm does under DDP, (b) the whole global batch, synchronised by hand with one
all-reduce of [sum, sum of squares, count] per channel (SyncBatchNorm reaches the same
statistics another way: it all-gathers every rank's mean, invstd and count), and (c) the
whole batch in one process (every rank can compute it: all ranks build the same batch).

How close must (b) be to (c)? Exactly as close as one process is to itself: the noise
floor of nb09/batchnorm_noise_floor.py, one process adding the ranks' partial sums in
every order an all-reduce may take. All of it in fp32 and in float64 (the mathematics).
On GPUs it also runs SyncBatchNorm itself.
"""

import argparse
import copy
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from common.devices import init_distributed
from common.glyphs import Net, make_dataset
from common.pitfall_harness import write_metrics
from nb09.batchnorm_noise_floor import diff, noise_floor, print_comparison, sum_stats


def synced_batch_stats(h):
    """Mean and (biased) variance per channel over ALL ranks' samples: one all-reduce."""
    stats = sum_stats(h)
    dist.all_reduce(stats)  # sum over ranks of [sum, sum of squares, count]
    c = h.shape[1]
    mean = stats[:c] / stats[-1]
    return mean, stats[c : 2 * c] / stats[-1] - mean * mean


def compare(model, x, rank, world_size, device):
    """Own-slice, hand-synced and one-process statistics of the first BatchNorm's input."""
    conv = model.features[0][0]  # the first conv; BatchNorm normalises its output
    x = x.to(device, next(model.parameters()).dtype)
    mine = x.chunk(world_size)[rank]  # this rank's slice
    with torch.no_grad():
        h_local, h_all = conv(mine), conv(x)
        local_mean, local_var = h_local.mean((0, 2, 3)), h_local.var((0, 2, 3), unbiased=False)
        synced_mean, synced_var = synced_batch_stats(h_local)
        single_mean, single_var = h_all.mean((0, 2, 3)), h_all.var((0, 2, 3), unbiased=False)
        floor_mean, floor_var = noise_floor(conv, x, world_size, single_mean, single_var)
    return {"local_mean_diff": diff(local_mean, single_mean),
            "local_var_diff": diff(local_var, single_var),
            "synced_mean_diff": diff(synced_mean, single_mean),
            "synced_var_diff": diff(synced_var, single_var),
            "floor_mean": floor_mean, "floor_var": floor_var,
            "local_mean_ch0": local_mean[0].item(), "single_mean_ch0": single_mean[0].item()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--global-batch", type=int, default=48)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="out", help="folder for metrics.json (rank 0 writes)")
    args = parser.parse_args()

    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    device, backend = init_distributed(args.device)
    if device.type == "cuda":  # the same fp32 kernels for a slice and the whole batch: cuDNN's
        # default may pick nondeterministic or TF32 (10-bit mantissa) algorithms
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False

    torch.manual_seed(0)
    model = Net().to(device)
    x, _ = make_dataset(args.global_batch, seed=1)  # the same global batch on every rank
    mine = x.chunk(world_size)[rank].to(device)  # this rank's slice
    record = {"samples": len(mine), **compare(model, x, rank, world_size, device)}
    # the same in float64: the mathematics, with rounding half a billion times smaller
    fp64 = compare(copy.deepcopy(model).double(), x, rank, world_size, device)
    record.update({f"{name}_fp64": value for name, value in fp64.items()})

    try:  # the real thing: GPU tensors only
        sync_model = nn.SyncBatchNorm.convert_sync_batchnorm(Net()).to(device)
        sync_model.load_state_dict(model.state_dict())
        sync_model(mine)  # train mode: every BatchNorm all-gathers its statistics
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
        write_metrics(args.out, world_size=world_size, backend=backend, ranks=gathered,
                      global_batch=args.global_batch, syncbn=syncbn,
                      cpu_capability=torch.backends.cpu.get_cpu_capability())
        print_comparison(gathered)
        print("SyncBatchNorm:", syncbn)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
