"""Gradient averaging by hand, the ways DDP's buckets are measured against (notebook 06,
section 4): after backward one call per tensor, or one flat call; or each tensor's call
started from a gradient hook during backward. Notebook 07 has the learner write them.
"""

import torch
import torch.distributed as dist


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
