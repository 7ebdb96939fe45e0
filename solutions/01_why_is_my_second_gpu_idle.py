"""Reference solutions for notebook 01 (used only when COURSE_SOLUTIONS is set)."""

from common import memory

# as K grows at a fixed batch: device 0 keeps the whole model state and the whole batch's
# outputs at any K (its peak stays); device 1 holds a replica and its 1/K share (it shrinks)
memory_trend = ("stays", "shrinks")


def largest_dp_batch(gpu_bytes, devices, params, **sizes):
    """The largest global batch whose DataParallel step fits in gpu_bytes on every device.

    Device 0 carries the most, and its peak grows with the batch: count up until it no
    longer fits.
    """
    batch = 0
    while max(memory.dp_memory(params, batch + 1, devices, **sizes)) <= gpu_bytes:
        batch += 1
    return batch
