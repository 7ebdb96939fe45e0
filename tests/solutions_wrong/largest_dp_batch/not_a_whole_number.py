"""Solves for the batch as a real number: a fraction of a sample does not exist."""

from coursekit import memory


def largest_dp_batch(gpu_bytes, devices, params, **sizes):
    base = max(memory.dp_memory(params, 1, devices, **sizes))
    per_sample = max(memory.dp_memory(params, 2, devices, **sizes)) - base
    return 1 + (gpu_bytes - base) / per_sample
