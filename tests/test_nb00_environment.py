"""Notebook 00: versions, tier, and a working all-reduce."""

import sys
from pathlib import Path

from conftest import execute_notebook


def test_environment_check(tmp_path):
    results = execute_notebook("00", tmp_path)
    assert results["ready"] is True and results["allreduce_ok"] is True
    assert results["allreduce_world_size"] == max(2, results["nproc"])
    assert results["verdict"].startswith("READY")
    # the kernel named "python3" is this environment's Python, not some other one on the machine
    kernel_env = Path(results["python_executable"]).parent.parent  # .venv/bin/python -> .venv
    assert kernel_env.resolve() == Path(sys.prefix).resolve()
