"""Reference answers of notebook 02's predictions, picked by coursekit.answer(): each a function
of the run's own figures (the notebook calls it when the answer is callable)."""


def reduce_scatter(p):
    """What each of p ranks holds after reduce_scatter_single(out, x) with
    x = arange(2p) + 10 * rank and out of 2 elements: element i of the sum over ranks is
    p * i + 10 * (0 + 1 + ... + p-1), and rank r keeps elements 2r and 2r + 1."""
    total = [p * i + 10 * sum(range(p)) for i in range(2 * p)]
    return [total[2 * r : 2 * r + 2] for r in range(p)]


def crossover_bytes(alpha, beta):
    """The size n* (bytes) where a call of the line t = alpha + n / beta (seconds, bytes per
    second) spends as long on its bytes as on its fixed cost: n / beta = alpha."""
    return alpha * beta
