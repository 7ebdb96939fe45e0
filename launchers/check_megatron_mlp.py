"""Checks home-made Megatron MLP splits against one process, in float64.

    torchrun --nproc-per-node 2 launchers/check_megatron_mlp.py \
        --impl launchers/my_megatron_mlp.py:ParallelMLP

--impl FILE:CLASS (repeatable). For each class, every rank builds tiny_gpt's MLP (width 12, a
4x hidden layer) from the same seed, splits a copy with CLASS(mlp, rank, world), and runs one
forward and one backward of the same batch and output gradient. Recorded per rank: the shapes
of its fc and proj weights, its dist.all_reduce calls in forward and in backward, and the
largest differences from the whole MLP in one process: the output, the input's gradient and
its weights' gradients (against its share of the whole ones). Rank 0 names the problems
(nb12/megatron_mlp_check.py: the all-reduce counter and the problems in words).
"""

import argparse
import copy
import importlib.util
import os

import torch
import torch.distributed as dist
from common.devices import init_distributed
from nb12 import layout_runs, tiny_gpt
from nb12.megatron_mlp_check import DIM, TOLERANCE, Counter, largest, problems


def check(cls, rank, world, counter, device):
    """One class: this rank's facts."""
    torch.manual_seed(0)
    whole = tiny_gpt.MLP(DIM).to(device, torch.float64)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 5, DIM, generator=g, dtype=torch.float64).to(device)
    dout = torch.randn(4, 5, DIM, generator=g, dtype=torch.float64).to(device)
    x_whole, x_mine = x.clone().requires_grad_(), x.clone().requires_grad_()
    out_whole = whole(x_whole)
    out_whole.backward(dout)
    mine = cls(copy.deepcopy(whole), rank, world)
    f = {"fc": list(mine.fc.weight.shape), "proj": list(mine.proj.weight.shape),
         "fc_expected": [4 * DIM // world, DIM], "proj_expected": [DIM, 4 * DIM // world]}
    if f["fc"] != f["fc_expected"] or f["proj"] != f["proj_expected"]:
        return f  # the forward would only raise: the shapes say what is wrong
    counter.on = True
    out = mine(x_mine)
    f["forward_calls"] = counter.take()
    out.backward(dout)
    f["backward_calls"] = counter.take()
    counter.on = False
    bias = whole.proj.bias.detach()
    f |= {"output": largest(out, out_whole),
          "bias_each_rank": largest(out, out_whole + (world - 1) * bias),
          "averaged": largest(out, (out_whole - bias) / world + bias),
          "input_grad": largest(x_mine.grad, x_whole.grad),
          "weight_grads": max(  # against this rank's share of the whole MLP's gradients
              largest(mine.fc.weight.grad, whole.fc.weight.grad.chunk(world, 0)[rank]),
              largest(mine.fc.bias.grad, whole.fc.bias.grad.chunk(world, 0)[rank]),
              largest(mine.proj.weight.grad, whole.proj.weight.grad.chunk(world, 1)[rank]),
              largest(mine.proj.bias.grad, whole.proj.bias.grad))}
    return f


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--impl", action="append", required=True, help="FILE:CLASS")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="out", help="folder for metrics.json (rank 0 writes)")
    args = parser.parse_args()

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device, backend = init_distributed(args.device)
    counter = Counter()  # before the classes' files are loaded, whatever they import
    cases = []
    for spec in args.impl:  # FILE:CLASS, split from the right (a path may hold ":")
        path, _, name = spec.rpartition(":")
        case = {"impl": spec}
        try:
            module_spec = importlib.util.spec_from_file_location(f"impl_{len(cases)}", path)
            module = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(module)
            facts = check(getattr(module, name), rank, world, counter, device)
            ranks = [None] * world
            dist.all_gather_object(ranks, facts)
            worst = {k: max(r[k] for r in ranks) for k in facts if isinstance(facts[k], float)}
            case |= {**facts, **worst, "problems": problems({**facts, **worst}, world)}
        except Exception as err:  # the learner's code: say what it raised, go on
            counter.on = False
            case["problems"] = [f"it raised {type(err).__name__}: {err}"]
        case["ok"] = not case["problems"]
        cases.append(case)
        if rank == 0:
            print(f"{spec}: " + ("ok" if case["ok"] else case["problems"][0]), flush=True)
    ranks = [None] * world
    dist.all_gather_object(ranks, {"rank": rank, "pid": os.getpid(), "device": str(device)})
    layout_runs.write_metrics(args.out, {"world_size": world, "backend": backend,
                                         "tolerance": TOLERANCE, "ranks": ranks, "cases": cases})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
