"""Checks the last device (the least loaded) instead of every device."""

from coursekit import memory


def largest_dp_batch(gpu_bytes, devices, params, **sizes):
    batch = 0
    while memory.dp_memory(params, batch + 1, devices, **sizes)[-1] <= gpu_bytes:
        batch += 1
    return batch
