"""WRONG answers for notebook 10 (for the tests): the steps to the next checkpoint counted,
not the steps since the last one."""


def replayed(kill_at, save_every):
    return save_every - kill_at % save_every
