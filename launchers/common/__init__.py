"""What two or more notebooks' launchers share and is not their lesson: the data, the models,
the tier's device, the timing rounds, the records.

torchrun puts a launcher's own folder (launchers/) first on sys.path, so a launcher imports
these as `from common.glyphs import Net`; notebooks put ../launchers on sys.path to do the
same. A module that serves a single notebook lives in that notebook's package beside this one,
launchers/nbNN/ (`from nb06.bench_job import options`); tests/test_launchers.py checks which
notebooks use each. Plain modules: no torch.distributed set-up happens here, and nothing
imports coursekit.
"""
