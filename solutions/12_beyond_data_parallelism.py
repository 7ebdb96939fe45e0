"""Reference answers for notebook 12's predictions (used only when COURSE_SOLUTIONS is set)."""

bubble_m = 1  # one micro-batch: no pipelining at all, the clearest case


def bubble(p, m):
    """1F1B's (and GPipe's) idle fraction of each stage, with p equal stages, m micro-batches
    and free hand-offs, in slots of one micro-batch's forward and backward: each stage computes
    m of them and, while the pipe fills and drains, idles for p - 1 forwards and p - 1
    backwards: p - 1 slots, out of a step of m + p - 1 (with m = 1, one stage works at a time:
    (p - 1) / p)."""
    return (p - 1) / (m + p - 1)
