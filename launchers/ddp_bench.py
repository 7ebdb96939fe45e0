"""DP vs DDP, measured: throughput, scaling, buckets and overlap, in one torchrun job.

    torchrun --nproc-per-node 2 launchers/ddp_bench.py --out DIR <the lesson's sizes>

(notebook 06's BENCH_ARGS: every size is a required option, nb06/bench_job.py lists them)

Each part builds its variants, timed in interleaved rounds (common/bench_rounds.py), with
--threads intra-op threads per rank (1). Parts: scaling (1 process, DataParallel, DDP on 1..N
ranks; an MLP, a Python-heavy model), sweep (1 process vs N ranks per batch), buckets, profile.
"""

import copy
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # spare threads sleep, not spin: before torch
import torch
import torch.distributed as dist
from common.bench_rounds import Trainer, buckets_made, footprint, steps_for, timed_rounds
from common.devices import init_distributed
from common.step_profile import profiled_part
from nb06.bench_job import options, part_sweep, run_parts
from nb06.grad_reductions import AsyncPerParameter, one_flat_all_reduce, per_parameter_blocking
from nb06.scaling_models import (
    PythonHeavy,
    all_threads_rounds,
    dataparallel,
    linear_stack,
    mlp,
    model_facts,
)
from torch.nn.parallel import DistributedDataParallel as DDP

SCALING_DDP = {}  # the scaling part's N-rank DDP step on the MLP, its batch per rank and width


def wrap(model, device, **options):  # torch's DDP around a copy; on a GPU, this rank's only
    return DDP(copy.deepcopy(model), device_ids=[device.index] if device.type == "cuda" else None,
               **options)


def part_scaling(args, device, rank, world, groups, name):
    torch.manual_seed(0)
    model, width, batch = ((mlp(args.width, args.depth), args.width, args.batch) if name == "matmul"
                           else (PythonHeavy(args.py_width, args.py_layers, args.py_gate),
                                 args.py_width, args.py_batch))
    base, gbatch, cpu = model.to(device), batch * world, groups["cpu"]  # one global batch
    solo = Trainer(copy.deepcopy(base), gbatch, width, device)
    solo_name = "1 process, 1 GPU" if device.type == "cuda" else "1 process, 1 thread"
    steps = steps_for(solo.step, {0}, args.target_s, device, cpu)
    threads = all_threads_rounds(solo_name, solo, base, gbatch, width, args, world, steps, device,
                                 rank, cpu) if name == "matmul" and device.type == "cpu" else {}
    dp_name, dp_step, dp_note = dataparallel(base, gbatch, width, world, device, cpu)
    variants = {solo_name: (solo.step, {0}), dp_name: (dp_step, {0})}
    for n in range(1, world + 1) if name == "matmul" else [world]:
        ddp_name, step = f"DDP {n} rank{'s' * (n > 1)}", None  # ranks n.. sit it out
        if rank < n:
            with footprint(device, f"{name}: {ddp_name}"):
                step = Trainer(wrap(base, device, process_group=groups[n]), gbatch // n, width,
                               device).step  # each of the n ranks: its share of the batch
                step()  # its first step: DDP rebuilds its buckets after it
        variants[ddp_name] = (step, set(range(n)))
    seconds = timed_rounds(variants, steps, args.rounds, device, rank, cpu)
    if name == "matmul":  # the sweep steps this DDP again, in its rounds at the same point
        SCALING_DDP.update(step=variants[ddp_name], batch=batch, width=width)
    return {"model": name, "global_batch": gbatch, "steps": steps, "seconds": seconds,
            "solo": solo_name, "dp_note": dp_note, "threads": threads,
            **model_facts(base, width, device)}


def part_buckets(args, device, rank, world, cpu):
    torch.manual_seed(0)
    base = linear_stack(args.bucket_layers, args.bucket_width).to(device)
    models = {"per-parameter, blocking": (copy.deepcopy(base), per_parameter_blocking)}
    m = copy.deepcopy(base)
    models["per-parameter, async in backward"] = (m, AsyncPerParameter(m))
    models["one flat all-reduce"] = (copy.deepcopy(base), one_flat_all_reduce)
    # the default (bucket_cap_mb=None): a small first bucket (1 MiB), then 25 MiB ones. An
    # explicit bucket_cap_mb, even 25, gives every bucket that cap (_BucketCapacityConfig)
    models["DDP default buckets"] = (wrap(base, device), None)
    for cap in args.bucket_caps:
        models[f"DDP bucket_cap_mb={cap:g}"] = (wrap(base, device, bucket_cap_mb=cap), None)
    models["DDP default buckets, gradient_as_bucket_view"] = (
        wrap(base, device, gradient_as_bucket_view=True), None)
    variants = {k: Trainer(m, args.bucket_batch, args.bucket_width, device, r)
                for k, (m, r) in models.items()}
    steps = steps_for(variants["DDP default buckets"].step, set(range(world)),
                      args.target_s / 2, device, cpu)
    seconds = timed_rounds({k: (t.step, set(range(world))) for k, t in variants.items()},
                           steps, args.rounds, device, rank, cpu)
    return {"tensors": len(list(base.parameters())), "steps": steps, "seconds": seconds,
            "grad_bytes": 4 * sum(p.numel() for p in base.parameters()),  # each, backward's order:
            "tensor_bytes": [4 * p.numel() for p in reversed(list(base.parameters()))],
            "bucket_bytes": {k: buckets_made(m) for k, (m, _) in models.items() if k[:3] == "DDP"}}


def part_profile(args, device, rank, cpu):
    torch.manual_seed(0)  # DDP with small buckets (several: overlap to see), profiled steps
    model = linear_stack(args.bucket_layers, args.bucket_width).to(device)
    ddp = wrap(model, device, bucket_cap_mb=args.profile_bucket_mb)
    trainer = Trainer(ddp, args.bucket_batch, args.bucket_width, device)
    return profiled_part(trainer, device, args.profile_steps, rank, args.out, cpu)


def main():
    args = options()
    device, backend = init_distributed(args.device)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(args.threads)  # the same threads per rank in every variant
    groups = {n: dist.new_group(list(range(n))) for n in range(1, world + 1)}  # every rank
    # the bookkeeping (barriers, timings, step counts) on CPU tensors: NCCL has no CPU backend
    cpu = groups["cpu"] = dist.new_group(backend="gloo")
    run_parts(args, {"scaling": lambda: {name: part_scaling(args, device, rank, world, groups,
                                                            name) for name in ("matmul", "python")},
                     "sweep": lambda: part_sweep(args, device, rank, world, cpu, SCALING_DDP),
                     "buckets": lambda: part_buckets(args, device, rank, world, cpu),
                     "profile": lambda: part_profile(args, device, rank, cpu)},
              device, backend, cpu)  # fmt: skip
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
