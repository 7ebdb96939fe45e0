import os
import sys
import tempfile
import uuid
from pathlib import Path

import psutil
import pytest

# nbformat's schema checks import rfc3987_syntax (1.7 s) when installed; see coursekit.verify
sys.modules.setdefault("rfc3987_syntax", None)

import coursekit  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
BEHAVE = Path(__file__).parent / "launchers" / "behave.py"


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


def torchelastic_dirs() -> set[str]:
    return {d for d in os.listdir(tempfile.gettempdir()) if d.startswith("torchelastic_")}


@pytest.fixture
def token():
    return f"tok-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def setup(tmp_path):
    return coursekit.configure(
        DEVICE="cpu", RESULTS_DIR=tmp_path / "results", TIMEOUT_S=60, quiet=True
    )


@pytest.fixture(autouse=True)
def leaves_no_torchelastic_dirs():
    before = torchelastic_dirs()
    yield
    assert torchelastic_dirs() - before == set(), "torchrun left scratch files in the temp dir"
