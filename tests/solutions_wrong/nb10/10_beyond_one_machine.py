"""WRONG answers for notebook 10 (for the tests): the steps to the next checkpoint counted,
not the steps since the last one; the node started first (and with the lower process id)
taken for GROUP_RANK 0."""


def replayed(kill_at, save_every):
    return save_every - kill_at % save_every


# WRONG: the agent with the lower process id numbered first (the pid only breaks ties)
node_rule = "pid"
