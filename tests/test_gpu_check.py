"""scripts/gpu_check.py: the first command on a GPU machine, run here in its CPU mode."""

import json
import subprocess
import sys

import pytest
from conftest import ROOT

SCRIPT = ROOT / "scripts" / "gpu_check.py"


@pytest.mark.slow
def test_gpu_check_in_cpu_mode_writes_a_summary_that_passes(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--only", "00", "--lanes", "1",
         "--compile-backend", "eager", "--build", str(tmp_path)],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["passed"] is True and summary["failures"] == []
    assert summary["torch_pinned"] == "2.13.0" and summary["torch"].startswith("2.")
    assert [r["notebook"] for r in summary["notebooks"]] == ["00_environment_check"]
    assert summary["notebooks"][0]["status"] == "passed"
    probes = summary["probes"]
    assert set(probes) == {"bf16_compile", "allreduce"}  # the fp16 probe: GPUs only, by choice
    assert probes["allreduce"]["backend"] == "gloo"
    assert all(p["status"] == "passed" for p in probes.values())
    assert summary["image_cuda_tag"]["status"] == "not checked"  # a CPU build of torch here


def test_the_image_cuda_tag_is_checked_against_the_pinned_torch():
    sys.path.insert(0, str(ROOT / "scripts"))
    from gpu_check import image_cuda_check

    tag = image_cuda_check(None, True)["dockerfile_cuda"]
    assert tag and tag.count(".") == 1  # the Dockerfile's CUDA_TAG parses
    assert image_cuda_check(tag, True)["status"] == "passed"
    other = image_cuda_check("99.1", True)
    assert other["status"] == "failed" and "ARG CUDA_TAG=cuda99.1" in other["error"]
    assert image_cuda_check("99.1", False)["status"] == "not checked"


def test_a_failure_with_another_torch_is_told_apart_from_a_defect():
    sys.path.insert(0, str(ROOT / "scripts"))
    from gpu_check import diagnose

    error = "AttributeError: module 'torch.distributed' has no attribute 'all_gather_single'"
    assert diagnose(error, torch_matches=False).startswith("maybe the torch version")
    assert diagnose(error, torch_matches=True).startswith("a defect")
    assert diagnose("AssertionError: a loss is not finite", torch_matches=False).startswith(
        "a defect")
    assert diagnose("", torch_matches=False) == ""
