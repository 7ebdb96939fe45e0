"""Reference answers for notebook 06's predictions (used only when COURSE_SOLUTIONS is set).

Both are predictions about timings: the run judges them, and on a busy or unusual machine it
can judge a reference prediction NOT YET; the notebook says what it measured instead."""

import math

# What the lesson expects: DDP's ranks run Python in interpreters of their own (DP's threads
# share one GIL), and on the matmul model each rank computes its own share of the batch.
fastest = {"matmul": "DDP", "python": "DDP"}
# On a CPU, one process already computes on every core (as threads): the matmul model's DDP
# ranks split the same cores and all-reduce on top. The Python-heavy model still wants DDP.
fastest_on_cpu = {"matmul": "one process", "python": "DDP"}


def bucket_cap_mb(alpha, beta, backward_s, grad_bytes, caps=(0.25, 1, 4, 25)):
    """The cap whose all-reduces outlast backward least, by the alpha-beta model: n buckets
    of grad_bytes / n bytes, bucket k full at k/n of the backward's backward_s, its
    all-reduce (alpha + bytes / beta seconds) after the one before it."""

    def left_after_backward(cap):
        n = math.ceil(grad_bytes / (cap * 2**20))
        done = 0.0
        for k in range(1, n + 1):
            done = max(done, backward_s * k / n) + alpha + grad_bytes / n / beta
        return done - backward_s

    return min(caps, key=left_after_backward)
