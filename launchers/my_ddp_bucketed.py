"""Step 3 of DDP by hand (you write it): gradient buckets, one all-reduce each; no_sync()."""

from contextlib import contextmanager

import torch  # noqa: F401 (yours to use)
import torch.distributed as dist
import torch.nn as nn


class BucketedDDP(nn.Module):
    def __init__(self, module: nn.Module, bucket_mb: float = 25.0):
        super().__init__()
        self.module, self.sync = module, True  # sync: False inside no_sync()
        for tensor in [*module.parameters(), *module.buffers()]:  # as in step 1
            dist.broadcast(tensor.detach(), src=0)
        params = [p for p in module.parameters() if p.requires_grad]
        # TODO 1: buckets (lists of parameters): walk params in REVERSE (backward fills the last
        # layers first); close it at bucket_mb MiB (2**20 bytes; p: p.numel() * p.element_size())
        self.buckets = [params]
        self.bucket_of = {p: i for i, bucket in enumerate(self.buckets) for p in bucket}
        self._reset()
        for p in params:
            p.register_post_accumulate_grad_hook(self._gradient_ready)

    def _reset(self):
        self.waiting = [len(bucket) for bucket in self.buckets]  # gradients still to come
        self.next_bucket = 0  # start buckets in order: every rank makes the same calls
        self.handles = []  # (bucket, flat, handle) of each all-reduce started

    def _gradient_ready(self, p):
        # TODO 2: if self.sync, count p in its bucket; while the next bucket is complete, start
        # dist.all_reduce(flat, async_op=True) on flat = torch.cat(its grads, reshaped to 1-D)
        raise NotImplementedError("step 3: start a bucket's all-reduce when it is full")

    @contextmanager
    def no_sync(self):  # backward in this block leaves the gradients local (accumulation)
        self.sync = False
        try:
            yield
        finally:
            self.sync = True

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def finish_gradient_synchronization(self):
        # TODO 3: per (bucket, flat, handle): wait, divide, copy slices back into p.grad; _reset()
        raise NotImplementedError("step 3: wait for the buckets and copy them back here")
