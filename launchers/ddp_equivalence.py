"""The proof: DDP over N ranks with B/N samples each equals one process with the global batch B.

    torchrun --nproc-per-node 2 launchers/ddp_equivalence.py --steps 20

Every rank trains the same model from the same seed over the same global batches twice: alone
on each whole batch of B (no communication: nb05/reordered_sums.py), and under DDP on its
slice of B/N; then compares every parameter. In float64 (rounding about 1e-16): a mean loss
(equal, asserted), a sum loss (DDP averages: N times too small a step), a sum loss with DDP's
lr x N (equal, asserted), BatchNorm (per-rank statistics), SyncBatchNorm (equal, asserted; DDP
refuses it on CPU). In float32 the mean case stands beside its noise floor: the same single
process on the same batches summed in other orders, compared pair by pair (DDP's fp32 sum is
one more order), and DDP compared with each of them.
"""

import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from common.chain_setup import same_gpu_kernels
from common.devices import init_distributed
from common.glyphs import Net, make_dataset
from nb05.reordered_sums import fp32_noise_floor, max_diff, train
from torch.nn.parallel import DistributedDataParallel as DDP

# float64 after 20 steps of this model: about 1e-15 of rounding; 1e-9, a million times that
F64_EQUAL = 1e-9


def run_case(name, norm, reduction, lr_factor, args, device, batches, sync_bn=False):
    """Train (a) alone on global batches and (b) under DDP on this rank's slices; compare.
    -> (the comparison, the single process's model, the DDP-trained model)"""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    b = args.batch_size  # per rank; the global batch is b x world_size
    my_slices = [(gx[rank * b : (rank + 1) * b], gy[rank * b : (rank + 1) * b])
                 for gx, gy in batches]  # fmt: skip
    dtype = batches[0][0].dtype
    lr = args.lr if reduction == "mean" else args.lr / (b * world_size)  # a sum loss is B x larger

    torch.manual_seed(0)
    single = Net(args.classes, args.width, norm).to(device, dtype)
    train(single, batches, lr, reduction)
    torch.manual_seed(0)  # the very same initial weights
    model = Net(args.classes, args.width, norm).to(device, dtype)
    if sync_bn:
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    train(ddp, my_slices, lr * lr_factor, reduction)
    diff = max_diff(model, single)
    if rank == 0:
        print(f"{name:<11} {str(dtype).removeprefix('torch.'):<8} max |DDP - single| = {diff:.3e}")
    result = {"max_abs_diff": diff, "bitwise_equal": diff == 0.0, "dtype": str(dtype)}
    return result, single, model


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=16, help="per rank: B/N")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--width", type=int, default=8)
    parser.add_argument("--classes", type=int, default=8)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="out", help="folder for metrics.json (rank 0 writes)")
    args = parser.parse_args()

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device, backend = init_distributed(args.device)
    if device.type == "cuda":
        same_gpu_kernels()  # compare DDP with one process, not two cuDNN algorithms
    if rank == 0:
        print(f"global batch B = {args.batch_size * world_size} in one process, against "
              f"{world_size} rank(s) x {args.batch_size} under DDP; {args.steps} SGD steps")

    B = args.batch_size * world_size
    x, y = make_dataset(args.steps * B, seed=1, classes=args.classes)
    batches = {dtype: [(x[t * B : (t + 1) * B].to(device, dtype), y[t * B : (t + 1) * B].to(device))
                       for t in range(args.steps)] for dtype in (torch.float64, torch.float32)}
    f64 = batches[torch.float64]
    cases = {
        "mean": run_case("mean", "layer", "mean", 1, args, device, f64)[0],
        "sum": run_case("sum", "layer", "sum", 1, args, device, f64)[0],
        "sum_scaled": run_case("sum_scaled", "layer", "sum", world_size, args, device, f64)[0],
        "batchnorm": run_case("batchnorm", "batch", "mean", 1, args, device, f64)[0],
    }
    try:
        cases["syncbn"] = run_case("syncbn", "batch", "mean", 1, args, device, f64,
                                   sync_bn=True)[0]  # fmt: skip
        syncbn = "ran"
    except Exception as err:  # noqa: BLE001 - on CPU DDP refuses SyncBatchNorm: report its words
        syncbn = f"{type(err).__name__}: {str(err).splitlines()[0]}"
        if rank == 0:
            print(f"syncbn      could not run here: {syncbn}")
    fp32, single32, ddp32 = run_case("mean", "layer", "mean", 1, args, device,
                                     batches[torch.float32])  # fmt: skip
    floors, fp32_ddp = fp32_noise_floor(args, device, batches[torch.float32], single32, ddp32)
    if rank == 0:
        print(f"fp32 noise floor: one process in {len(fp32_ddp)} summation orders, pair by pair: "
              f"{min(floors.values()):.3e} to {max(floors.values()):.3e}; DDP against each order: "
              f"{min(fp32_ddp.values()):.3e} to {max(fp32_ddp.values()):.3e}")

    for name in ("mean", "sum_scaled", "syncbn"):  # the cases that must match: float64 rounding
        if name in cases:
            assert cases[name]["max_abs_diff"] < F64_EQUAL, f"{name}: DDP differs from one process"
    gathered = [None] * world_size
    dist.gather_object(cases["mean"], gathered if rank == 0 else None)
    if rank == 0:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "metrics.json"), "w") as f:
            json.dump({"world_size": world_size, "backend": backend, "ranks": gathered,
                       "global_batch": B, "steps": args.steps, "cases": cases, "syncbn": syncbn,
                       "f64_equal_below": F64_EQUAL, "fp32_mean": fp32, "fp32_floor": floors,
                       "fp32_ddp_vs_orders": fp32_ddp,
                       "cpu_capability": torch.backends.cpu.get_cpu_capability()}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
