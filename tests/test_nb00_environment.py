"""Notebook 00: versions, tier, and a working all-reduce."""

import sys
from pathlib import Path

from conftest import execute_notebook


def test_environment_check(tmp_path):
    results = execute_notebook("00", tmp_path)
    assert results["ready"] is True and results["allreduce_ok"] is True
    assert results["allreduce_world_size"] == max(2, results["nproc"])
    assert results["verdict"].startswith("READY")
    # the all-reduce and the verdict are claims that held (the start-up time is only shown)
    held = {c["text"].split(" ")[0]: c["held"] for c in results["claims"]}
    assert held["All-reduce"] is True and held["READY:"] is True
    # the kernel named "python3" is this environment's Python, not some other one on the machine
    kernel_env = Path(results["python_executable"]).parent.parent  # .venv/bin/python -> .venv
    assert kernel_env.resolve() == Path(sys.prefix).resolve()
