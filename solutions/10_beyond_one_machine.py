"""Reference answers for notebook 10 (used only when COURSE_SOLUTIONS is set)."""


def replayed(kill_at, save_every):
    """Steps the restarted group computes a second time when rank 1 is killed as rank 0 reports
    step ``kill_at``: the group resumes from the last checkpoint, taken after every
    ``save_every``-th step, and does every step after it again."""
    return kill_at % save_every
