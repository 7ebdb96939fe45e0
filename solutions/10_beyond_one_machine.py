"""Reference answers for notebook 10 (used only when COURSE_SOLUTIONS is set)."""


def replayed(kill_at, save_every):
    """Steps the restarted group computes a second time when rank 1 is killed as rank 0 reports
    step ``kill_at``: the group resumes from the last checkpoint, taken after every
    ``save_every``-th step, and does every step after it again."""
    return kill_at % save_every


# Which rule gives GROUP_RANK 0: once every agent has joined, the c10d rendezvous sorts them by
# their node descriptor (address as text, process id, a local counter):
# `sorted(state.participants)` in torch/distributed/elastic/rendezvous/dynamic_rendezvous.py.
# "127.0.0.1" < "localhost", so node 1 is numbered 0.
node_rule = "address"
