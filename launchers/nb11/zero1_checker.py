"""The machinery of notebook 11's ZeRO-1 check (check_my_zero1.py): not its lesson.

The lesson is MyZeRO1, the learner's; check_my_zero1.py runs this on it: every rank trains
the same small model (5 Linear layers: 10 tensors) with the class and with DDP +
ZeroRedundancyOptimizer, in float64, records what its step() did, and rank 0 turns the
facts of all ranks into problems in words, most telling first.
"""

import copy
import importlib.util
import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

TOLERANCE = 1e-10  # float64: another order of additions moves ~1e-16; a wrong step, far more
OPTIMIZERS = {"AdamW": (torch.optim.AdamW, {"lr": 0.05, "weight_decay": 0.1}),
              "SGD": (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9})}


NAMES = [f"layer {i // 2} {'weight' if i % 2 == 0 else 'bias'}" for i in range(10)]
SIZES = [24 * 24 if i % 2 == 0 else 24 for i in range(10)]  # their values


class Recorder:
    """Wraps dist.broadcast, all_reduce and all_gather: while on, what step() called."""

    def __init__(self):
        self.on, self.calls = False, []
        for name in ("broadcast", "all_reduce", "all_gather", "all_gather_into_tensor"):
            setattr(dist, name, self._recording(name, getattr(dist, name)))

    def _recording(self, name, call):
        def recorded(tensor, *args, **kwargs):
            if self.on:
                src = kwargs.get("src", args[0] if name == "broadcast" and args else None)
                target = tensor[0] if isinstance(tensor, list) else tensor
                self.calls.append((name, target.data_ptr(), src))
            return call(tensor, *args, **kwargs)
        return recorded


def state_of(optimizer):
    """{id(parameter): (its state's bytes, AdamW's step count or None)}."""
    return {id(p): (sum(v.nbytes for v in s.values() if torch.is_tensor(v)),
                    int(s["step"]) if "step" in s else None) for p, s in optimizer.state.items()}


def check(cls, opt_name, steps, rank, world, recorder, device):
    """One class, one local optimizer: this rank's facts."""
    opt_class, kwargs = OPTIMIZERS[opt_name]
    torch.manual_seed(0)  # the same model on every rank
    layers = [m for _ in range(5) for m in (nn.Linear(24, 24), nn.Tanh())]
    base = nn.Sequential(*layers).to(device, torch.float64)
    reference_model = copy.deepcopy(base)
    params = list(base.parameters())
    index = {p.data_ptr(): i for i, p in enumerate(params)}
    mine = cls(base.parameters(), opt_class, **kwargs)  # first: if it raises, no DDP is left
    reference = DDP(reference_model, device_ids=[device.index] if device.type == "cuda" else None)
    ref_opt = ZeroRedundancyOptimizer(reference.parameters(), optimizer_class=opt_class, **kwargs)
    f = {"grads": "average", "broadcasts": [], "gathers": 0}
    for step in range(steps):
        g = torch.Generator().manual_seed(100 * step + rank)  # each rank its own batch
        x, y = (torch.randn(6, 24, generator=g, dtype=torch.float64).to(device) for _ in "xy")
        nn.functional.mse_loss(reference(x), y).backward()
        ref_opt.step()
        nn.functional.mse_loss(base(x), y).backward()
        own = [None if p.grad is None else p.grad.clone() for p in params]
        recorder.on, recorder.calls = True, []
        mine.step()
        recorder.on = False
        if step == 0:
            f["broadcasts"] = [(index.get(ptr), src) for op, ptr, src in recorder.calls
                               if op == "broadcast"]
            f["gathers"] = sum(op.startswith("all_gather") for op, _, _ in recorder.calls)
            stepped = [i for i, p in enumerate(params) if id(p) in state_of(mine.optim)]
            for i in stepped:  # the gradient this rank stepped with, if it kept it in p.grad
                used, average = params[i].grad, list(reference.parameters())[i].grad
                if used is None or torch.allclose(used, average, rtol=1e-9, atol=0):
                    continue
                f["grads"] = ("summed" if torch.allclose(used, world * average, rtol=1e-9)
                              else "own" if torch.allclose(used, own[i], rtol=1e-9) else "other")
        mine.zero_grad()
        ref_opt.zero_grad()
    state = state_of(mine.optim)
    first = [p.detach().clone() for p in params]
    for t in first:
        dist.broadcast(t, src=0)
    f.update(stepped=[i for i, p in enumerate(params) if id(p) in state],
             state_bytes=sum(b for b, _ in state.values()),
             step_counts=sorted({n for _, n in state.values() if n is not None}),
             ref_state_bytes=sum(b for b, _ in state_of(ref_opt.optim).values()),
             max_diff=max((p - r).abs().max().item()
                          for p, r in zip(params, reference.parameters(), strict=True)),
             spread=max((p - q).abs().max().item() for p, q in zip(params, first, strict=True)))
    del reference  # before destroy_process_group: DDP's destructor needs the group
    return f


def problems(ranks, names, sizes, steps, opt_name):
    """What is wrong, in words, most telling first (an empty list: nothing)."""
    world, n = len(ranks), len(names)
    owners = [[r for r, f in enumerate(ranks) if i in f["stepped"]] for i in range(n)]
    whole = sum(f["ref_state_bytes"] for f in ranks)
    found = []
    if all(len(o) == world for o in owners):
        found.append(f"every rank stepped all {n} parameters and keeps their {opt_name} state "
                     f"({max(f['state_bytes'] for f in ranks) / whole:.0%} of the whole on a rank):"
                     " no saving. Give optimizer_class only this rank's share")
    elif shared := [names[i] for i, o in enumerate(owners) if len(o) > 1]:
        found.append(f"{', '.join(shared)} were stepped on more than one rank: one owner each")
    if dropped := [i for i, o in enumerate(owners) if not o]:
        found.append(f"{names[dropped[0]]} ({sizes[dropped[0]]} values) has no owner: no rank "
                     f"keeps its state or steps it. Every parameter needs one ({n} tensors over "
                     f"{world} ranks: the counts cannot all be equal)")
    grads = {f["grads"] for f in ranks} - {"average"}
    if "own" in grads:
        found.append("each rank stepped its share with its own batch's gradients: average them "
                     "over the ranks first (dist.all_reduce, then divide by the world size)")
    elif "summed" in grads:
        found.append(f"the gradients were summed, not averaged ({world}x the average): divide "
                     "by the world size after the all-reduce")
    owner = {i: o[0] for i, o in enumerate(owners) if len(o) == 1}
    wrong = [(i, src) for f in ranks for i, src in f["broadcasts"]
             if i in owner and src is not None and src != owner[i]]
    if wrong:
        i, src = wrong[0]
        found.append(f"{names[i]} was broadcast from rank {src}, but rank {owner[i]} stepped it: "
                     "each parameter goes out from its owner")
    spread = max(f["spread"] for f in ranks)
    if spread > TOLERANCE and not any(f["broadcasts"] or f["gathers"] for f in ranks):
        found.append(f"after {steps} steps the ranks' parameters differ by up to {spread:.2g}: "
                     "nothing was sent after the step. Each owner must send its updated share "
                     "(dist.broadcast from the owner)")
    if any(c < steps for f in ranks for c in f["step_counts"]):
        found.append(f"AdamW counted fewer than {steps} steps: the local optimizer lost its state "
                     "between steps (build it once, in __init__)")
    largest = max(f["state_bytes"] for f in ranks)
    reference_largest = max(f["ref_state_bytes"] for f in ranks)
    if not found and largest > 1.2 * reference_largest:
        found.append(f"a rank keeps {largest / whole:.0%} of the {opt_name} state, "
                     f"ZeroRedundancyOptimizer's largest share is {reference_largest / whole:.0%}: "
                     "balance the shares by size (largest first, to the least-loaded rank)")
    diff = max(f["max_diff"] for f in ranks)
    if diff > TOLERANCE:
        found.append(f"after {steps} steps the parameters differ from ZeroRedundancyOptimizer's "
                     f"by up to {diff:.2g}: pass the keyword arguments on to optimizer_class")
    if spread > TOLERANCE:
        found.append(f"after {steps} steps the ranks' parameters differ by up to {spread:.2g}")
    return found


def check_class(spec, number, steps, recorder, device):
    """Every rank: load FILE:CLASS and check it with each local optimizer: its case.
    {"impl", "problems", "state_share", "ok"}; FILE:CLASS is split from the right (a path
    may hold ":"); what the learner's code raised is a problem, and the check goes on."""
    rank, world = dist.get_rank(), dist.get_world_size()
    path, _, name = spec.rpartition(":")
    case = {"impl": spec, "problems": [], "state_share": {}}
    try:
        module_spec = importlib.util.spec_from_file_location(f"impl_{number}", path)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        cls = getattr(module, name)
        for opt_name in OPTIMIZERS:
            facts = check(cls, opt_name, steps, rank, world, recorder, device)
            ranks = [None] * world
            dist.all_gather_object(ranks, facts)
            whole = sum(f["ref_state_bytes"] for f in ranks)
            case["state_share"][opt_name] = [f["state_bytes"] / whole for f in ranks]
            case["problems"] += [f"with {opt_name}: {p}"
                                 for p in problems(ranks, NAMES, SIZES, steps, opt_name)]
    except Exception as err:  # the learner's code: say what it raised, go on
        recorder.on = False
        case["problems"].append(f"it raised {type(err).__name__}: {err}")
    case["ok"] = not case["problems"]
    return case


def write_metrics(out, backend, cases, device):
    """A collective (every rank calls it): rank 0 writes out/metrics.json with the cases and
    every rank's pid and device."""
    rank, world = dist.get_rank(), dist.get_world_size()
    ranks = [None] * world
    dist.all_gather_object(ranks, {"rank": rank, "pid": os.getpid(), "device": str(device)})
    if rank == 0:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "metrics.json"), "w") as f:
            json.dump({"world_size": world, "backend": backend, "tolerance": TOLERANCE,
                       "ranks": ranks, "cases": cases}, f)
