"""Returns the first batch that does not fit (off by one)."""

from coursekit import memory


def largest_dp_batch(gpu_bytes, devices, params, **sizes):
    batch = 1
    while max(memory.dp_memory(params, batch, devices, **sizes)) <= gpu_bytes:
        batch += 1
    return batch
