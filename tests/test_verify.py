"""The instructor's verify command, run as an instructor runs it."""

import json
import os
import subprocess
import sys
import time

import nbformat
from conftest import BEHAVE, ROOT, processes_with

KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}
PARAMETERS = 'DEVICE = "auto"\nNPROC = None\nSMOKE = False\nTIMEOUT_S = 300\nRESULTS_DIR = "r"'


def verify(*args, env=None, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "coursekit.verify", *args], cwd=ROOT, capture_output=True,
        text=True, timeout=timeout, env={**os.environ, **(env or {})},
    )  # fmt: skip


def test_verify_runs_a_notebook_and_reports(tmp_path):
    proc = verify("--smoke", "--build", str(tmp_path), "00")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    row = next(line for line in proc.stdout.splitlines() if line.startswith("00_environment"))
    assert "passed" in row and "ready=True" in row
    assert "all passed" in proc.stdout
    report = json.loads((tmp_path / "verify.json").read_text())
    assert [nb["status"] for nb in report["notebooks"]] == ["passed"]
    assert report["notebooks"][0]["seconds"] > 0
    # the most lines one cell printed, and which cell (as committed)
    assert 0 < report["notebooks"][0]["longest_output_lines"] <= 40
    assert isinstance(report["notebooks"][0]["longest_output_cell"], int)
    executed = nbformat.read(tmp_path / "executed" / "00_environment_check.ipynb", as_version=4)
    assert any(cell.get("outputs") for cell in executed.cells)


def test_verify_names_the_failing_cell_and_exits_nonzero(tmp_path):
    proc = verify("--smoke", "--device", "cuda", "--build", str(tmp_path), "03",
                  env={"CUDA_VISIBLE_DEVICES": ""})  # fmt: skip
    assert proc.returncode == 1
    row = next(line for line in proc.stdout.splitlines() if line.startswith("03_your_first"))
    assert "failed" in row
    assert "cell 2: ParameterError: DEVICE='cuda' cannot be used" in row
    assert "FAILED: 03_your_first_ddp_run" in proc.stdout
    committed = nbformat.read(ROOT / "notebooks" / "03_your_first_ddp_run.ipynb", as_version=4)
    assert "coursekit.configure(" in committed.cells[2].source  # cell 2 is the one that failed


def test_verify_stops_a_notebook_at_its_timeout_and_leaves_no_process(tmp_path, token):
    """A notebook whose launched run never ends is cut off at --timeout, processes and all."""
    hanging = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell(PARAMETERS, metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell(
            "import coursekit\n"
            "setup = coursekit.configure(RESULTS_DIR=RESULTS_DIR, TIMEOUT_S=TIMEOUT_S)\n"
            f"coursekit.run_launcher({str(BEHAVE)!r}, ['--mode', 'hang', '--token', {token!r}],"
            " setup=setup)"
        ),
    ], metadata={"kernelspec": KERNELSPEC})  # fmt: skip
    (tmp_path / "notebooks").mkdir()
    nbformat.write(hanging, tmp_path / "notebooks" / "00_hangs.ipynb")
    start = time.monotonic()
    proc = verify("--timeout", "15", "--notebooks-dir", str(tmp_path / "notebooks"),
                  "--build", str(tmp_path / "build"))  # fmt: skip
    assert time.monotonic() - start < 60
    assert proc.returncode == 1
    row = next(line for line in proc.stdout.splitlines() if line.startswith("00_hangs"))
    assert "timed out" in row and "cell 1" in row
    assert processes_with(token) == []


def test_verify_refuses_bad_options_before_running_anything(tmp_path):
    start = time.monotonic()
    proc = verify("--nproc", "0", "--build", str(tmp_path))
    assert time.monotonic() - start < 10
    assert proc.returncode == 2 and "--nproc 0 cannot be used" in proc.stderr
    proc = verify("--build", str(tmp_path), "42")
    assert proc.returncode != 0 and "no notebook matches 42" in proc.stderr
    assert not (tmp_path / "executed").exists()
