"""What notebook 07's launchers alone import from beside them: the machinery of its DDP checker
(ddp_checker), which check_my_ddp.py and my_ddp_bench.py import as `from nb07.ddp_checker
import wrapper_class`. The timing rounds and the profiler it shares with notebook 06 live in
launchers/common/.
"""
