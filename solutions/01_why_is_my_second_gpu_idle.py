"""Reference solutions for notebook 01 (used only when COURSE_SOLUTIONS is set)."""

import math

from common import memory

# as K grows at a fixed batch: device 0 keeps the whole model state and the whole batch's
# outputs at any K (its peak stays); device 1 holds a replica and its 1/K share (it shrinks)
memory_trend = ("stays", "shrinks")


def largest_batches(gpu_bytes, devices, params, *, dtype, optimizer, activation_bytes_per_sample,
                    output_size):
    """(DP's, DDP's) largest global batch that fits in gpu_bytes on every device, and the kind
    of bytes that makes the gap: "model state", "activations" or "outputs"."""
    weights = params * memory.DTYPE_BYTES[dtype]
    state = memory.OPTIMIZER_STATES[optimizer] * weights  # Adam: 2 tensors of the weights' size
    act, out = activation_bytes_per_sample, output_size * memory.DTYPE_BYTES[dtype]

    def dp_device0(batch):  # at the loss: its own chunk's forward, then the WHOLE batch's
        share = math.ceil(batch / devices)  # outputs gathered, the loss's copy, their gradient
        return weights + state + share * (act + out) + 3 * batch * out

    def ddp_rank(batch):  # weights, gradients, buckets (a copy of the gradients), state,
        share = math.ceil(batch / devices)  # and its own share of the batch only
        return 3 * weights + state + share * (act + 3 * out)

    def largest(bytes_at):
        batch = 0
        while bytes_at(batch + 1) <= gpu_bytes:
            batch += 1
        return batch

    # DP: device 0 decides; DDP trains more despite a larger model state on every rank
    return largest(dp_device0), largest(ddp_rank), "outputs"
