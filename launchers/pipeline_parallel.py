"""Pipeline parallelism (notebook 12): each rank holds a few consecutive blocks, a stage.

    torchrun --nproc-per-node 2 launchers/pipeline_parallel.py --runs hand:1f1b:4 torch:gpipe:4

The batch is cut into micro-batches that flow through the stages: rank r receives a
micro-batch's activations from rank r-1, runs its blocks, sends the result to rank r+1; in
backward the gradients flow back the same way. The first stage also embeds the tokens, the
last also norms, projects and computes the loss.
--runs IMPL:SCHEDULE:M [...], one or more (each trains in turn, in the same processes, from the
same weights), M micro-batches of --micro-batch samples each:
  SCHEDULE gpipe   all forwards, then all backwards: every stage keeps the activations of
                   all m micro-batches until their backward
  SCHEDULE 1f1b    p-1-r forwards to fill the pipe, then one forward, one backward: rank r
                   keeps at most p-r micro-batches in flight
  IMPL hand        the schedules written out with send/recv
  IMPL torch       torch.distributed.pipelining: PipelineStage + ScheduleGPipe/Schedule1F1B
Each rank records when it computed what (the timeline) and the peak of the bytes autograd
kept for backward; rank 0 writes them with the differences from one process (float64).
Options: the model's (tiny_gpt.add_model_args, but the batch: M x --micro-batch), --runs,
--micro-batch, --device cpu|cuda, --out DIR.
"""

import argparse
import json
import os
import time

import tiny_gpt
import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401 - before init_process_group: see ddp_first_run.py
import torch.nn as nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe


def device_and_backend(requested: str, local_rank: int, local_world_size: int,
                       n_gpus: int) -> tuple[torch.device, str]:
    """Where this rank computes and how the ranks talk: the one place that decides.
    NCCL needs a GPU of its own for every rank of this node (LOCAL_WORLD_SIZE)."""
    if requested == "cuda":
        device = torch.device("cuda", local_rank % n_gpus)
        return device, "nccl" if local_world_size <= n_gpus else "gloo"
    return torch.device("cpu"), "gloo"


class Stage(nn.Module):
    """Stage `rank` of `stages`: its share of the blocks (named as in the whole model), plus
    the embeddings on the first stage and the norm and head on the last."""

    def __init__(self, model, rank, stages):
        super().__init__()
        n = len(model.blocks)
        mine = range(rank * n // stages, (rank + 1) * n // stages)
        self.blocks = nn.ModuleDict({str(i): model.blocks[i] for i in mine})
        self.first, self.last = rank == 0, rank == stages - 1
        if self.first:
            self.tok, self.pos = model.tok, model.pos
        if self.last:
            self.ln_f, self.head = model.ln_f, model.head

    def forward(self, x):
        if self.first:
            x = self.tok(x) + self.pos[: x.shape[1]]
        for block in self.blocks.values():
            x = block(x)
        return self.head(self.ln_f(x)) if self.last else x


def gpipe_order(microbatches, rank, stages):
    """GPipe: every forward, then every backward."""
    return [("F", i) for i in range(microbatches)] + [("B", i) for i in range(microbatches)]


def one_f_one_b_order(microbatches, rank, stages):
    """1F1B: enough forwards to fill the pipe after this stage, then alternate."""
    warmup = min(stages - rank - 1, microbatches)
    order, forwards = [("F", i) for i in range(warmup)], warmup
    for i in range(microbatches):
        if forwards < microbatches:
            order.append(("F", forwards))
            forwards += 1
        order.append(("B", i))
    return order


def pipeline_step_by_hand(stage, order, micro_x, micro_y, rank, stages, clock, wire):
    """Run one step's forwards and backwards in `order`; returns the loss (last stage) and
    what this stage computed when: (kind, micro-batch, start, end), compute only. `wire`:
    the device the backend sends from (the stage's under NCCL; the CPU under gloo, which
    takes CPU tensors only, also when the stages compute on GPUs)."""
    shape = (micro_x[0].shape[0], micro_x[0].shape[1], stage_width(stage))
    dtype, device = torch.float64, micro_x[0].device
    inputs, outputs, sends, timeline, loss = {}, {}, [], [], 0.0
    for kind, i in order:
        if kind == "F":
            if stage.first:
                x = micro_x[i]
            else:  # the previous stage's activations for micro-batch i
                x = torch.empty(shape, dtype=dtype, device=wire)
                dist.recv(x, rank - 1)
                x = x.to(device).requires_grad_()
            start = clock()
            out = stage(x)
            if stage.last:  # the mean over micro-batches: the whole batch's mean loss
                out = tiny_gpt.loss_fn(out, micro_y[i]) / len(micro_x)
                loss += out.item()
            else:
                sent = out.detach().to(wire)  # kept until its send is done
                sends.append((dist.isend(sent, rank + 1), sent))
            inputs[i], outputs[i] = x, out
            timeline.append(("F", i, start, clock()))
        else:
            grad = None
            if not stage.last:  # the next stage's gradient of my output
                grad = torch.empty(shape, dtype=dtype, device=wire)
                dist.recv(grad, rank + 1)
                grad = grad.to(device)
            start = clock()
            torch.autograd.backward(outputs[i], grad)
            if not stage.first:
                sent = inputs[i].grad.to(wire)
                sends.append((dist.isend(sent, rank - 1), sent))
            timeline.append(("B", i, start, clock()))
            del inputs[i], outputs[i]  # done with micro-batch i: its activations are freed
    for work, _ in sends:
        work.wait()
    return loss, timeline


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


def stage_width(stage):
    block = next(iter(stage.blocks.values()))
    return block.ln1.normalized_shape[0]


def parse_run(spec):
    """'hand:1f1b:4' -> ('hand', '1f1b', 4), or an argparse error that names the fix."""
    parts = spec.split(":")
    if (len(parts) != 3 or parts[0] not in ("hand", "torch") or parts[1] not in ("gpipe", "1f1b")
            or not parts[2].isdigit() or int(parts[2]) < 1):
        raise argparse.ArgumentTypeError(
            f"{spec!r}: give IMPL:SCHEDULE:M, IMPL hand or torch, SCHEDULE gpipe or 1f1b, "
            "M micro-batches (1 or more), e.g. hand:1f1b:4")
    return parts[0], parts[1], int(parts[2])


def train(impl, schedule_name, microbatches, args, device):
    """One run: a fresh stage of the same model, the run's batches, its schedule; returns
    this rank's figures gathered on rank 0, and the run's."""
    rank, stages = dist.get_rank(), dist.get_world_size()
    wire = device if dist.get_backend() == "nccl" else torch.device("cpu")
    batches = tiny_gpt.make_batches(args)
    reference_losses, reference = tiny_gpt.reference_run(args, batches)
    stage = Stage(tiny_gpt.build_model(args), rank, stages).to(device)
    optimizer = torch.optim.AdamW(stage.parameters(), lr=args.lr)
    order = (gpipe_order if schedule_name == "gpipe" else one_f_one_b_order)(
        microbatches, rank, stages)
    if impl == "torch":
        schedule_class = ScheduleGPipe if schedule_name == "gpipe" else Schedule1F1B
        schedule = schedule_class(PipelineStage(stage, rank, stages, device),
                                  n_microbatches=microbatches, loss_fn=tiny_gpt.loss_fn)
    if rank == 0:
        print(f"pipeline ({impl}, {schedule_name}): {stages} stage(s), {microbatches} "
              f"micro-batches of {args.batch // microbatches}", flush=True)

    losses, step_times, timelines = [], [], []
    for step, (x, y) in enumerate(batches):
        # contiguous: the batches are slices of longer sequences, and torch 2.11's pipelining
        # refuses a stage input whose strides are not those of a fresh tensor
        x, y = x.to(device).contiguous(), y.to(device).contiguous()
        dist.barrier()  # every stage starts the step together: one time origin for the timeline
        clock = StepClock(device)
        with tiny_gpt.SavedActivations(stage) as saved:
            if impl == "hand":
                loss, timeline = pipeline_step_by_hand(
                    stage, order, x.chunk(microbatches), y.chunk(microbatches),
                    rank, stages, clock, wire)
            else:
                micro_losses = []
                schedule.step(*([x] if stage.first else []),
                              target=y if stage.last else None, losses=micro_losses)
                loss = sum(m.item() for m in micro_losses) / microbatches  # last stage
                timeline = []
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

    reference_state = dict(reference.named_parameters())
    param_diff = max((p.detach().cpu() - reference_state[n].detach()).abs().max().item()
                     for n, p in stage.named_parameters())
    reference_grads = tiny_gpt.first_step_gradients(args, batches[0])
    grad_diff = max((g.cpu() - reference_grads[n]).abs().max().item()
                    for n, g in first_grads.items())
    held = {"rank": rank, "blocks": [int(i) for i in stage.blocks],
            **tiny_gpt.held_bytes(stage, optimizer),
            "grad_bytes": grad_bytes, "activation_bytes": activation_bytes,
            "timelines": timelines,
            "step_times_s": step_times, "grad_max_diff": grad_diff, "param_max_diff": param_diff,
            "device_peak_bytes": tiny_gpt.device_peak_bytes(device)}
    gathered = [None] * stages
    dist.gather_object(held, gathered if rank == 0 else None)
    return {"impl": impl, "schedule": schedule_name, "microbatches": microbatches,
            "ranks": gathered, **tiny_gpt.run_summary(args, losses, reference_losses, reference)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    tiny_gpt.add_model_args(parser, batch=False)
    parser.add_argument("--runs", nargs="+", type=parse_run, default=[("hand", "1f1b", 4)],
                        metavar="IMPL:SCHEDULE:M")
    parser.add_argument("--micro-batch", type=int, default=2, help="samples per micro-batch")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default="out", help="folder for metrics.json (rank 0 writes)")
    args = parser.parse_args()

    rank, stages = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if args.layers < stages:
        parser.error(f"--layers {args.layers}: each of the {stages} stages needs a block")
    n_gpus = torch.cuda.device_count() if args.device == "cuda" else 0
    device, backend = device_and_backend(args.device, int(os.environ["LOCAL_RANK"]),
                                         int(os.environ["LOCAL_WORLD_SIZE"]), n_gpus)
    if backend == "gloo" and device.type == "cuda" and any(r[0] == "torch" for r in args.runs):
        parser.error("--runs torch:...: torch.distributed.pipelining sends through the process "
                     "group, and gloo (the ranks share GPUs here) takes CPU tensors only: run "
                     "the torch schedules with --device cpu, or with one rank per GPU")
    if device.type == "cuda":
        torch.cuda.set_device(device)  # before init: NCCL binds this rank to its GPU
    dist.init_process_group(backend, device_id=device if backend == "nccl" else None)
    os.makedirs(args.out, exist_ok=True)
    if rank == 0:
        print(f"{stages} stage(s), backend {backend}", flush=True)

    runs = {}
    for impl, schedule_name, m in args.runs:
        run_args = argparse.Namespace(**vars(args), batch=m * args.micro_batch)
        runs[f"{impl}:{schedule_name}:{m}"] = train(impl, schedule_name, m, run_args, device)
    if rank == 0:
        with open(os.path.join(args.out, "metrics.json"), "w") as f:
            json.dump({"world_size": stages, "backend": backend, "runs": runs}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
