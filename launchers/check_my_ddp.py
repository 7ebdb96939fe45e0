"""Checks home-made DDP wrappers against torch's DistributedDataParallel, in float64.

    torchrun --nproc-per-node 2 launchers/check_my_ddp.py --impl launchers/my_ddp_naive.py:NaiveDDP

--impl FILE:CLASS (repeatable; FILE:CLASS:overlap when its all-reduces should start during
backward). For each wrapper, each --bucket-mb (if it takes bucket_mb) and each accumulation
(1 micro-batch, and --accumulate of them if it has no_sync()), every rank builds the same small
model from a seed of its own (so the ranks differ until someone broadcasts), wraps one copy in
the wrapper and one in DDP, and trains both --steps steps of SGD on its own batches.
Recorded: the largest parameter difference from DDP and across the ranks, the gradients
against DDP's at every step, every dist.all_reduce and dist.broadcast the wrapper made
(bytes, start time, whether its handle was waited for before backward returned), and when
each gradient was ready. The model has what DDP must handle: a frozen layer, a tied
input/output weight, a buffer. A problem seen in several cases is printed once; metrics.json
holds every case and a verdict per wrapper. The wrappers' collectives run in a group of their
own: ranks that call different ones wait there (the run's timeout stops them).
"""

import argparse
import copy
import importlib.util
import inspect
import json
import os
import time
import traceback
from contextlib import nullcontext

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401  before init_process_group: see DDP's lazy import
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

TOLERANCE = 1e-10  # float64: another order of additions moves ~1e-16; a wrong gradient, %


def device_and_backend(requested: str, local_rank: int, local_world_size: int,
                       n_gpus: int) -> tuple[torch.device, str]:
    """Where this rank computes and how the ranks talk: the one place that decides.
    NCCL needs a GPU of its own for every rank of this node (LOCAL_WORLD_SIZE, not the
    job's WORLD_SIZE: 2 nodes x 8 GPUs is 16 ranks on 8 GPUs each)."""
    if requested == "cuda":
        device = torch.device("cuda", local_rank % n_gpus)
        return device, "nccl" if local_world_size <= n_gpus else "gloo"
    return torch.device("cpu"), "gloo"


class CheckNet(nn.Module):
    """Small, with every case DDP handles: tied weights, a frozen layer, a buffer."""

    def __init__(self, vocab=32, width=16, depth=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.frozen = nn.Linear(width, width).requires_grad_(False)  # never communicated
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.embed.weight  # tied: one parameter, used twice
        self.register_buffer("scale", torch.rand(width) + 0.5)  # broadcast with the weights

    def forward(self, tokens):
        h = self.embed(tokens) * self.scale
        for layer in self.layers:
            h = torch.tanh(layer(h))
        return self.head(self.frozen(h))


class Waited:
    """An async handle that remembers whether anyone waited for it."""

    def __init__(self, work, record):
        self._work, self._record = work, record

    def wait(self, *args, **kwargs):
        self._record["waited"] = True
        return self._work.wait(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._work, name)


class Recorder:
    """Wraps dist.all_reduce and dist.broadcast: while on, what the wrapper sent, and when.
    The wrapper's calls go to a group of their own: if its ranks call different collectives,
    they wait for each other there (a hang, stopped by the run's timeout), and the checker's
    own collectives cannot be paired with them."""

    def __init__(self):
        self.on, self.calls, self.group = False, [], dist.new_group()
        for name in ("all_reduce", "broadcast"):
            setattr(dist, name, self._recording(name, getattr(dist, name)))

    def _recording(self, name, call):
        def recorded(tensor, *args, **kwargs):
            record = {"op": name, "numel": tensor.numel(), "at": time.perf_counter(),
                      "bytes": tensor.numel() * tensor.element_size(), "waited": None}
            if self.on and len(args) < 2 and kwargs.get("group") is None:
                kwargs["group"] = self.group
            work = call(tensor, *args, **kwargs)
            if not self.on:
                return work
            self.calls.append(record)
            if work is None:
                return None
            record["waited"] = False
            return Waited(work, record)
        return recorded

    def take(self):
        calls, self.calls = self.calls, []
        return calls


def flat_state(model):
    tensors = {id(t): t for t in list(model.parameters()) + list(model.buffers())}
    return torch.cat([t.detach().reshape(-1) for t in tensors.values()])


def flat_grad(model):
    return torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.grad is not None])


def largest_across_ranks(value):
    t = torch.tensor([float(value)], dtype=torch.float64, device=DEVICE)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def spread(model=None, tensors=None):
    """The largest difference of any rank's parameters and buffers (or `tensors`) from rank 0's."""
    mine = flat_state(model) if tensors is None else torch.cat([t.reshape(-1) for t in tensors])
    first = mine.clone()
    dist.broadcast(first, src=0)
    return largest_across_ranks((mine - first).abs().max())


def train_step(model, step, rank, accumulate, recorder=None):
    """Zero, then forward and backward over `accumulate` micro-batches, all but the last
    under no_sync() (DDP's accumulation recipe); returns the calls recorded under no_sync."""
    model.zero_grad(set_to_none=True)
    calls_in_no_sync = 0
    for micro in range(accumulate):
        last = micro == accumulate - 1
        g = torch.Generator().manual_seed(1000 * step + 10 * micro + rank)  # each rank its own
        tokens, targets = torch.randint(32, (2, 6, 5), generator=g).to(DEVICE)
        with nullcontext() if last else model.no_sync():
            loss = F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten()) / accumulate
            loss.backward()
        if recorder is not None and not last:
            calls_in_no_sync += len(recorder.take())
    return calls_in_no_sync


def ddp_rule_buckets(params, cap_bytes):
    """The buckets DDP's rule makes: in reverse order, each closes once it reaches the cap."""
    count, size = 0, 0
    for p in reversed(params):
        size += p.numel() * p.element_size()
        if size >= cap_bytes:
            count, size = count + 1, 0
    return count + (size > 0)


def check(cls, expects_overlap, bucket_mb, accumulate, steps, rank, world, recorder):
    torch.manual_seed(rank)  # unseeded, as far as the ranks can tell: each its own weights
    base = CheckNet().to(DEVICE).double()
    ids = [DEVICE.index] if DEVICE.type == "cuda" else None
    reference = DDP(copy.deepcopy(base), device_ids=ids)
    ready = []  # when each gradient was ready: hooks registered before the wrapper's run first
    for p in base.parameters():
        if p.requires_grad:
            p.register_post_accumulate_grad_hook(lambda p: ready.append(time.perf_counter()))
    recorder.on = True
    mine = cls(base, **({} if bucket_mb is None else {"bucket_mb": bucket_mb}))
    recorder.on = False
    recorder.take()
    trainable = [p for p in base.parameters() if p.requires_grad]
    f = {"start_spread": spread(mine.module),
         "start_spread_params": spread(tensors=[p.detach() for p in mine.module.parameters()]),
         "expected_elements": sum(p.numel() for p in trainable), "grad_ratios": []}
    if bucket_mb is not None:  # what bucket_mb implies: 2**20 bytes per MiB
        f |= {"cap_bytes": bucket_mb * 2**20, "ddp_rule_buckets": ddp_rule_buckets(
            trainable, bucket_mb * 2**20), "largest_param_bytes": max(
            p.numel() * p.element_size() for p in trainable)}
    mine_opt = torch.optim.SGD(mine.module.parameters(), lr=0.5)
    reference_opt = torch.optim.SGD(reference.parameters(), lr=0.5)
    calls_in_no_sync, per_step, unwaited, overlapped, in_flight = 0, [], 0, False, 0
    for step in range(steps):
        ready.clear()
        recorder.on = True
        calls_in_no_sync += train_step(mine, step, rank, accumulate, recorder)
        # backward has returned: the all-reduces started and not yet waited for are in flight
        in_flight = max(in_flight, sum(c["op"] == "all_reduce" and c["waited"] is False
                                       for c in recorder.calls))  # fmt: skip
        mine.finish_gradient_synchronization()
        recorder.on = False
        calls = [c for c in recorder.take() if c["op"] == "all_reduce"]
        per_step.append(len(calls))
        if step == 0:  # the first step's all-reduces, in the order they started
            f |= {"reduced_elements": sum(c["numel"] for c in calls),
                  "bucket_bytes": [c["bytes"] for c in calls],
                  "blocking_calls": sum(c["waited"] is None for c in calls)}
        unwaited += sum(c["waited"] is False for c in calls)
        overlapped = bool(calls and ready and min(c["at"] for c in calls) < max(ready))
        train_step(reference, step, rank, accumulate)
        mine_grad, ddp_grad = flat_grad(mine.module), flat_grad(reference.module)
        f["grad_ratios"].append((mine_grad.norm() / ddp_grad.norm()).item())
        if step == 0:  # the first averaged gradients: the same on every rank?
            f["grad_ratio"], f["grad_spread"] = f["grad_ratios"][0], spread(tensors=[mine_grad])
        mine_opt.step()
        reference_opt.step()
    f["max_diff_vs_ddp"] = largest_across_ranks(
        (flat_state(mine.module) - flat_state(reference.module)).abs().max())
    f["max_diff_across_ranks"] = spread(mine.module)
    f.update(all_reduce_calls_per_step=max(per_step),
             calls_in_no_sync=int(largest_across_ranks(calls_in_no_sync)),
             unwaited=int(largest_across_ranks(unwaited)),
             in_flight_after_backward=int(largest_across_ranks(in_flight)),
             reduce_started_in_backward=largest_across_ranks(overlapped) > 0)
    del reference  # before destroy_process_group: DDP's destructor needs the group
    return f | {"problems": problems(f, world, expects_overlap, steps)}


def problems(f, world, expects_overlap, steps):
    """What is wrong, in words, most telling first (an empty list: nothing)."""
    found = []
    if f["start_spread_params"] > TOLERANCE:
        found.append(f"the ranks started from different weights (largest difference "
                     f"{f['start_spread_params']:.2g}): broadcast rank 0's parameters and "
                     "buffers in __init__")
    elif f["start_spread"] > TOLERANCE:
        found.append(f"the ranks started with different buffers (largest difference "
                     f"{f['start_spread']:.2g}; the parameters agreed): broadcast "
                     "module.buffers() too in __init__")
    if f["unwaited"]:
        found.append(f"{f['unwaited']} asynchronous all-reduces (per rank, {steps} steps) were "
                     "never waited for before optimizer.step(): call handle.wait() on each in "
                     "finish_gradient_synchronization(), or their sums may not have arrived")
    several = f["all_reduce_calls_per_step"] > 1
    if expects_overlap and several and not f["in_flight_after_backward"]:
        how = ("each all-reduce was blocking (no async_op=True)" if f["blocking_calls"] else
               "each handle was waited for inside backward (handle.wait() in the hook?)")
        found.append(f"no all-reduce was still running when backward returned: {how}, so "
                     "backward stalled on every one; wait in finish_gradient_synchronization()")
    if f["calls_in_no_sync"]:
        found.append(f"{f['calls_in_no_sync']} all-reduces ran inside no_sync(): accumulation "
                     "steps must leave the gradients local")
    if f["reduced_elements"] != f["expected_elements"]:
        found.append(f"one step all-reduced {f['reduced_elements']} gradient elements, "
                     f"{f['expected_elements']} expected (each trainable parameter once: a tied "
                     "weight is one parameter, a frozen one has no gradient)")
    if f["grad_spread"] > TOLERANCE:
        found.append(f"after finish_gradient_synchronization() the ranks' gradients differ (by up "
                     f"to {f['grad_spread']:.2g}): the averaged sums did not reach every p.grad")
    elif abs(f["grad_ratio"] - 1) > 1e-6:
        hint = (": divide the sum by the world size" if abs(f["grad_ratio"] - world) < 1e-3 else
                ": divided twice? (ReduceOp.AVG already divides)"
                if abs(f["grad_ratio"] - 1 / world) < 1e-3 else "")  # fmt: skip
        found.append(f"the averaged gradients are {f['grad_ratio']:.3g}x DDP's at {world} "
                     f"ranks{hint}")
    else:
        later = [(i + 1, r) for i, r in enumerate(f["grad_ratios"]) if abs(r - 1) > 1e-6]
        if later:
            found.append(f"step 1's gradients equal DDP's, step {later[0][0]}'s are "
                         f"{later[0][1]:.3g}x DDP's: something of the previous step was used "
                         "again (forget the handles and reset the counters after each step)")
    if "cap_bytes" in f and f["bucket_bytes"]:
        cap, sizes, rule = f["cap_bytes"], f["bucket_bytes"], f["ddp_rule_buckets"]
        made = f"{len(sizes)} bucket(s), where closing each once it reaches bucket_mb makes {rule}"
        pairs = [a + b for a, b in zip(sizes, sizes[1:], strict=False)]
        if max(sizes) > cap + f["largest_param_bytes"]:
            found.append(f"with bucket_mb={cap / 2**20:g} ({cap:,.0f} bytes) one all-reduce "
                         f"carried {max(sizes):,} bytes, more than bucket_mb plus the largest "
                         f"parameter: {made}")
        elif pairs and min(pairs) <= cap:
            found.append(f"with bucket_mb={cap / 2**20:g} two buckets in a row held only "
                         f"{min(pairs):,} bytes together, under bucket_mb ({cap:,.0f} bytes): "
                         f"one all-reduce could carry both; {made}")
    if expects_overlap and several and not f["reduce_started_in_backward"]:
        found.append("no all-reduce started before the last gradient was ready: nothing overlaps "
                     "backward (start each one from a gradient hook, the buckets in the order "
                     "backward fills them: last layers first)")
    if f["max_diff_vs_ddp"] > TOLERANCE:
        found.append(f"after {steps} steps the weights differ from DDP's by up to "
                     f"{f['max_diff_vs_ddp']:.2g}")
    if f["max_diff_across_ranks"] > TOLERANCE:
        found.append(f"after {steps} steps the ranks' weights differ by up to "
                     f"{f['max_diff_across_ranks']:.2g}")
    return found


def verdict(cases):
    """(ok, message) for one wrapper: ok None while it raises NotImplementedError (the starter)."""
    failed = [c for c in cases if not c["ok"]]
    if not failed:
        return True, ""
    c, problem = failed[0], failed[0]["problems"][0]
    if "NotImplementedError" in problem:
        return None, "complete the TODOs in its cell, run it, then this one"
    if len(cases) == 1:
        return False, problem
    size = f"bucket_mb={c['bucket_mb']:g}, " if c["bucket_mb"] is not None else ""
    micro = f"{c['accumulate']} micro-batch" + "es" * (c["accumulate"] > 1)
    return False, f"{len(failed)} of {len(cases)} failed, the first ({size}{micro}): {problem}"


def main():
    global DEVICE
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--impl", action="append", required=True, help="FILE:CLASS[:overlap]")
    parser.add_argument("--bucket-mb", default="0.001,0.004,25",
                        help="bucket sizes (MiB) for wrappers that take bucket_mb")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--accumulate", type=int, default=3,
                        help="micro-batches per step (the others under no_sync)")
    parser.add_argument("--out", default="out", help="folder for metrics.json (rank 0 writes)")
    args = parser.parse_args()

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    DEVICE, backend = device_and_backend(args.device, int(os.environ["LOCAL_RANK"]),
                                         int(os.environ["LOCAL_WORLD_SIZE"]),
                                         torch.cuda.device_count() if args.device == "cuda" else 0)
    if DEVICE.type == "cuda":
        torch.cuda.set_device(DEVICE)
        torch.backends.cudnn.deterministic = True  # float64 equality: no nondeterministic kernels
    dist.init_process_group(backend, device_id=DEVICE if backend == "nccl" else None)
    recorder = Recorder()  # before the wrappers' files are loaded, whatever they import
    cases, printed = [], set()
    for spec in args.impl:  # FILE:CLASS[:overlap], split from the right (a path may hold ":")
        path, _, name = spec.removesuffix(":overlap").rpartition(":")
        module_spec = importlib.util.spec_from_file_location(f"impl_{name}", path)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        cls, expects_overlap = getattr(module, name), spec.endswith(":overlap")
        takes_buckets = "bucket_mb" in inspect.signature(cls).parameters
        sizes = [float(b) for b in args.bucket_mb.split(",")] if takes_buckets else [None]
        accumulations = [1, args.accumulate] if hasattr(cls, "no_sync") else [1]
        for bucket_mb in sizes:
            for accumulate in accumulations:
                case = {"impl": spec, "wrapper": cls.__name__, "bucket_mb": bucket_mb,
                        "accumulate": accumulate}
                try:
                    case |= check(cls, expects_overlap, bucket_mb, accumulate, args.steps, rank,
                                  world, recorder)
                except Exception as err:  # the learner's code: say what it raised, go on
                    recorder.on = False
                    frames = [f for f in traceback.extract_tb(err.__traceback__)
                              if os.path.abspath(f.filename) == os.path.abspath(path)]
                    at = f" (at line {frames[-1].lineno}: {frames[-1].line})" if frames and not \
                        isinstance(err, NotImplementedError) else ""
                    if "'NoneType' object has no attribute 'wait'" in str(err):
                        at += ": dist.all_reduce returns a handle only with async_op=True"
                    case["problems"] = [f"it raised {type(err).__name__}: {err}{at}"]
                case["ok"] = not case["problems"]
                cases.append(case)
                said = "ok" if case["ok"] else "; ".join(case["problems"])
                if rank == 0:  # a problem seen before is not printed again
                    print(f"{case['wrapper']} bucket_mb={bucket_mb} accumulate={accumulate}: "
                          + ("as above" if said in printed - {"ok"} else said), flush=True)
                    printed.add(said)
    ranks = [None] * world
    dist.all_gather_object(ranks, {"rank": rank, "pid": os.getpid(), "device": str(DEVICE)})
    if rank == 0:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "metrics.json"), "w") as f:
            json.dump({"world_size": world, "backend": backend, "tolerance": TOLERANCE,
                       "ranks": ranks, "cases": cases, "verdicts": {
                           spec: verdict([c for c in cases if c["impl"] == spec])
                           for spec in args.impl}}, f)  # fmt: skip
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
