"""DP vs DDP, measured: throughput, scaling, buckets and overlap, in one torchrun job.

    torchrun --nproc-per-node 2 launchers/ddp_bench.py --out DIR

Every figure is a median over --rounds rounds; within a round every variant runs once, in
turn (interleaved), so that a busy machine slows all variants alike. A variant's time for
--steps steps is its slowest rank's. Each rank uses --threads intra-op threads (1 by
default), so that one rank alone and N ranks together have the same threads per rank:
    efficiency(N) = throughput(N ranks) / (N * throughput(1 process, same threads))
Parts (--parts, comma separated):
  scaling  two models, the same global batch for every variant: "matmul" (an MLP: a few
           large matmuls) and "python" (each sample through small layers with Python between
           them). 1 process (1 thread; N threads: matmul only), DataParallel re-implemented
           with threads as in notebook 01 (outputs gathered, loss, reduction and step on
           device 0), DDP on 1..N ranks (python: N ranks only);
  sweep    efficiency over batch per rank (compute/communication ratio), 1 process vs N ranks
           (at the scaling part's own batch per rank, its DDP too: after scaling);
  buckets  --layers x Linear(256, 256): per-parameter blocking / async all-reduce, one flat
           all-reduce, DDP with its default buckets and with each --bucket-caps value (MiB),
           and gradient_as_bucket_view=True at the default; the buckets each DDP really made;
  profile  torch.profiler, --profile-steps DDP steps (rank 0): the overlap of each, the chrome
           trace and timeline events of the median one.
"""

import argparse
import copy
import json
import math
import os

# idle OpenMP threads sleep instead of spinning: a rank's spare threads must not steal the
# other ranks' cores (read by the OpenMP runtime when torch loads, so set before the import)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import resource
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401 - before init_process_group: see ddp_first_run.py
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import DeviceType
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


def mlp(width, depth, classes=10):
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, classes))


class PythonHeavy(nn.Module):
    """Each sample through small layers, with Python arithmetic between them (per-sample
    control flow, as custom research code has): most of its time is the interpreter's."""

    def __init__(self, width=16, layers=8, gate_terms=512, classes=10):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(layers))
        self.head = nn.Linear(width, classes)
        self.terms = gate_terms

    def forward(self, x):
        outs = []
        for sample in x.split(1):  # Python work grows with the batch: DDP's ranks split it
            h = sample
            for i, layer in enumerate(self.layers):
                v = h[0, i % h.shape[1]].item()  # a value of this sample, read into Python
                gate = sum(math.cos(v * j) for j in range(self.terms)) / self.terms
                h = h + gate * torch.tanh(layer(h))
            outs.append(h)
        return self.head(torch.cat(outs))


def loss_of(out, y):
    return F.cross_entropy(out, y) if out.shape[1] == 10 else out.square().mean()


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Trainer:
    """One training step of one variant: a model, its optimizer, its batch."""

    def __init__(self, model, batch, width, device, reduce=None):
        self.model, self.device, self.reduce = model, device, reduce
        self.opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        self.x = torch.randn(batch, width, device=device)
        self.y = torch.randint(0, 10, (batch,), device=device)

    def step(self):
        self.opt.zero_grad(set_to_none=True)
        loss_of(self.model(self.x), self.y).backward()
        if self.reduce:  # hand-made gradient averaging (the DDP variants do it in backward)
            self.reduce(self.model)
        self.opt.step()


def dp_step_fn(model, batch, width, replicas, device):
    """DataParallel's step, re-implemented with threads in one process: notebook 01's
    rebuilt_dp_step without its ledger. Scatter the batch, replicate the weights, forward on
    each replica's thread, gather the outputs on device 0 and compute the loss there, scatter
    its gradient back, backward on each replica's thread, reduce the gradients onto device 0,
    step there. Only the two parallel phases use the threads."""
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(batch, width, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    pool = ThreadPoolExecutor(replicas)

    def step():
        opt.zero_grad(set_to_none=True)
        chunks = list(x.chunk(replicas))  # scatter: chunk k copied to device k
        chunks = chunks[:1] + [c.clone() for c in chunks[1:]]
        n = len(chunks)
        copies = [model] + [copy.deepcopy(model) for _ in range(1, n)]  # replicate
        outs = list(pool.map(lambda k: copies[k](chunks[k]), range(n)))  # parallel_apply
        gathered = torch.cat([o.detach() for o in outs]).requires_grad_()  # gather on device 0
        loss_of(gathered, y).backward()  # the loss on device 0, over the whole batch
        grads = list(gathered.grad.chunk(n))  # its gradient scattered back
        grads = grads[:1] + [g.clone() for g in grads[1:]]
        list(pool.map(lambda k: outs[k].backward(grads[k]), range(n)))  # parallel backward
        for replica in copies[1:]:  # reduce: every replica's gradients copied to device 0
            for p, q in zip(model.parameters(), replica.parameters(), strict=True):
                p.grad += q.grad.clone()
        opt.step()  # on device 0 only

    return step


def per_parameter_blocking(model):
    world = dist.get_world_size()
    for p in model.parameters():
        dist.all_reduce(p.grad)  # one call per tensor, each waits for the last
        p.grad /= world


def one_flat_all_reduce(model):
    grads = [p.grad for p in model.parameters()]
    flat = torch.cat([g.view(-1) for g in grads])  # one bucket holding every gradient
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


class AsyncPerParameter:
    """Start each tensor's all-reduce as soon as backward has produced its gradient."""

    def __init__(self, model):
        self.pending = []
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(
                lambda p: self.pending.append((p, dist.all_reduce(p.grad, async_op=True))))

    def __call__(self, model):
        for p, work in self.pending:
            work.wait()
            p.grad /= dist.get_world_size()
        self.pending.clear()


def timed_rounds(variants, steps, rounds, device, rank, cpu, warmup=1):
    """variants: name -> (step function or None on ranks that sit out, ranks taking part).
    Returns name -> list of seconds per step (slowest rank), one per round. The bookkeeping
    (barrier, slowest time) goes through `cpu`, a gloo group of CPU tensors: ranks that sit
    a variant out wait there, on the CPU, with nothing running on their GPUs."""
    seconds = {name: [] for name in variants}
    for r in range(warmup + rounds):
        for name, (fn, ranks) in variants.items():
            sync(device)  # on a GPU: nothing of the last variant still running
            dist.barrier(group=cpu)
            start = time.perf_counter()
            if rank in ranks:
                for _ in range(steps[name] if isinstance(steps, dict) else steps):
                    fn()
                sync(device)  # on a GPU: the kernels, not only their launches, are timed
            mine = torch.tensor([time.perf_counter() - start])  # a CPU tensor: gloo
            dist.all_reduce(mine, op=dist.ReduceOp.MAX, group=cpu)  # the slowest rank's
            if r >= warmup:
                seconds[name].append(mine.item() / (steps[name] if isinstance(steps, dict)
                                                    else steps))
    return seconds


def steps_for(fn, ranks, target_s, device, cpu):
    """How many steps of fn take about target_s seconds (timed on rank 0, shared over the
    gloo group `cpu`: the count is a CPU tensor)."""
    n = torch.tensor([1])
    if dist.get_rank() in ranks:
        fn()
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        n[0] = max(2, round(target_s / max(time.perf_counter() - start, 1e-6)))
    dist.broadcast(n, 0, group=cpu)
    return int(n.item())


def saved_bytes_per_sample(model, width, device, batch=8):
    """Bytes autograd keeps for backward, per sample (activations), counted with hooks."""
    total = []

    def pack(t):
        total.append(t.numel() * t.element_size())
        return t

    x = torch.randn(batch, width, device=device)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return sum(total) / batch  # (an upper bound: the input and weights are counted too)


def scaling_model(args, name):
    """(model, input width, batch per rank) of one of the two scaling models."""
    if name == "matmul":
        return mlp(args.width, args.depth), args.width, args.batch
    return PythonHeavy(args.py_width, args.py_layers, args.py_gate), args.py_width, args.py_batch


def dataparallel(base, batch, width, world, device, cpu):
    """DP's variant: (name, step function on rank 0, why not the real one or None). The real
    nn.DataParallel where this node has a GPU for every rank of the job (NCCL, one node):
    rank 0 drives `world` GPUs, cuda:0..cuda:world-1, in a phase of its own, while the other
    ranks wait on the CPU (gloo) group with nothing running on their GPUs. Else the
    re-implementation on `device`, saying why: the job spans nodes (one process drives its
    own node's GPUs only), or rank 0 cannot use the GPUs the other ranks' processes hold
    (EXCLUSIVE_PROCESS compute mode admits one process per GPU)."""
    name, step, why = f"DP re-implemented, {world} replicas", None, None
    if dist.get_rank() == 0:
        if dist.get_backend() == "nccl" and world > torch.cuda.device_count():
            why = (f"the real nn.DataParallel drives one node's GPUs: {world} ranks, "
                   f"{torch.cuda.device_count()} GPUs on this node")
        elif dist.get_backend() == "nccl" and world > 1:
            try:
                dp = Trainer(nn.DataParallel(copy.deepcopy(base), device_ids=list(range(world))),
                             batch, width, device)
                dp.step()
                sync(device)
                name, step = f"DataParallel, {world} GPUs", dp.step
            except RuntimeError as e:  # e.g. "CUDA-capable device(s) is/are busy or unavailable"
                why = f"the real nn.DataParallel could not use GPUs 1..{world - 1}: {e}"
        if step is None:
            step = dp_step_fn(copy.deepcopy(base), batch, width, world, device)
    shared = [name, why]
    dist.broadcast_object_list(shared, src=0, group=cpu)  # the same variant names on all ranks
    return shared[0], step, shared[1]


SCALING_DDP = {}  # the scaling part's N-rank DDP step on the MLP, its batch per rank and width
FOOTPRINT = {}  # on a GPU: "model: DDP n ranks" -> the bytes that DDP added on this rank's GPU


@contextmanager
def footprint(device, name):
    """On a GPU, FOOTPRINT[name]: the tensor bytes the block added on this rank's GPU at its
    peak (a variant built and stepped: its model copy, batch, buckets, gradients, activations).
    The variants built before stay allocated and are not counted: max_memory_allocated, its
    peak reset first, over memory_allocated before (without the reset rank 0's peak would hold
    the one-process and DataParallel variants too)."""
    if device.type != "cuda":
        yield
        return
    sync(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    yield
    sync(device)
    FOOTPRINT[name] = torch.cuda.max_memory_allocated(device) - before


def part_scaling(args, device, rank, world, groups, name):
    torch.manual_seed(0)
    model, width, batch = scaling_model(args, name)
    base = model.to(device)
    gbatch = batch * world  # the same global batch for every variant
    cpu = groups["cpu"]
    variants = {}
    solo = Trainer(copy.deepcopy(base), gbatch, width, device)
    solo_name = "1 process, 1 GPU" if device.type == "cuda" else "1 process, 1 thread"
    variants[solo_name] = (solo.step, {0})
    steps = steps_for(solo.step, {0}, args.target_s, device, cpu)
    threads = {}
    if name == "matmul" and device.type == "cpu":  # threads help CPU kernels: not the python
        solo_n = Trainer(copy.deepcopy(base), gbatch, width, device)  # model's, nor a GPU's

        def solo_all_threads():
            torch.set_num_threads(args.threads * world)
            solo_n.step()
            torch.set_num_threads(args.threads)

        # first, alone: changing the thread count after DP's threads have run can hang OpenMP
        threads = timed_rounds({solo_name: (solo.step, {0}),
                                f"1 process, {args.threads * world} threads":
                                    (solo_all_threads, {0})},
                               steps, args.rounds, device, rank, cpu)  # fmt: skip
    dp_name, dp_step, dp_note = dataparallel(base, gbatch, width, world, device, cpu)
    variants[dp_name] = (dp_step, {0})
    for n in range(1, world + 1) if name == "matmul" else [world]:
        if rank < n:
            with footprint(device, f"{name}: DDP {n} rank{'s' * (n > 1)}"):
                ddp = DDP(copy.deepcopy(base), process_group=groups[n],
                          device_ids=[device.index] if device.type == "cuda" else None)
                trainer = Trainer(ddp, gbatch // n, width, device)
                trainer.step()  # its first step: DDP rebuilds its buckets after it
            variants[f"DDP {n} rank{'s' * (n > 1)}"] = (trainer.step, set(range(n)))
        else:
            variants[f"DDP {n} rank{'s' * (n > 1)}"] = (None, set(range(n)))
    seconds = timed_rounds(variants, steps, args.rounds, device, rank, cpu)
    if name == "matmul":  # the sweep steps this DDP again, in its rounds at the same point
        SCALING_DDP.update(step=variants[f"DDP {world} rank{'s' * (world > 1)}"],
                           batch=gbatch // world, width=width)
    return {"model": name, "global_batch": gbatch, "steps": steps, "seconds": seconds,
            "solo": solo_name, "dp_note": dp_note,
            "threads": threads, "params": sum(p.numel() for p in base.parameters()),
            "tensors": len(list(base.parameters())),
            "activation_bytes_per_sample": saved_bytes_per_sample(base, width, device)}


def part_sweep(args, device, rank, world, groups):
    """Per batch: 1 process against N ranks, side by side. At the scaling part's own point
    (same MLP, same batch per rank) its DDP steps in the same rounds too: the two agree, or
    the difference is not the time between the parts."""
    points = []
    for batch in args.sweep_batches:
        torch.manual_seed(0)
        base = mlp(args.sweep_width, args.depth).to(device)
        one = Trainer(copy.deepcopy(base), batch, args.sweep_width, device)
        ddp = Trainer(DDP(copy.deepcopy(base), device_ids=[device.index]
                          if device.type == "cuda" else None), batch, args.sweep_width, device)
        steps = steps_for(one.step, {0}, args.target_s / 2, device, groups["cpu"])
        variants = {"1 process": (one.step, {0}), f"{world} ranks": (ddp.step, set(range(world)))}
        if (SCALING_DDP.get("batch"), SCALING_DDP.get("width")) == (batch, args.sweep_width):
            variants["the scaling part's DDP"] = SCALING_DDP["step"]
        seconds = timed_rounds(variants, steps, args.rounds, device, rank, groups["cpu"])
        points.append({"batch_per_rank": batch, "width": args.sweep_width, "depth": args.depth,
                       "grad_bytes": 4 * sum(p.numel() for p in base.parameters()),
                       "steps": steps, "seconds": seconds})
    return points


def buckets_made(ddp):
    """The gradient buckets DDP really uses (bytes each), read from its reducer (a private
    method: None if this torch lacks it). DDP rebuilds them after its first step."""
    try:
        return [b.buffer().numel() * b.buffer().element_size()
                for b in ddp.reducer._get_zeros_like_grad_buckets()]
    except (AttributeError, RuntimeError):
        return None


def part_buckets(args, device, rank, world, cpu):
    torch.manual_seed(0)
    base = nn.Sequential(*[nn.Linear(256, 256) for _ in range(args.layers)]).to(device)
    ids = [device.index] if device.type == "cuda" else None

    def trainer(model, reduce=None):
        return Trainer(model, args.bucket_batch, 256, device, reduce)

    variants = {"per-parameter, blocking": trainer(copy.deepcopy(base), per_parameter_blocking)}
    m = copy.deepcopy(base)
    variants["per-parameter, async in backward"] = trainer(m, AsyncPerParameter(m))
    variants["one flat all-reduce"] = trainer(copy.deepcopy(base), one_flat_all_reduce)
    # the default (bucket_cap_mb=None): a small first bucket (1 MiB), then 25 MiB ones. An
    # explicit bucket_cap_mb, even 25, gives every bucket that cap (_BucketCapacityConfig)
    variants["DDP default buckets"] = trainer(DDP(copy.deepcopy(base), device_ids=ids))
    for cap in args.bucket_caps:
        variants[f"DDP bucket_cap_mb={cap:g}"] = trainer(
            DDP(copy.deepcopy(base), device_ids=ids, bucket_cap_mb=cap))
    variants["DDP default buckets, gradient_as_bucket_view"] = trainer(
        DDP(copy.deepcopy(base), device_ids=ids, gradient_as_bucket_view=True))
    steps = steps_for(variants["DDP default buckets"].step, set(range(world)),
                      args.target_s / 2, device, cpu)
    seconds = timed_rounds({k: (t.step, set(range(world))) for k, t in variants.items()},
                           steps, args.rounds, device, rank, cpu)
    buckets = {k: buckets_made(t.model) for k, t in variants.items() if k.startswith("DDP")}
    return {"tensors": len(list(base.parameters())), "steps": steps, "seconds": seconds,
            "grad_bytes": 4 * sum(p.numel() for p in base.parameters()),
            "bucket_bytes": buckets}


DEVICE_WORK = {"kernel", "gpu_memcpy", "gpu_memset", None}  # kineto's kinds of GPU work (not
# "gpu_user_annotation": a record_function's range mirrored onto the GPU's timeline)


def cpu_kind(name):
    """What a CPU range of torch.profiler is, for the timeline (None: not drawn)."""
    return ("all-reduce" if "all_reduce" in name or "allreduce" in name else
            "backward" if name.startswith("autograd::engine::evaluate_function") else
            "forward" if name == "DistributedDataParallel.forward" else
            "optimizer" if name.startswith("Optimizer.step") else
            "step" if name == "ddp_step" else None)


def is_nccl_all_reduce(name):
    """NCCL's all-reduce kernels, whatever the case: ncclDevKernel_AllReduce_Sum_f32_RING_LL
    (NCCL 2.19 and later), ncclKernel_AllReduce_RING_LL_Sum_float (before)."""
    n = name.lower().replace("_", "")
    return "nccl" in n and "kernel" in n and "allreduce" in n


def profile_events(raw):
    """torch.profiler's events (FunctionEvent: name, device_type, time_range, ...) -> the
    timeline's: CPU ranges on their threads; on a GPU also every kernel on its stream, in
    device time, as NCCL's all-reduce, "backward" (launched by an op that ran inside backward
    on the CPU: linked to it by correlation id) or "kernel" (the others)."""
    raw = list(raw)
    cpu = [e for e in raw if e.device_type == DeviceType.CPU]
    events = [{"kind": cpu_kind(e.name), "name": e.name, "device": "cpu",
               "row": f"thread {e.thread}", "start_us": e.time_range.start,
               "end_us": e.time_range.end} for e in cpu if cpu_kind(e.name)]
    bw = [(e["start_us"], e["end_us"]) for e in events if e["kind"] == "backward"]
    launched = {e.id: e.time_range.start for e in cpu}  # a CPU op's correlation id: its start
    for e in raw:
        if e.device_type != DeviceType.CUDA or getattr(e, "activity_type", None) not in DEVICE_WORK:
            continue
        link = getattr(e, "linked_correlation_id", 0)  # 0: linked to no CPU op
        at = launched.get(link) if link else None
        kind = ("all-reduce" if is_nccl_all_reduce(e.name) else
                "backward" if at is not None and any(s <= at <= t for s, t in bw) else "kernel")
        events.append({"kind": kind, "name": e.name, "device": "cuda",
                       "row": f"cuda:{e.device_index} stream {e.device_resource_id}",
                       "start_us": e.time_range.start, "end_us": e.time_range.end})
    return events


def union(intervals):
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def overlap(events):
    """(share of the all-reduce time inside backward, what was timed). With NCCL: device time,
    its all-reduce kernels on the GPU inside the span of the kernels backward launched (the CPU
    only launches them: its ranges do not say when the GPU ran them). With gloo: its own
    threads do the work on the CPU (gloo:all_reduce), inside backward's CPU ranges; without
    such events, the launches (c10d::allreduce_)."""
    gpu = [e for e in events if e["device"] != "cpu"]
    comm = [e for e in gpu if e["kind"] == "all-reduce"]
    if comm:
        inside = [e for e in gpu if e["kind"] == "backward"]
        basis = "device time of NCCL's all-reduce kernels, inside the kernels backward launched"
        if not inside:
            inside = [e for e in gpu if e["kind"] == "kernel"]
            basis = "device time of NCCL's all-reduce kernels, inside the span of the other kernels"
    else:
        cpu = [e for e in events if e["device"] == "cpu"]
        inside = [e for e in cpu if e["kind"] == "backward"]
        comm = [e for e in cpu if e["kind"] == "all-reduce" and not e["name"].startswith("c10d::")]
        basis = "CPU time of the communication library's own threads (gloo), inside backward"
        if not comm:
            comm = [e for e in cpu if e["kind"] == "all-reduce"]
            basis = "CPU time of the all-reduce launches (no worker events), inside backward"
    ar = union([(e["start_us"], e["end_us"]) for e in comm])
    if not ar or not inside:
        return 0.0, basis
    lo, hi = min(e["start_us"] for e in inside), max(e["end_us"] for e in inside)
    total = sum(e - s for s, e in ar)
    within = sum(max(0, min(e, hi) - max(s, lo)) for s, e in ar)
    return (within / total if total else 0.0), basis


@contextmanager
def kineto_quiet():
    """Kineto prints two USDT lines to stderr per profile, whatever KINETO_LOG_LEVEL says."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def part_profile(args, device, rank, out, cpu):
    """--profile-steps DDP steps, each under torch.profiler (on a GPU with its CUDA activity:
    kernels in device time); rank 0 keeps the overlap of each, and the timeline's events and
    chrome trace of the step with the median overlap (one step's share is noisy on gloo)."""
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(256, 256) for _ in range(args.layers)]).to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None,
              bucket_cap_mb=args.profile_bucket_mb)  # several buckets: overlap to see
    t = Trainer(ddp, args.bucket_batch, 256, device)
    for _ in range(3):
        t.step()  # warm-up: DDP rebuilds its buckets after the first step
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    steps = []
    for _ in range(args.profile_steps):
        sync(device)
        dist.barrier(group=cpu)
        with kineto_quiet(), torch.profiler.profile(activities=activities) as prof:
            with torch.profiler.record_function("ddp_step"):
                t.step()
                sync(device)
        if rank == 0:
            events = profile_events(prof.events())
            steps.append((*overlap(events), events, prof))
    if rank != 0:
        return None
    steps.sort(key=lambda s: s[0])
    fraction, basis, events, prof = steps[len(steps) // 2]  # the median step
    prof.export_chrome_trace(os.path.join(out, "ddp_step_trace.json"))
    return {"events": events, "overlap_fraction": fraction, "overlap_basis": basis,
            "overlap_fractions": [s[0] for s in steps]}


def peak_memory(device, world=1):
    """(bytes, what they are) of this rank's peak: on a GPU the tensors DDP's `world` ranks on
    the MLP added on it (footprint: not the CUDA context, not the allocator's cache, not the
    other variants), else, without the scaling part, the whole run's peak; on a CPU the
    process's peak resident memory (interpreter, torch and every variant included). ru_maxrss
    is KiB on Linux, bytes on macOS."""
    if device.type == "cuda":
        ddp = FOOTPRINT.get(f"matmul: DDP {world} rank{'s' * (world > 1)}")
        if ddp is not None:
            return ddp, (f"peak tensor bytes DDP's {world} ranks added on their GPUs (the MLP's "
                         "copy, batch, buckets, gradients, activations)")
        return (torch.cuda.max_memory_allocated(device),
                "peak tensor bytes allocated on the GPU, every variant of the run")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return (peak if sys.platform == "darwin" else peak * 1024), "peak RSS of the rank process"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--parts", default="scaling,sweep,buckets,profile")
    parser.add_argument("--width", type=int, default=512, help="MLP width (scaling, sweep)")
    parser.add_argument("--depth", type=int, default=4, help="hidden layers of the MLP")
    parser.add_argument("--batch", type=int, default=256, help="batch per rank (scaling)")
    parser.add_argument("--py-width", type=int, default=16, help="python model: layer width")
    parser.add_argument("--py-layers", type=int, default=8, help="python model: layers")
    parser.add_argument("--py-gate", type=int, default=512, help="python model: Python terms")
    parser.add_argument("--py-batch", type=int, default=None,
                        help="batch per rank (python model; default: 16, at most --batch)")
    parser.add_argument("--sweep-width", type=int, default=512, help="MLP width (sweep)")
    parser.add_argument("--sweep-batches", default="2,16,128,1024", help="batch per rank")
    parser.add_argument("--layers", type=int, default=50, help="Linear(256, 256) layers")
    parser.add_argument("--bucket-batch", type=int, default=32)
    parser.add_argument("--bucket-caps", default="0.25,1,4,16", help="bucket_cap_mb values (MiB)")
    parser.add_argument("--profile-bucket-mb", type=float, default=1)
    parser.add_argument("--profile-steps", type=int, default=3, help="profiled steps (median)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (median)")
    parser.add_argument("--target-s", type=float, default=0.3, help="seconds per measurement")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="out", help="folder for metrics.json (rank 0 writes)")
    args = parser.parse_args()
    args.py_batch = args.py_batch or min(16, args.batch)
    args.sweep_batches = [int(b) for b in args.sweep_batches.split(",")]
    args.bucket_caps = [float(c) for c in args.bucket_caps.split(",")]
    parts = args.parts.split(",")

    device, backend = device_and_backend(args.device, int(os.environ["LOCAL_RANK"]),
                                         int(os.environ["LOCAL_WORLD_SIZE"]),
                                         torch.cuda.device_count() if args.device == "cuda" else 0)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, device_id=device if backend == "nccl" else None)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(args.threads)  # the same threads per rank in every variant
    groups = {n: dist.new_group(list(range(n))) for n in range(1, world + 1)}  # every rank
    # the bookkeeping (barriers, timings, step counts) on CPU tensors: an NCCL group has no
    # CPU backend ("No backend type associated with device type cpu"): a gloo group for it
    groups["cpu"] = dist.new_group(backend="gloo")

    metrics = {"world_size": world, "backend": backend, "device": str(device),
               "threads_per_rank": args.threads, "rounds": args.rounds,
               "torch": torch.__version__, "cpus": os.cpu_count(),
               "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}
    os.makedirs(args.out, exist_ok=True)
    run = {"scaling": lambda: {name: part_scaling(args, device, rank, world, groups, name)
                               for name in ("matmul", "python")},
           "sweep": lambda: part_sweep(args, device, rank, world, groups),
           "buckets": lambda: part_buckets(args, device, rank, world, groups["cpu"]),
           "profile": lambda: part_profile(args, device, rank, args.out, groups["cpu"])}
    for part in parts:
        metrics[f"load_average_{part}"] = os.getloadavg()[0]  # as the part starts
        start = time.perf_counter()
        metrics[part] = run[part]()
        if rank == 0:
            print(f"{part} measured in {time.perf_counter() - start:.1f} s", flush=True)
    peaks = [None] * world
    dist.all_gather_object(peaks, (*peak_memory(device, world), FOOTPRINT), group=groups["cpu"])
    if rank == 0:
        metrics["ranks"] = [{"rank": r, "peak_bytes": peaks[r][0], "peak_what": peaks[r][1],
                             "footprint_bytes": peaks[r][2]} for r in range(world)]
        metrics["load_average_after"] = list(os.getloadavg())
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "metrics.json"), "w") as f:
            json.dump(metrics, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
