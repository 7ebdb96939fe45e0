"""Pipeline parallelism (notebook 12): each rank holds a few consecutive blocks, a stage.

    torchrun --nproc-per-node 2 launchers/pipeline_parallel.py --runs hand:1f1b:4 torch:gpipe:4

Micro-batches flow through the stages: rank r receives activations from rank r-1, runs its
blocks, sends to rank r+1; gradients flow back. GPipe and 1F1B by hand with send/recv and
with torch.distributed.pipelining (nb12/layout_mains.py: the options, the runs, metrics).
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from nb12 import layout_mains, tiny_gpt
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe


class Stage(nn.Module):
    """Stage `rank` of `stages`: its blocks, and the embeddings (first) or norm and head (last).
    Its blocks keep their names in the whole model: the comparison with one process needs them."""

    def __init__(self, model, rank, stages):
        super().__init__()
        n = len(model.blocks)
        mine = range(rank * n // stages, (rank + 1) * n // stages)
        self.blocks = nn.ModuleDict({str(i): model.blocks[i] for i in mine})
        self.first, self.last = rank == 0, rank == stages - 1
        self.width = model.ln_f.normalized_shape[0]  # of the activations it sends and receives
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
    """One step: the forwards and backwards in `order`, receiving and sending between stages.
    Returns the loss (last stage) and this stage's timeline: (kind, i, start, end) of compute.
    `wire`: where sends go from (the stage's device under NCCL; the CPU under gloo: CPU only)."""
    shape = (*micro_x[0].shape, stage.width)  # micro-batch x seq x width
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


def with_torch(stage, schedule_name, microbatches, device):
    """The same schedules from torch.distributed.pipelining: run_step(x, y, clock) -> (loss, [])."""
    schedule_class = ScheduleGPipe if schedule_name == "gpipe" else Schedule1F1B
    schedule = schedule_class(PipelineStage(stage, dist.get_rank(), dist.get_world_size(), device),
                              n_microbatches=microbatches, loss_fn=tiny_gpt.loss_fn)

    def run_step(x, y, clock):  # torch's schedule: the same order, no timeline recorded
        micro_losses = []
        schedule.step(*([x] if stage.first else []),
                      target=y if stage.last else None, losses=micro_losses)
        return sum(m.item() for m in micro_losses) / microbatches, []  # last stage
    return run_step


if __name__ == "__main__":
    layout_mains.pipeline_main(__doc__, Stage, pipeline_step_by_hand,
                               {"gpipe": gpipe_order, "1f1b": one_f_one_b_order}, with_torch)
