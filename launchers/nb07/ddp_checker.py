"""The machinery of notebook 07's checker (check_my_ddp.py): not its lesson.

The launcher trains a home-made DDP wrapper and torch's DDP side by side; this module records
what the wrapper did and judges it: `Recorder` wraps dist.all_reduce and dist.broadcast
(bytes, start time, whether each handle was waited for), `Facts` gathers one case's figures
(the ranks' start, the calls per step, when each gradient was ready, the gradients and weights
against DDP's), `problems` names what is wrong in words, `Cases` runs each case (saying what
the learner's code raised), prints each problem once and writes metrics.json with a verdict
per wrapper; and the checker's command line. my_ddp_bench.py loads the wrappers with
`wrapper_class` and counts their calls with `all_reduce_calls`.
"""

import argparse
import importlib.util
import json
import os
import time
import traceback

import torch
import torch.distributed as dist

TOLERANCE = 1e-10  # float64: another order of additions moves ~1e-16; a wrong gradient, %


def options(argv=None):
    """check_my_ddp.py's command line."""
    parser = argparse.ArgumentParser(description="home-made DDP wrappers against torch's DDP")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--impl", action="append", required=True, help="FILE:CLASS[:overlap]")
    parser.add_argument("--bucket-mb", default="0.001,0.004,25",
                        help="bucket sizes (MiB) for wrappers that take bucket_mb")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--accumulate", type=int, default=3,
                        help="micro-batches per step (the others under no_sync)")
    parser.add_argument("--out", default="out", help="folder for metrics.json (rank 0 writes)")
    return parser.parse_args(argv)


def wrapper_class(path, name):
    """Class `name` of the file `path` (the learner's wrapper, loaded as a module)."""
    spec = importlib.util.spec_from_file_location(f"impl_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def all_reduce_calls(trainer):
    """dist.all_reduce calls in one step of a home-made wrapper (counted, not timed)."""
    calls, original = [], dist.all_reduce
    dist.all_reduce = lambda *args, **kwargs: calls.append(1) or original(*args, **kwargs)
    try:
        trainer.step()
    finally:
        dist.all_reduce = original
    return len(calls)


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
    """Wraps dist.all_reduce and dist.broadcast: while on (`with recorder:`), what the wrapper
    sent, and when. The wrapper's calls go to a group of their own: if its ranks call different
    collectives, they wait for each other there (a hang, stopped by the run's timeout), and the
    checker's own collectives cannot be paired with them."""

    def __init__(self):
        self.on, self.calls, self.group = False, [], dist.new_group()
        for name in ("all_reduce", "broadcast"):
            setattr(dist, name, self._recording(name, getattr(dist, name)))

    def __enter__(self):
        self.on = True
        return self

    def __exit__(self, *exc):
        self.on = False

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


def largest_across_ranks(value, device):
    t = torch.tensor([float(value)], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def spread(device, model=None, tensors=None):
    """The largest difference of any rank's parameters and buffers (or `tensors`) from rank 0's."""
    mine = flat_state(model) if tensors is None else torch.cat([t.reshape(-1) for t in tensors])
    first = mine.clone()
    dist.broadcast(first, src=0)
    return largest_across_ranks((mine - first).abs().max(), device)


def ddp_rule_buckets(params, cap_bytes):
    """The buckets DDP's rule makes: in reverse order, each closes once it reaches the cap."""
    count, size = 0, 0
    for p in reversed(params):
        size += p.numel() * p.element_size()
        if size >= cap_bytes:
            count, size = count + 1, 0
    return count + (size > 0)


class Facts:
    """One case's figures (`figures`), gathered as the launcher trains: made on the model
    before the wrapper wraps it, its hooks note when each gradient is ready (they run first)."""

    def __init__(self, model, recorder, device):
        self.recorder, self.device, self.ready = recorder, device, []
        self.trainable = [p for p in model.parameters() if p.requires_grad]
        for p in self.trainable:
            p.register_post_accumulate_grad_hook(lambda p: self.ready.append(time.perf_counter()))
        self.no_sync_calls, self.per_step, self.unwaited, self.overlapped, self.in_flight = (
            0, [], 0, False, 0)
        self.figures = {}

    def started(self, module, bucket_mb):
        """The wrapper is built: did every rank start from rank 0's weights and buffers?"""
        self.recorder.take()
        self.figures |= {"start_spread": spread(self.device, module), "start_spread_params":
                         spread(self.device, tensors=[p.detach() for p in module.parameters()]),
                         "expected_elements": sum(p.numel() for p in self.trainable),
                         "grad_ratios": []}
        if bucket_mb is not None:  # what bucket_mb implies: 2**20 bytes per MiB
            self.figures |= {"cap_bytes": bucket_mb * 2**20, "ddp_rule_buckets": ddp_rule_buckets(
                self.trainable, bucket_mb * 2**20), "largest_param_bytes": max(
                p.numel() * p.element_size() for p in self.trainable)}

    def backward_returned(self, calls_in_no_sync):
        """Backward has returned: the all-reduces started and not yet waited for are in flight."""
        self.no_sync_calls += calls_in_no_sync
        self.in_flight = max(self.in_flight, sum(c["op"] == "all_reduce" and c["waited"] is False
                                                 for c in self.recorder.calls))  # fmt: skip

    def synchronized(self, step):
        """finish_gradient_synchronization() has returned: this step's all-reduces."""
        calls = [c for c in self.recorder.take() if c["op"] == "all_reduce"]
        self.per_step.append(len(calls))
        if step == 0:  # the first step's all-reduces, in the order they started
            self.figures |= {"reduced_elements": sum(c["numel"] for c in calls),
                             "bucket_bytes": [c["bytes"] for c in calls],
                             "blocking_calls": sum(c["waited"] is None for c in calls)}
        self.unwaited += sum(c["waited"] is False for c in calls)
        self.overlapped = bool(calls and self.ready and
                               min(c["at"] for c in calls) < max(self.ready))
        self.ready.clear()

    def gradients(self, step, mine, reference):
        """The wrapper's averaged gradients against DDP's (and, at step 0, across the ranks)."""
        mine_grad, ddp_grad = flat_grad(mine), flat_grad(reference)
        self.figures["grad_ratios"].append((mine_grad.norm() / ddp_grad.norm()).item())
        if step == 0:  # the first averaged gradients: the same on every rank?
            self.figures["grad_ratio"] = self.figures["grad_ratios"][0]
            self.figures["grad_spread"] = spread(self.device, tensors=[mine_grad])

    def trained(self, mine, reference):
        """After the last step: the weights against DDP's and across the ranks, and the counts
        (the largest over the ranks)."""
        def largest(value):
            return largest_across_ranks(value, self.device)

        self.figures["max_diff_vs_ddp"] = largest(
            (flat_state(mine) - flat_state(reference)).abs().max())
        self.figures["max_diff_across_ranks"] = spread(self.device, mine)
        self.figures.update(all_reduce_calls_per_step=max(self.per_step),
                            calls_in_no_sync=int(largest(self.no_sync_calls)),
                            unwaited=int(largest(self.unwaited)),
                            in_flight_after_backward=int(largest(self.in_flight)),
                            reduce_started_in_backward=largest(self.overlapped) > 0)
        return self.figures


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


class Cases:
    """Every case the checker runs, in turn: the figures `train` returns and the problems they
    show, or what the learner's code raised; on rank 0 one line per case (a problem seen before
    is not printed again); then metrics.json, every case and a verdict per wrapper."""

    def __init__(self, rank, world, steps, recorder):
        self.rank, self.world, self.steps, self.recorder = rank, world, steps, recorder
        self.cases, self.printed = [], set()

    def run(self, train, spec, cls, bucket_mb, accumulate, *more):
        """One case: train(cls, bucket_mb, accumulate, *more), the figures of Facts."""
        path = spec.removesuffix(":overlap").rpartition(":")[0]
        case = {"impl": spec, "wrapper": cls.__name__, "bucket_mb": bucket_mb,
                "accumulate": accumulate}
        try:
            case |= train(cls, bucket_mb, accumulate, *more)
            case["problems"] = problems(case, self.world, spec.endswith(":overlap"), self.steps)
        except Exception as err:  # the learner's code: say what it raised, go on
            self.recorder.on = False
            frames = [f for f in traceback.extract_tb(err.__traceback__)
                      if os.path.abspath(f.filename) == os.path.abspath(path)]
            at = f" (at line {frames[-1].lineno}: {frames[-1].line})" if frames and not \
                isinstance(err, NotImplementedError) else ""
            if "'NoneType' object has no attribute 'wait'" in str(err):
                at += ": dist.all_reduce returns a handle only with async_op=True"
            case["problems"] = [f"it raised {type(err).__name__}: {err}{at}"]
        case["ok"] = not case["problems"]
        self.cases.append(case)
        said = "ok" if case["ok"] else "; ".join(case["problems"])
        if self.rank == 0:  # a problem seen before is not printed again
            print(f"{case['wrapper']} bucket_mb={bucket_mb} accumulate={accumulate}: "
                  + ("as above" if said in self.printed - {"ok"} else said), flush=True)
            self.printed.add(said)

    def write(self, out, specs, backend, device):
        """Rank 0 writes out/metrics.json (every rank takes part: the ranks' facts)."""
        ranks = [None] * self.world
        dist.all_gather_object(ranks, {"rank": self.rank, "pid": os.getpid(),
                                       "device": str(device)})
        if self.rank == 0:
            os.makedirs(out, exist_ok=True)
            with open(os.path.join(out, "metrics.json"), "w") as f:
                json.dump({"world_size": self.world, "backend": backend, "tolerance": TOLERANCE,
                           "ranks": ranks, "cases": self.cases, "verdicts": {
                               spec: verdict([c for c in self.cases if c["impl"] == spec])
                               for spec in specs}}, f)  # fmt: skip
