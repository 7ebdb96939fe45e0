"""What notebook 12's layout launchers do around their split: not their lesson.

tensor_parallel.py, pipeline_parallel.py and fsdp_tp_2d.py each split nb12/tiny_gpt.py's
model their own way (that is the lesson, in the launcher). Around the split they all do the
same, here: train step by step, printing each loss beside one process's; measure the first
step (the bytes autograd keeps for backward, the collectives of forward and backward, the
gradients); compare with the one-process run in float64; gather every rank's figures on
rank 0, which writes metrics.json. The pipeline's own steps (train_pipeline) and its clock
too. The two launchers' command lines and runs: nb12/layout_mains.py.
"""

import json
import logging
import os
import time

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from nb12 import tiny_gpt


def whole(tensor):
    """All of a tensor: a DTensor gathered from its shards, or the tensor itself."""
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def train(model, optimizer, batches, reference_losses, groups, device, part=None,
          loss_of=None):
    """Train ``model`` on ``batches`` (``part(x, y)``: this rank's share; default all of it),
    printing each step's loss beside one process's on rank 0. The first step is measured:
    returns (losses, first), first = the peak of the bytes autograd kept for backward, the
    collectives of its forward and backward (``groups``: group name -> its ranks), its
    gradients (cloned) and their bytes. ``loss_of(loss)``: the whole batch's loss (default:
    this rank's loss, when every rank computes it)."""
    rank, losses, first = dist.get_rank(), [], {}
    for step, (x, y) in enumerate(batches):
        x, y = part(x, y) if part else (x, y)
        x, y = x.to(device), y.to(device)
        saved, forward_log = tiny_gpt.SavedActivations(model), tiny_gpt.CollectiveLog(groups)
        with saved, forward_log:
            loss = tiny_gpt.loss_fn(model(x), y)
        with tiny_gpt.CollectiveLog(groups) as backward_log:
            loss.backward()
        if step == 0:
            first = {"activation_bytes": saved.peak,
                     "collectives": {"forward": forward_log.calls, "backward": backward_log.calls},
                     "grads": {n: p.grad.detach().clone() for n, p in model.named_parameters()},
                     "grad_bytes": tiny_gpt.held_bytes(model, optimizer)["grad_bytes"]}
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item() if loss_of is None else loss_of(loss))
        if rank == 0:
            print(f"step {step}  loss {losses[-1]:.6f}  one process {reference_losses[step]:.6f}",
                  flush=True)
    return losses, first


def gather_figures(model, optimizer, grads, args, batches, reference, device, mine=None,
                   **figures):
    """Every rank's figures, gathered on rank 0 (a list of None on the others): the bytes it
    holds (parameters, gradients, AdamW state: tiny_gpt.held_bytes), ``figures``, and the
    largest differences from the one-process ``reference`` model in float64: the first
    step's ``grads`` and the trained parameters, each against ``mine(name, whole tensor)``,
    this rank's part of it (default: all of it; a DTensor is gathered whole first)."""
    mine = mine or (lambda name, full: full)
    # gathering a 2-D-sharded weight whole takes two all-gathers, which DTensor warns about:
    # the comparison below needs it once, training never
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
    reference_state = dict(reference.named_parameters())
    param_diff = max((whole(p).detach().cpu() - mine(n, reference_state[n].detach()))
                     .abs().max().item() for n, p in model.named_parameters())
    reference_grads = tiny_gpt.first_step_gradients(args, batches[0])
    grad_diff = max((whole(g).cpu() - mine(n, reference_grads[n])).abs().max().item()
                    for n, g in grads.items())
    rank = dist.get_rank()
    held = {"rank": rank, **tiny_gpt.held_bytes(model, optimizer), **figures,
            "grad_max_diff": grad_diff, "param_max_diff": param_diff,
            "device_peak_bytes": tiny_gpt.device_peak_bytes(device)}
    gathered = [None] * dist.get_world_size()
    dist.gather_object(held, gathered if rank == 0 else None)
    return gathered


def train_and_compare(model, args, batches, reference, device, groups, part=None, loss_of=None,
                      mine=None, **figures):
    """AdamW on ``model`` (a split copy), trained (``train``) and compared with ``reference``,
    the one-process run's (losses, model) (``gather_figures``): {"ranks": every rank's
    figures, on rank 0; and tiny_gpt.run_summary's}."""
    reference_losses, reference_model = reference
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    losses, first = train(model, optimizer, batches, reference_losses, groups, device, part,
                          loss_of)
    grads = first.pop("grads")
    ranks = gather_figures(model, optimizer, grads, args, batches, reference_model, device, mine,
                           **first, **figures)
    return {"ranks": ranks,
            **tiny_gpt.run_summary(args, losses, reference_losses, reference_model)}


def write_metrics(out, metrics):
    """Rank 0 writes ``metrics`` to out/metrics.json."""
    if dist.get_rank() == 0:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "metrics.json"), "w") as f:
            json.dump(metrics, f)


def train_pipeline(stage, optimizer, batches, reference_losses, device, run_step):
    """pipeline_parallel.py's steps around its schedule: every stage starts each step together
    (one time origin for the timeline), ``run_step(x, y, clock)`` runs the schedule and
    returns (the loss, on the last stage; the timeline of what this stage computed when), the
    last stage broadcasts the loss, rank 0 prints it beside one process's. Returns (losses,
    the first step's gradients, figures: their bytes, the last step's peak of the bytes kept
    for backward, the timelines and the step times)."""
    rank, stages = dist.get_rank(), dist.get_world_size()
    losses, step_times, timelines = [], [], []
    for step, (x, y) in enumerate(batches):
        # contiguous: the batches are slices of longer sequences, and torch 2.11's pipelining
        # refuses a stage input whose strides are not those of a fresh tensor
        x, y = x.to(device).contiguous(), y.to(device).contiguous()
        dist.barrier()  # every stage starts the step together: one time origin for the timeline
        clock = StepClock(device)
        with tiny_gpt.SavedActivations(stage) as saved:
            loss, timeline = run_step(x, y, clock)
        step_times.append(clock())
        if step == 0:
            first_grads = {name: p.grad.detach().clone() for name, p in stage.named_parameters()}
            grad_bytes = tiny_gpt.held_bytes(stage, optimizer)["grad_bytes"]
        timelines.append(timeline)
        activation_bytes = saved.peak  # the last step's: torch's first also infers shapes
        optimizer.step()
        optimizer.zero_grad()
        loss_here = torch.tensor([loss], dtype=torch.float64, device=device)
        dist.broadcast(loss_here, src=stages - 1)  # the last stage knows the loss
        losses.append(loss_here.item())
        if rank == 0:
            print(f"step {step}  loss {losses[-1]:.6f}  one process {reference_losses[step]:.6f}",
                  flush=True)
    return losses, first_grads, {"grad_bytes": grad_bytes, "activation_bytes": activation_bytes,
                                 "timelines": timelines, "step_times_s": step_times}


class StepClock:
    """Seconds since the step began; on a GPU once the compute stream's queued work is done
    (GPU work is asynchronous: time it, not its launch). Only that stream: NCCL sends run on
    a stream of their own, and a device-wide synchronize would count their completion as
    compute, hiding the bubble."""

    def __init__(self, device):
        self.device, self.start = device, time.perf_counter()

    def __call__(self):
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()
        return time.perf_counter() - self.start

