"""WRONG answers for notebook 10 (for the tests): the steps to the next checkpoint counted,
not the steps since the last one; a node's own rank numbers for the job's."""


def replayed(kill_at, save_every):
    return save_every - kill_at % save_every


def identity(nodes, per_node):
    """WRONG: the node's own numbers (LOCAL_RANK, LOCAL_WORLD_SIZE) taken for the job's."""
    return per_node - 1, per_node
