"""WRONG answers for notebook 09 (for the tests): the padding taken from the end of the list,
not from its start."""


def twice(size, ranks):
    total = -(-size // ranks) * ranks
    return list(range(size - (total - size), size))
