import json
import os
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

import psutil
import pytest

# nbformat's schema checks import rfc3987_syntax (1.7 s) when installed; see coursekit.verify
sys.modules.setdefault("rfc3987_syntax", None)

import papermill  # noqa: E402
from traitlets.config import Config  # noqa: E402

import coursekit  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
BEHAVE = Path(__file__).parent / "launchers" / "behave.py"


def notebook_path(stem_prefix: str) -> Path:
    """The notebook whose file name starts with ``stem_prefix`` (``"03"``)."""
    (path,) = [nb for nb in NOTEBOOKS if nb.name.startswith(stem_prefix)]
    return path


def execute_notebook(stem_prefix: str, tmp_path: Path, **parameters) -> dict:
    """Run a notebook with papermill (SMOKE sizes unless told otherwise) as the course's
    verify command does, check the results contract, and return its results file."""
    notebook = notebook_path(stem_prefix)
    results_dir = tmp_path / "results"
    papermill.execute_notebook(
        str(notebook), str(tmp_path / notebook.name),
        parameters={"SMOKE": True, "RESULTS_DIR": str(results_dir), **parameters},
        cwd=str(notebook.parent), kernel_name="python3", progress_bar=False,
        config=Config({"KernelManager": {"transport": "ipc"}}),
    )  # fmt: skip
    results = json.loads((results_dir / f"{notebook.stem}.json").read_text())
    assert results["notebook"] == notebook.stem
    assert results["tier"] in {"cpu", "single-gpu", "multi-gpu"}
    assert results["smoke"] is parameters.get("SMOKE", True)
    if "NPROC" in parameters:
        assert results["nproc"] == parameters["NPROC"]
    return results


def processes_with(token: str) -> list[psutil.Process]:
    """Live processes whose command line mentions ``token`` (zombies are dead: not counted)."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            cmdline = " ".join(p.info["cmdline"] or [])
            if p.info["status"] != psutil.STATUS_ZOMBIE and token in cmdline:
                found.append(p)
        except psutil.Error:
            pass
    return found


# Everything the tests start (kernels, torchrun, workers) inherits this private temp dir, so
# the check below sees only what the course's own runs leave, not other programs' files.
SCRATCH = Path(tempfile.mkdtemp(prefix="course-tests-"))
os.environ["TMPDIR"] = str(SCRATCH)
tempfile.tempdir = None  # re-read TMPDIR


def torchelastic_dirs() -> set[str]:
    return {d for d in os.listdir(SCRATCH) if d.startswith("torchelastic_")}


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(SCRATCH, ignore_errors=True)


@pytest.fixture
def token():
    return f"tok-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def setup(tmp_path):
    return coursekit.configure(
        DEVICE="cpu", RESULTS_DIR=tmp_path / "results", TIMEOUT_S=180, quiet=True
    )


@pytest.fixture(autouse=True)
def leaves_no_torchelastic_dirs():
    before = torchelastic_dirs()
    yield
    assert torchelastic_dirs() - before == set(), "torchrun left scratch files in the temp dir"
