"""A WRONG answer of bucketed_ddp (a planted mistake for the tests): forgets _reset() after a step:
the next step reuses old counters and handles.
"""

from contextlib import contextmanager

import torch
import torch.distributed as dist
import torch.nn as nn


class BucketedDDP(nn.Module):
    def __init__(self, module: nn.Module, bucket_mb: float = 25.0):
        super().__init__()
        self.module = module
        for tensor in list(module.parameters()) + list(module.buffers()):
            dist.broadcast(tensor.detach(), src=0)
        params = [p for p in module.parameters() if p.requires_grad]
        # reverse registration order: backward produces the last layers' gradients first
        self.buckets, current, size = [], [], 0
        for p in reversed(params):
            current.append(p)
            size += p.numel() * p.element_size()
            if size >= bucket_mb * 2**20:  # MiB, as bucket_cap_mb
                self.buckets.append(current)
                current, size = [], 0
        if current:
            self.buckets.append(current)
        self.bucket_of = {p: i for i, bucket in enumerate(self.buckets) for p in bucket}
        self.sync = True
        self._reset()
        for p in params:
            p.register_post_accumulate_grad_hook(self._gradient_ready)

    def _reset(self):
        self.waiting = [len(bucket) for bucket in self.buckets]  # gradients still to come
        self.next_bucket = 0  # buckets start in order: every rank calls the same collectives
        self.handles = []

    def _gradient_ready(self, p):
        if not self.sync:
            return  # accumulating: the gradients stay local and add up in p.grad
        self.waiting[self.bucket_of[p]] -= 1
        while self.next_bucket < len(self.buckets) and self.waiting[self.next_bucket] == 0:
            bucket = self.buckets[self.next_bucket]
            flat = torch.cat([q.grad.reshape(-1) for q in bucket])  # one message for many tensors
            self.handles.append((bucket, flat, dist.all_reduce(flat, async_op=True)))
            self.next_bucket += 1

    @contextmanager
    def no_sync(self):
        """Backward inside this block leaves the gradients local (accumulation steps)."""
        self.sync = False
        try:
            yield
        finally:
            self.sync = True

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def finish_gradient_synchronization(self):
        world = dist.get_world_size()
        for bucket, flat, handle in self.handles:
            handle.wait()
            flat /= world
            offset = 0
            for p in bucket:  # the averaged sums back into each gradient
                p.grad.copy_(flat[offset:offset + p.numel()].view_as(p.grad))
                offset += p.numel()
