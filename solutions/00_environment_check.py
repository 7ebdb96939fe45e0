"""Reference answers for notebook 00 (used only when COURSE_SOLUTIONS is set)."""


def received(n):
    """What each of ``n`` ranks holds after all-reducing (sum) ``rank + 1``: the same total."""
    return [n * (n + 1) / 2] * n


# all_gather over the 2 live ranks: every rank holds every rank's t = rank + 1, in rank order
gathered = [[1.0, 2.0], [1.0, 2.0]]
