"""Deliberately wrong answers to notebook 01's tasks: device 0's memory predicted to grow with
the replicas (it stays: nothing it holds is divided by K), and DP's batch computed as if
DataParallel split the memory evenly over the devices, as DDP does
(tests/planted/largest_batches.py, dp_split_evenly_like_ddp), which overestimates it."""

import math

from common import memory

memory_trend = ("grows", "shrinks")


def largest_batches(gpu_bytes, devices, params, *, dtype, optimizer, activation_bytes_per_sample,
                    output_size):
    weights = params * memory.DTYPE_BYTES[dtype]
    state = memory.OPTIMIZER_STATES[optimizer] * weights
    act, out = activation_bytes_per_sample, output_size * memory.DTYPE_BYTES[dtype]

    def ddp_rank(batch):
        return 3 * weights + state + math.ceil(batch / devices) * (act + 3 * out)

    batch = 0
    while ddp_rank(batch + 1) <= gpu_bytes:
        batch += 1
    return batch, batch, "outputs"
