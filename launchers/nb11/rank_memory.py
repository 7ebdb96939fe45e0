"""What a rank holds, counted (notebook 11's train_step7_sharding.py): not its lesson.

The launcher's lesson is how DDP, ZeRO-1 and FSDP2 wrap the model and what that changes;
this module only measures it (RankMemory): the bytes of this rank's parameters, gradients and
optimizer state tensor by tensor (the local shards under FSDP2), the activations autograd
saves for backward, the process's peak memory, the collective calls of one step (through
torch.profiler, whoever made them: DDP, ZeroRedundancyOptimizer, FSDP2); and it gathers every
trained parameter whole for comparison (trained_state). DeepNet: the glyphs' Net made deeper,
many equal tensors.
"""

import copy
import resource
import sys

import torch
import torch.distributed as dist
from common.glyphs import Net
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.distributed.tensor import DTensor
from torch.profiler import ProfilerActivity, profile


class DeepNet(Net):
    """Net with `depth` conv blocks of width 2W at the end (depth=1: Net itself): a deeper
    model, many tensors of the same size."""

    def __init__(self, classes=8, width=16, norm="batch", depth=1):
        super().__init__(classes, width, norm)
        for _ in range(depth - 1):
            block = copy.deepcopy(self.features[-1])  # conv, norm, ReLU of width 2W
            block[0].reset_parameters()  # a weight of its own (the norm starts as ones, zeros)
            self.features.append(block)


def local_bytes(tensor):
    """Bytes this rank stores for a tensor: its own shard if it is a sharded DTensor."""
    return (tensor.to_local() if isinstance(tensor, DTensor) else tensor).nbytes


def optimizer_state_bytes(optimizer):
    """Sum of the optimizer state's tensors on this rank (AdamW: exp_avg, exp_avg_sq, step)."""
    local = optimizer.optim if isinstance(optimizer, ZeroRedundancyOptimizer) else optimizer
    return sum(local_bytes(v) for state in local.state.values() for v in state.values()
               if torch.is_tensor(v))  # fmt: skip


def activation_bytes(model, x):
    """Bytes autograd saves for backward in one forward, parameters left out (deduplicated).
    Measured on a copy: the forward updates BatchNorm's running statistics."""
    model = copy.deepcopy(model)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            saved[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x).sum()
    return sum(saved.values())


def full_state(model):
    """Every parameter whole, on every rank: DTensor shards are all-gathered (a collective)."""
    return {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().cpu().clone()
            for k, v in model.state_dict().items()}  # fmt: skip


def reset_peak_memory(device):
    """Start a new peak: the allocator's on a GPU; on Linux the process's own (VmHWM, through
    /proc/self/clear_refs), so that every run in this process has a peak of its own."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:  # not Linux: the process's peak since it started
        pass


def peak_memory(device):
    """This process's peak: tensors on the GPU, or the whole process (RSS, in bytes) on CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB, macOS bytes


# c10d's operators, as the profiler names them, and what they are called here
COLLECTIVES = {"c10d::allreduce_": "all-reduce", "c10d::broadcast_": "broadcast",
               "c10d::_allgather_base_": "all-gather", "c10d::allgather_": "all-gather",
               "c10d::allgather_into_tensor_coalesced_": "all-gather",
               "c10d::_reduce_scatter_base_": "reduce-scatter",
               "c10d::reduce_scatter_": "reduce-scatter",
               "c10d::reduce_scatter_tensor_coalesced_": "reduce-scatter"}


def memory_kind(device):
    """What peak_memory measures on this device (the metrics' memory_kind)."""
    return "cuda_max_allocated" if device.type == "cuda" else "peak_rss"


class RankMemory:
    """What this rank holds in one run, kind by kind, and its peak memory: begun before the
    model exists, told of one batch before wrapping, of the gradients after each backward."""

    def __init__(self, device):
        self.device = device
        reset_peak_memory(device)
        self.before = peak_memory(device)  # torch imported, process group up, no model yet
        self.activations = self.grads = 0
        self.profiler, self.collectives = None, {}

    def before_wrapping(self, model, x):
        """One batch's activations, on a copy of the whole model (measured once, unsharded)."""
        self.activations = activation_bytes(model, x)

    def wrapped(self):
        """A new peak from here on: the whole model existed only before sharding."""
        reset_peak_memory(self.device)

    def after_backward(self, model):
        """The gradients this rank holds now, before the step and zero_grad free them."""
        self.grads = sum(local_bytes(p.grad) for p in model.parameters() if p.grad is not None)

    def step_done(self, step):
        """Called after each step (`step` of them done): counts the collective calls of the
        third step by their c10d operators (the first two set things up: DDP, for one,
        broadcasts its rebuilt bucket order in the second)."""
        if step == 2:
            self.profiler = profile(activities=[ProfilerActivity.CPU])
            self.profiler.__enter__()
        elif step == 3:
            self._count()

    def _count(self):
        if self.profiler is not None:
            self.profiler.__exit__(None, None, None)
            for event in self.profiler.events():
                if event.name.startswith("c10d::"):
                    name = COLLECTIVES.get(event.name, event.name)
                    self.collectives[name] = self.collectives.get(name, 0) + 1
            self.profiler = None

    def held(self, model, optimizer):
        """{"rank", "param_bytes", "grad_bytes", "optimizer_bytes", "activation_bytes",
        "peak_before_model", "peak", "collectives"} of this rank: "collectives" {name: calls}
        in one step, empty where the run had fewer than three steps."""
        self._count()  # a run of one step: the profiler, stopped
        return {"rank": dist.get_rank(), "param_bytes": sum(map(local_bytes, model.parameters())),
                "grad_bytes": self.grads, "optimizer_bytes": optimizer_state_bytes(optimizer),
                "activation_bytes": self.activations, "peak_before_model": self.before,
                "peak": peak_memory(self.device),
                "collectives": self.collectives}  # fmt: skip


def trained_state(model, train_model, probe_x):
    """Every rank: (the trained parameters, whole; the model's outputs on probe_x). BatchNorm's
    running statistics: rank 0's everywhere (each rank updated its own, as notebook 04 says)."""
    for buffer in model.buffers():
        dist.broadcast(buffer, src=0)
    params = full_state(model)  # every rank takes part in the all-gathers
    train_model.eval()  # BatchNorm: use the running statistics, as a deployed model does
    with torch.no_grad():
        return params, train_model(probe_x).cpu()
