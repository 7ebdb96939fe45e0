"""What notebook 06's benchmark (ddp_bench.py) alone imports from beside it: the job around it
(bench_job), the models and one-process variants of its scaling part (scaling_models) and the
hand-made gradient reductions (grad_reductions), as `from nb06.bench_job import options`. The
timing rounds and the profiler it shares with notebook 07 live in launchers/common/.
"""
