"""The ranks of notebook 03's broadcast_from_rank0 check (its task-check cell runs this file
under torchrun on 3 gloo ranks): not the lesson.

    torchrun --nproc-per-node 3 launchers/nb03/broadcast_check_ranks.py CANDIDATES.json --out DIR

CANDIDATES.json maps a name to [function name, its source, {name: module it uses}]. Each rank
builds the model from its own seed (parameters, BatchNorm buffers and gradients all differ), runs
each candidate in a process group of its own whose collectives give up after 3 s, records every
broadcast, all_reduce and reduce it calls (which, from which src, on which kind of tensor), and
writes, per candidate, its error, those calls and which tensors now equal rank 0's starting
values (torch.equal) to DIR/rank<r>.json. The notebook's cell judges them.
"""

import datetime
import importlib
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def make(r):  # rank r's model: its own seed, its own batch in BatchNorm's statistics and grads
    torch.manual_seed(r)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
    model(torch.randn(16, 4) + r).square().sum().backward()
    return model


def try_candidate(fname, source, modules, rank, rank0):
    """Run one candidate on this rank's model inside the current process group: its facts."""
    model, calls = make(rank), []
    real = {op: getattr(dist, op) for op in ("broadcast", "all_reduce", "reduce")}
    kinds = {t.untyped_storage().data_ptr(): kind for kind, ts in [
        ("parameter", model.parameters()), ("buffer", model.buffers()),
        ("gradient", [p.grad for p in model.parameters()])] for t in ts}

    def recorder(op):  # records every collective call: which one, from which src, on what
        def call(tensor, *args, **kwargs):
            src = kwargs.get("src", args[0] if args and op == "broadcast" else None)
            calls.append([op, src, kinds.get(tensor.untyped_storage().data_ptr(), "copy")])
            return real[op](tensor, *args, **kwargs)
        return call

    namespace = {n: importlib.import_module(m) for n, m in modules.items()}
    exec(source, namespace)
    for op in real:
        setattr(dist, op, recorder(op))
    try:
        namespace[fname](model)
        error = None
    except Exception as err:
        error = f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:200]}"
    for op, fn in real.items():
        setattr(dist, op, fn)
    return {"error": error, "calls": calls, "params": [n for n, _ in model.named_parameters()],
            "equal": {n: torch.equal(t, rank0[n]) for n, t in model.state_dict().items()}}


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    out = sys.argv[sys.argv.index("--out") + 1]
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, False)
    rank0, facts = make(0).state_dict(), {}  # what every rank must hold afterwards
    with open(sys.argv[1]) as f:
        candidates = json.load(f)
    for i, (name, (fname, source, modules)) in enumerate(candidates.items()):
        store.add(f"start{i}", 1)
        while store.add(f"start{i}", 0) < world:  # each candidate: all ranks start together, in
            time.sleep(0.02)  # a process group of its own whose collectives give up after 3 s
        dist.init_process_group("gloo", store=dist.PrefixStore(str(i), store), rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=3))
        facts[name] = try_candidate(fname, source, modules, rank, rank0)
        dist.destroy_process_group()
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(facts, f)


if __name__ == "__main__":
    main()
