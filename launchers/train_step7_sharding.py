"""Beyond DDP (notebook 11): the same training, with the state sharded across ranks.

    torchrun --nproc-per-node 2 launchers/train_step7_sharding.py --strategy ddp fsdp

Notebook 05's training loop at its core (no accumulation, AMP, compile, logging, evaluation
or resume) with one new option, --strategy: ddp (every rank holds everything), zero (DDP +
ZeroRedundancyOptimizer: each rank keeps the optimizer state of its share, ZeRO stage 1) or
fsdp (FSDP2's fully_shard: parameters, gradients and optimizer state all sharded). Several
train in turn from the same seed, in the same processes, each in --dtype float32 and/or
float64; each rank counts what it holds (common/rank_memory.py). --dcp DIR: the FSDP2 runs
save a distributed checkpoint there and load it back. Rank 0 writes OUT/metrics.json and,
per run, OUT/<strategy>-<dtype>/params.pt and probe.pt.
"""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
import torch.nn.functional as F
from common.chain_setup import same_gpu_kernels
from common.devices import init_distributed
from common.glyphs import lr_at, make_dataset
from common.rank_memory import DeepNet, RankMemory, memory_kind, trained_state
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


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
        return ddp_model, ZeroRedundancyOptimizer(
            model.parameters(), optimizer_class=torch.optim.AdamW, lr=lr, weight_decay=0.01)
    return ddp_model, torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)


def checkpoint_round_trip(model, optimizer, strategy, folder, args, device, probe_x, probe_out):
    """Save a distributed checkpoint, load it into a fresh model wrapped the same way, and
    return the largest difference of the two models' outputs on the probe batch."""
    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=folder)
    torch.manual_seed(1)  # a fresh model with other weights
    fresh = DeepNet(args.classes, args.width, args.norm, args.depth).to(device, probe_x.dtype)
    fresh, fresh_optimizer = wrap(fresh, strategy, device, args.lr)
    inner = fresh.module if isinstance(fresh, DDP) else fresh
    model_state, optim_state = get_state_dict(inner, fresh_optimizer)
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=folder)  # each rank reads the shards it owns
    set_state_dict(inner, fresh_optimizer, model_state_dict=state["model"],
                   optim_state_dict=state["optim"])
    fresh.eval()
    with torch.no_grad():
        return (fresh(probe_x).cpu() - probe_out).abs().max().item()


def train(strategy, dtype, args, device, out):
    """One training run from seed 0: what each rank held, its step times, the trained model."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    ledger = RankMemory(device)  # what this rank holds, counted (common/rank_memory.py)
    torch.manual_seed(0)  # the same initial weights everywhere, whatever the strategy
    model = DeepNet(args.classes, args.width, args.norm, args.depth).to(device, dtype)
    size = {"image_size": args.image_size, "classes": args.classes, "noise": args.noise}
    train_x, train_y = make_dataset(args.train_size, seed=1, **size)
    train_x = train_x.to(dtype)
    ledger.before_wrapping(model, train_x[: args.batch_size].to(device))
    train_model, optimizer = wrap(model, strategy, device, args.lr)
    ledger.wrapped()

    train_set = TensorDataset(train_x, train_y)
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
            if device.type == "cuda":
                torch.cuda.synchronize(device)  # GPU work is asynchronous: time it, not its launch
            step_times.append(time.perf_counter() - tick)
            if rank == 0:
                losses.append(loss.item())
        if rank == 0:
            print(f"epoch {epoch}  step {step}  loss {loss.item():.4f}", flush=True)

    held = ledger.held(model, optimizer)
    if strategy == "ddp" or rank == 0:  # ZeRO/FSDP: rank 0's view, DDP: every rank's
        print(f"rank {rank}: parameters {held['param_bytes']} B, gradients {held['grad_bytes']} "
              f"B, optimizer state {held['optimizer_bytes']} B", flush=True)
    probe_x = make_dataset(16, seed=3, **size)[0].to(device, dtype)
    params, probe_out = trained_state(model, train_model, probe_x)  # whole, on every rank
    reload_diff = None
    if args.dcp and strategy == "fsdp":  # each rank writes its own shards; nothing is gathered
        folder = os.path.join(args.dcp, os.path.basename(out))
        reload_diff = checkpoint_round_trip(model, optimizer, strategy, folder, args, device,
                                            probe_x, probe_out)
    gathered = [None] * world_size
    dist.gather_object(held, gathered if rank == 0 else None)
    if rank == 0:
        os.makedirs(out, exist_ok=True)
        torch.save(params, os.path.join(out, "params.pt"))
        torch.save({"x": probe_x.cpu(), "out": probe_out}, os.path.join(out, "probe.pt"))
    del train_model  # release DDP before the next run and the process group (ddp_first_run.py)
    return {"ranks": gathered, "strategy": strategy, "dtype": str(dtype).split(".")[1],
            "n_params": n_params, "steps": step, "losses": losses,
            "step_times_s": step_times[2:] or step_times,  # the first steps warm up
            "dcp_reload_max_diff": reload_diff}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--depth", type=int, default=1, help="conv blocks of width 2W at the end")
    parser.add_argument("--image-size", type=int, default=16)
    parser.add_argument("--classes", type=int, default=8)
    parser.add_argument("--train-size", type=int, default=4096)
    parser.add_argument("--noise", type=float, default=0.3)
    parser.add_argument("--norm", choices=["batch", "layer"], default="batch")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--warmup", type=int, default=10, help="optimizer steps")
    parser.add_argument("--strategy", nargs="+", choices=["ddp", "zero", "fsdp"], default=["ddp"])
    parser.add_argument("--dtype", nargs="+", choices=["float32", "float64"], default=["float32"])
    parser.add_argument("--dcp", default=None, help="folder for the FSDP2 runs' checkpoints")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="out", help="folder for metrics.json (rank 0 writes)")
    args = parser.parse_args()

    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    device, backend = init_distributed(args.device)
    if device.type == "cuda":
        same_gpu_kernels()  # compared weight by weight: no kernel noise for AdamW to grow
    if rank == 0:
        print(f"{world_size} rank(s), backend {backend}", flush=True)

    runs = {}  # every strategy in turn, in these same processes: one start-up for them all
    for dtype in args.dtype:
        for strategy in args.strategy:
            name = f"{strategy}-{dtype}"
            runs[name] = train(strategy, getattr(torch, dtype), args, device,
                               os.path.join(args.out, name))
    if rank == 0:
        with open(os.path.join(args.out, "metrics.json"), "w") as f:
            json.dump({"world_size": world_size, "backend": backend, "runs": runs,
                       "memory_kind": memory_kind(device)}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
