"""Assumes DataParallel splits the memory evenly over the devices, as DDP does."""

from coursekit import memory


def largest_dp_batch(gpu_bytes, devices, params, **sizes):
    batch = 0
    while max(memory.ddp_memory(params, batch + 1, devices, **sizes)) <= gpu_bytes:
        batch += 1
    return batch
