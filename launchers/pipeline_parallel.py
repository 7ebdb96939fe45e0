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
kept for backward; rank 0 writes them with the differences from one process (float64;
common/layout_runs.py). Options: the model's (tiny_gpt.add_model_args, but the batch:
M x --micro-batch), --runs, --micro-batch, --device cpu|cuda, --out DIR.
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401 - before init_process_group: see ddp_first_run.py
import torch.nn as nn
from common import layout_runs, tiny_gpt
from common.devices import device_and_backend
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe


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


def stage_width(stage):
    block = next(iter(stage.blocks.values()))
    return block.ln1.normalized_shape[0]


def train(impl, schedule_name, microbatches, args, device):
    """One run: a fresh stage of the same model, the run's batches, its schedule; returns
    this rank's figures gathered on rank 0, and the run's."""
    rank, stages = dist.get_rank(), dist.get_world_size()
    batches = tiny_gpt.make_batches(args)
    reference_losses, reference = tiny_gpt.reference_run(args, batches)
    stage = Stage(tiny_gpt.build_model(args), rank, stages).to(device)
    optimizer = torch.optim.AdamW(stage.parameters(), lr=args.lr)
    if impl == "hand":
        wire = device if dist.get_backend() == "nccl" else torch.device("cpu")
        order = (gpipe_order if schedule_name == "gpipe" else one_f_one_b_order)(
            microbatches, rank, stages)

        def run_step(x, y, clock):  # -> (the loss, on the last stage; the timeline)
            return pipeline_step_by_hand(stage, order, x.chunk(microbatches),
                                         y.chunk(microbatches), rank, stages, clock, wire)
    else:
        schedule_class = ScheduleGPipe if schedule_name == "gpipe" else Schedule1F1B
        schedule = schedule_class(PipelineStage(stage, rank, stages, device),
                                  n_microbatches=microbatches, loss_fn=tiny_gpt.loss_fn)

        def run_step(x, y, clock):  # torch's schedule: the same order, no timeline recorded
            micro_losses = []
            schedule.step(*([x] if stage.first else []),
                          target=y if stage.last else None, losses=micro_losses)
            return sum(m.item() for m in micro_losses) / microbatches, []  # last stage
    if rank == 0:
        print(f"pipeline ({impl}, {schedule_name}): {stages} stage(s), {microbatches} "
              f"micro-batches of {args.batch // microbatches}", flush=True)

    losses, first_grads, figures = layout_runs.train_pipeline(
        stage, optimizer, batches, reference_losses, device, run_step)
    gathered = layout_runs.gather_figures(  # and the differences from one process
        stage, optimizer, first_grads, args, batches, reference, device,
        blocks=[int(i) for i in stage.blocks], **figures)
    return {"impl": impl, "schedule": schedule_name, "microbatches": microbatches,
            "ranks": gathered, **tiny_gpt.run_summary(args, losses, reference_losses, reference)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    tiny_gpt.add_model_args(parser, batch=False)
    parser.add_argument("--runs", nargs="+", type=layout_runs.parse_run,
                        default=[("hand", "1f1b", 4)], metavar="IMPL:SCHEDULE:M")
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
    if rank == 0:
        print(f"{stages} stage(s), backend {backend}", flush=True)

    runs = {}
    for impl, schedule_name, m in args.runs:
        run_args = argparse.Namespace(**vars(args), batch=m * args.micro_batch)
        runs[f"{impl}:{schedule_name}:{m}"] = train(impl, schedule_name, m, run_args, device)
    layout_runs.write_metrics(args.out, {"world_size": stages, "backend": backend, "runs": runs})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
