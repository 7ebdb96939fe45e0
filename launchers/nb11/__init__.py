"""What notebook 11's launchers alone import from beside them: what a rank holds, counted
(rank_memory), train_step7_sharding.py's runs (sharding_runs) and the machinery of the ZeRO-1
check (zero1_checker), as `from nb11.rank_memory import RankMemory`. The training chain and the
memory calculator it shares with other notebooks live in launchers/common/.
"""
