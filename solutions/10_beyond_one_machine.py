"""Reference answers for notebook 10 (used only when COURSE_SOLUTIONS is set)."""


def replayed(kill_at, save_every):
    """Steps the restarted group computes a second time when rank 1 is killed as rank 0 reports
    step ``kill_at``: the group resumes from the last checkpoint, taken after every
    ``save_every``-th step, and does every step after it again."""
    return kill_at % save_every


def identity(nodes, per_node):
    """(RANK, WORLD_SIZE) of the last worker of the last node: ranks are numbered over the whole
    job, node by node (GROUP_RANK x LOCAL_WORLD_SIZE + LOCAL_RANK)."""
    return nodes * per_node - 1, nodes * per_node
