"""Deliberately wrong answers to notebook 01's tasks: device 0's memory predicted to grow with
the replicas (it stays: nothing it holds is divided by K), and the batch computed as if
DataParallel split the memory evenly over the devices, as DDP would
(tests/planted/largest_dp_batch.py, split_evenly_like_ddp), which overestimates it."""

from common import memory

memory_trend = ("grows", "shrinks")


def largest_dp_batch(gpu_bytes, devices, params, **sizes):
    batch = 0
    while max(memory.ddp_memory(params, batch + 1, devices, **sizes)) <= gpu_bytes:
        batch += 1
    return batch
