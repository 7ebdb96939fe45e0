"""Notebook 09 §2, BatchNorm: each rank normalises with its own batch statistics.

    torchrun --nproc-per-node 2 launchers/batchnorm_stats.py

One global batch of notebook 04's images, split over the ranks. For the first BatchNorm
layer of notebook 04's CNN, each rank computes the statistics of (a) its own slice, as
plain BatchNorm does under DDP, (b) the whole global batch, synchronised by hand with one
all-reduce of [sum, sum of squares, count] per channel (SyncBatchNorm reaches the same
statistics another way: it all-gathers every rank's mean, invstd and count), and (c) the
whole batch in one process (every rank can compute it: all ranks build the same batch).

How close must (b) be to (c)? Exactly as close as one process is to itself: the noise
floor is the largest difference between (c) and the statistics one process gets by adding
the ranks' partial sums in every possible order (all of them up to 5 ranks), since an
all-reduce adds them in one of those orders. All of it in fp32 and in float64 (the
mathematics). On GPUs it also runs SyncBatchNorm itself.
"""

import argparse
import copy
import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
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


def sum_stats(h):
    """[sum, sum of squares, count] per channel: what the ranks add up."""
    dims = [d for d in range(h.dim()) if d != 1]  # every dimension except the channels
    count = torch.tensor([h.numel() / h.shape[1]], dtype=h.dtype, device=h.device)
    return torch.cat([h.sum(dims), (h * h).sum(dims), count])


def synced_batch_stats(h):
    """Mean and (biased) variance per channel over ALL ranks' samples: one all-reduce."""
    stats = sum_stats(h)
    dist.all_reduce(stats)  # sum over ranks of [sum, sum of squares, count]
    c = h.shape[1]
    mean = stats[:c] / stats[-1]
    return mean, stats[c : 2 * c] / stats[-1] - mean * mean


def every_sum(parts):
    """Every result of adding `parts` with float additions, in any order and grouping."""
    if len(parts) == 1:
        yield parts[0]
        return
    first, rest = parts[0], parts[1:]
    for mask in range(2 ** len(rest) - 1):  # which of `rest` go into first's group
        left = [first] + [p for i, p in enumerate(rest) if mask >> i & 1]
        right = [p for i, p in enumerate(rest) if not mask >> i & 1]
        for a in every_sum(left):
            for b in every_sum(right):
                yield a + b


def noise_floor(conv, x, world_size, single_mean, single_var):
    """How far one process's own statistics move when it adds the same sums in other orders:
    (largest mean difference, largest variance difference) against `single_*`."""
    parts = [sum_stats(conv(chunk)) for chunk in x.chunk(world_size)]  # as each rank has it
    if world_size <= 5:
        totals = list(every_sum(parts))
    else:  # too many orders: the rings, both ways round
        rings = [parts[i:] + parts[:i] for i in range(world_size)]
        totals = [sum(r[1:], r[0]) for r in rings + [r[::-1] for r in rings]]
    totals = torch.stack(totals + [sum_stats(conv(x))])  # and the whole batch at once
    c, count = len(single_mean), totals[0, -1]
    means = totals[:, :c] / count  # the mean from every order of the sums
    squares = totals[:, c : 2 * c] / count
    # an all-reduce may add the sums in one order and the squares in another: every pair
    variances = squares[None, :, :] - means[:, None, :] * means[:, None, :]
    return diff(means, single_mean), diff(variances, single_var)


def diff(a, b):
    return (a - b).abs().max().item()


def compare(model, x, rank, world_size, device):
    """Own-slice, hand-synced and one-process statistics of the first BatchNorm's input."""
    conv = model.features[0][0]  # the first conv; BatchNorm normalises its output
    x = x.to(device, model_dtype(model))
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


def model_dtype(model):
    return next(model.parameters()).dtype


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--global-batch", type=int, default=48)
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
        # the comparison needs the same kernels for a slice and the whole batch, in fp32:
        # cuDNN's default may pick nondeterministic or TF32 (10-bit mantissa) algorithms
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    dist.init_process_group(backend, device_id=device if backend == "nccl" else None)
    os.makedirs(args.out, exist_ok=True)

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
        with open(os.path.join(args.out, "metrics.json"), "w") as f:
            json.dump({"world_size": world_size, "backend": backend, "ranks": gathered,
                       "global_batch": args.global_batch, "syncbn": syncbn,
                       "cpu_capability": torch.backends.cpu.get_cpu_capability()}, f)
        for r, rec in enumerate(gathered):
            print(f"rank {r}: {rec['samples']} samples, |mean - one-process mean|: own slice "
                  f"{rec['local_mean_diff']:.2e}, hand-synced {rec['synced_mean_diff']:.2e}, "
                  f"noise floor {rec['floor_mean']:.2e} "
                  f"(float64: {rec['synced_mean_diff_fp64']:.1e}, "
                  f"floor {rec['floor_mean_fp64']:.1e})")
        print("SyncBatchNorm:", syncbn)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
