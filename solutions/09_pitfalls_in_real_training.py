"""Reference answers for notebook 09 (used only when COURSE_SOLUTIONS is set)."""


def twice(size, ranks):
    """The indices an evaluation over DistributedSampler(range(size), num_replicas=ranks,
    shuffle=False) sees more than once: the sampler pads its list to a multiple of ranks with
    its own first indices (again and again when the padding is longer than the list)."""
    total = -(-size // ranks) * ranks  # every rank's share is ceil(size / ranks) long
    padded = (list(range(size)) * (total // size + 1))[:total]
    return sorted(i for i in set(padded) if padded.count(i) > 1)
