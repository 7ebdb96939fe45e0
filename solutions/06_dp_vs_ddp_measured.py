"""Reference answers for notebook 06's tasks (used only when COURSE_SOLUTIONS is set).

The first is a prediction about timings: the run judges it, and on a busy or unusual machine
it can judge the reference NOT YET; the notebook says what it measured instead."""

# What the lesson expects: DDP's ranks run Python in interpreters of their own (DP's threads
# share one GIL), and on the matmul model each rank computes its own share of the batch.
fastest = {"matmul": "DDP", "python": "DDP"}
# On a CPU, one process already computes on every core (as threads): the matmul model's DDP
# ranks split the same cores and all-reduce on top. The Python-heavy model still wants DDP.
fastest_on_cpu = {"matmul": "one process", "python": "DDP"}


def bucket_count(tensor_bytes, bucket_cap_mb=None):
    """How many buckets DDP makes of gradients of these sizes (bytes, in the order backward
    produces them): whole tensors, a bucket closed once it holds at least its cap."""
    if bucket_cap_mb is None:  # the default: a small first bucket, then 25 MiB ones
        first, cap = 2**20, 25 * 2**20
    else:  # an explicit cap, in MiB, for every bucket, the first one's included
        first = cap = int(bucket_cap_mb * 2**20)
    buckets, size, limit = 0, 0, first
    for nbytes in tensor_bytes:
        size += nbytes
        if size >= limit:
            buckets, size, limit = buckets + 1, 0, cap
    return buckets + (size > 0)  # the last bucket, part full
