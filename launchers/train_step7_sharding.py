"""Beyond DDP (notebook 11): the same training, with the state sharded across ranks.

    torchrun --nproc-per-node 2 launchers/train_step7_sharding.py --strategy ddp fsdp

Notebook 05's loop at its core, with one new option, --strategy: ddp, zero (DDP + ZeRO-1's
ZeroRedundancyOptimizer) or fsdp (FSDP2's fully_shard), each in each --dtype, in turn, from
the same seed. Options, data, records: nb11/sharding_runs.py.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from common.chain_setup import same_gpu_kernels
from common.devices import init_distributed
from common.glyphs import lr_at
from nb11.rank_memory import DeepNet, RankMemory, trained_state
from nb11.sharding_runs import dcp_round_trip, record_run, run_data, run_options, write_runs
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler


def wrap(model, strategy, device, lr):
    """The one place the three strategies differ: how the model and its optimizer are wrapped."""
    if strategy == "fsdp":  # shard each block, then the rest (the head) at the root
        # our ranks, on our device type (left out, FSDP2 takes a GPU whenever one exists)
        mesh = init_device_mesh(device.type, (dist.get_world_size(),))
        for module in model.features:
            if isinstance(module, nn.Sequential):
                fully_shard(module, mesh=mesh)  # one all-gather unit: its parameters together
        fully_shard(model, mesh=mesh)
        return model, torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    ddp_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None,
                    gradient_as_bucket_view=True)  # the gradients live in DDP's buckets
    if strategy == "zero":  # each rank keeps the AdamW state of its share of the parameters
        # and broadcasts it tensor by tensor (parameters_as_bucket_view=False, the default)
        return ddp_model, ZeroRedundancyOptimizer(
            model.parameters(), optimizer_class=torch.optim.AdamW, lr=lr, weight_decay=0.01)
    return ddp_model, torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)


def train(strategy, dtype, args, device, out):
    """One training run from seed 0: what each rank held, its step times, the trained model."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    ledger = RankMemory(device)  # what this rank holds, counted (nb11/rank_memory.py)
    torch.manual_seed(0)  # the same initial weights everywhere, whatever the strategy
    model = DeepNet(args.classes, args.width, args.norm, args.depth).to(device, dtype)
    train_set, probe_x = run_data(args, dtype, device)
    ledger.before_wrapping(model, train_set.tensors[0][: args.batch_size].to(device))
    train_model, optimizer = wrap(model, strategy, device, args.lr)
    ledger.wrapped()

    sampler = DistributedSampler(train_set, shuffle=True, seed=0)  # rank's share, shuffled
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    total_steps = args.epochs * len(loader)
    n_params = sum(p.numel() for p in model.parameters())
    if rank == 0:
        print(f"strategy {strategy}, {str(dtype).split('.')[1]}: {n_params} parameters, "
              f"{total_steps} steps of {args.batch_size * world_size} samples over {world_size} "
              "rank(s)", flush=True)

    losses, step_times, step = [], [], 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)  # a new shuffle every epoch, the same permutation on all ranks
        for x, y in loader:
            tick = time.perf_counter()
            loss = F.cross_entropy(train_model(x.to(device)), y.to(device))
            loss.backward()  # DDP: all-reduce; FSDP: reduce-scatter (+ all-gathers before)
            ledger.after_backward(model)  # the gradients this rank holds
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, total_steps, args)
            optimizer.step()  # ZeRO: step my share, then broadcast it to the other ranks
            optimizer.zero_grad(set_to_none=True)
            step += 1
            ledger.step_done(step)  # counts the collective calls of the third step
            if device.type == "cuda":
                torch.cuda.synchronize(device)  # GPU work is asynchronous: time it, not its launch
            step_times.append(time.perf_counter() - tick)
            if rank == 0:
                losses.append(loss.item())
        if rank == 0:
            print(f"epoch {epoch}  step {step}  loss {loss.item():.4f}", flush=True)

    held = ledger.held(model, optimizer)
    params, probe_out = trained_state(model, train_model, probe_x)  # whole, on every rank
    reload_diff = None
    if args.dcp and strategy == "fsdp":  # each rank writes its own shards; nothing is gathered
        torch.manual_seed(1)  # a fresh model with other weights, wrapped the same way
        fresh = DeepNet(args.classes, args.width, args.norm, args.depth).to(device, dtype)
        folder = os.path.join(args.dcp, os.path.basename(out))
        reload_diff = dcp_round_trip(model, optimizer, *wrap(fresh, strategy, device, args.lr),
                                     folder, probe_x, probe_out)
    del train_model  # release DDP before the next run and the process group (ddp_first_run.py)
    return record_run(out, held, params, probe_x, probe_out, strategy=strategy,
                      dtype=str(dtype).split(".")[1], n_params=n_params, steps=step, losses=losses,
                      step_times_s=step_times[3:] or step_times,  # warm-up, warm-up, counted
                      dcp_reload_max_diff=reload_diff)


def main():
    args = run_options(argparse.ArgumentParser(description=__doc__.split("\n")[0])).parse_args()
    device, backend = init_distributed(args.device)
    if device.type == "cuda":
        same_gpu_kernels()  # compared weight by weight: no kernel noise for AdamW to grow
    if dist.get_rank() == 0:
        print(f"{dist.get_world_size()} rank(s), backend {backend}", flush=True)
    runs = {f"{s}-{d}": train(s, getattr(torch, d), args, device, f"{args.out}/{s}-{d}")
            for d in args.dtype for s in args.strategy}  # in turn, in these processes: one start
    write_runs(args.out, runs, backend, device)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
