"""A WRONG answer of overlapped_ddp (a planted mistake for the tests): never waits for the handles
before the optimizer step.
"""

import torch.distributed as dist
import torch.nn as nn


class OverlappedDDP(nn.Module):
    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module
        for tensor in list(module.parameters()) + list(module.buffers()):
            dist.broadcast(tensor.detach(), src=0)
        self.handles = []
        for p in module.parameters():  # each shared (tied) parameter once
            if p.requires_grad:
                # runs when autograd has added this step's gradient into p.grad
                p.register_post_accumulate_grad_hook(self._reduce)

    def _reduce(self, p):
        self.handles.append((p, dist.all_reduce(p.grad, async_op=True)))  # returns at once

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def finish_gradient_synchronization(self):
        world = dist.get_world_size()
        for p, _handle in self.handles:
            p.grad /= world
        self.handles.clear()
