"""What notebook 03 alone uses from beside the launchers: broadcast_check_ranks.py, the ranks of
its broadcast_from_rank0 check, which its task-check cell runs as a script under torchrun
(`torchrun ... launchers/nb03/broadcast_check_ranks.py`); nothing imports it. What two or more
notebooks share is in launchers/common/.
"""
