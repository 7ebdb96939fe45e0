"""WRONG answers of notebook 02's predictions (for the tests): plausible mistakes."""


def reduce_scatter(p):
    """Confuses reduce-scatter with all-reduce: every rank holds the first two sums."""
    total = [p * i + 10 * sum(range(p)) for i in range(2 * p)]
    return [total[:2] for _ in range(p)]


def crossover_bytes(alpha, beta):
    """Divides the fixed cost by the bandwidth instead of multiplying: not bytes."""
    return alpha / beta
