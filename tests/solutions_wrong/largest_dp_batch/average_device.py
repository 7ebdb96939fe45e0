"""Checks the average device's memory instead of the fullest one's."""

from coursekit import memory


def largest_dp_batch(gpu_bytes, devices, params, **sizes):
    batch = 0
    while sum(memory.dp_memory(params, batch + 1, devices, **sizes)) / devices <= gpu_bytes:
        batch += 1
    return batch
