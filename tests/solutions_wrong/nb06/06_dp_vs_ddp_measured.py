"""Deliberately wrong answers to notebook 06's tasks, wrong on any machine: a variant the
benchmark has no column for, and a bucket count that splits tensors at the cap in bytes."""

fastest = fastest_on_cpu = {"matmul": "a GPU", "python": "DP"}


def bucket_count(tensor_bytes, bucket_cap_mb=None):
    return -(-sum(tensor_bytes) // int((bucket_cap_mb or 25) * 2**20))  # ceil(G / cap)
