"""The course image for real: its CPU flavour built with podman from the course folder
(scripts/local_image.py: no registry, a debootstrap base, a local wheelhouse), started as
docker/compose.yaml starts it (podman-compose), notebook 00 run inside with `make verify`,
and stopped with no container, volume or process left behind. Skipped only where podman
cannot run (the reason is in the skip)."""

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from conftest import COURSE_IMAGE_BUILT, ROOT

pytestmark = pytest.mark.slow

COMPOSE = ROOT / "docker" / "compose.yaml"
IMAGE_SCRIPT = ROOT / "scripts" / "local_image.py"
COURSE_UID = 1000  # the Dockerfile's `course` user


def podman_env() -> dict[str, str]:
    sys.path.insert(0, str(IMAGE_SCRIPT.parent))
    import local_image

    return local_image.podman_env()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_status(url: str) -> int | None:
    """The HTTP status, or None while nothing answers on the port."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except (urllib.error.URLError, ConnectionError):
        return None


@dataclass
class Course:
    project: str
    env: dict
    token: str
    lab_port: int
    board_port: int

    def compose(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(["podman-compose", "-p", self.project, "-f", str(COMPOSE), *args],
                              env=self.env, capture_output=True, text=True, timeout=timeout)

    def podman(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(["podman", *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout)

    def containers(self) -> dict[str, str]:
        """service name -> container id, of every container of this project, running or not."""
        listed = self.podman("ps", "--all", "--format", "json", "--filter",
                             f"label=com.docker.compose.project={self.project}")
        return {c["Labels"]["com.docker.compose.service"]: c["Id"]
                for c in json.loads(listed.stdout or "[]")}

    def exec_lab(self, *cmd: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return self.podman("exec", self.containers()["lab"], *cmd, timeout=timeout)

    def volume(self) -> str:
        return f"{self.project}_course-build"


@pytest.fixture(scope="module")
def image(request):
    start = time.monotonic()
    built = subprocess.run([sys.executable, str(IMAGE_SCRIPT), "build"], capture_output=True,
                           text=True, timeout=2700)
    if built.returncode == 2:  # the script's code for "podman cannot run here"
        print(f"\nSKIPPED the container tests: {built.stderr.strip()}")
        pytest.skip(built.stderr.strip())
    assert built.returncode == 0, built.stdout + built.stderr
    request.config.stash[COURSE_IMAGE_BUILT] = (
        f"ready in {time.monotonic() - start:.0f} s; {built.stdout.strip().splitlines()[-1]}")
    return podman_env()


@pytest.fixture(scope="module")
def course(image):
    course = Course(f"ddp-course-test-{os.getpid()}", {}, secrets.token_hex(16), free_port(),
                    free_port())
    course.env = {**image, "JUPYTER_TOKEN": course.token,
                  "JUPYTER_HOST_PORT": str(course.lab_port),
                  "TENSORBOARD_HOST_PORT": str(course.board_port)}
    up = course.compose("up", "-d")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        status = f"http://127.0.0.1:{course.lab_port}/api/status?token={course.token}"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and http_status(status) != 200:
            time.sleep(1)
        yield course
    finally:
        course.compose("down", "-v")


def test_jupyterlab_answers_on_loopback_with_the_token_only(course):
    base = f"http://127.0.0.1:{course.lab_port}"
    assert http_status(f"{base}/api/status?token={course.token}") == 200
    assert http_status(f"{base}/api/status") == 403
    assert http_status(f"{base}/api/status?token=not-{course.token}") == 403
    # published on 127.0.0.1 only: this machine's other addresses refuse the port
    lab = course.containers()["lab"]
    assert course.podman("port", lab).stdout.split() == ["8888/tcp", "->",
                                                         f"127.0.0.1:{course.lab_port}"]
    others = [a.address for addrs in psutil.net_if_addrs().values() for a in addrs
              if a.family == socket.AF_INET and not a.address.startswith("127.")]
    assert others, "the compose network's bridge at least has an address of its own"
    for address in others:
        with socket.socket() as s, pytest.raises(OSError):
            s.settimeout(3)
            s.connect((address, course.lab_port))


def test_tensorboard_reads_the_build_volume(course):
    url = f"http://127.0.0.1:{course.board_port}/data/logdir"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and http_status(url) != 200:
        time.sleep(1)
    with urllib.request.urlopen(url, timeout=10) as response:
        assert json.load(response)["logdir"] == "/home/course/course/build"


def test_the_course_runs_as_uid_1000_not_root(course):
    assert course.exec_lab("id", "-u").stdout.strip() == str(COURSE_UID)
    # no user namespace: the host sees JupyterLab's own process under the same uid
    lab = [p for p in psutil.process_iter(["cmdline", "uids"])
           if "jupyter-lab" in " ".join(p.info["cmdline"] or [])
           and "--port=8888" in p.info["cmdline"]]
    assert lab and all(p.info["uids"].real == COURSE_UID for p in lab)


def test_the_build_volume_belongs_to_the_course_user(course):
    owner = course.exec_lab("stat", "-c", "%u", "build").stdout.strip()
    assert owner == str(COURSE_UID)
    wrote = course.exec_lab("sh", "-c", "echo ok > build/written-by-the-course && cat "
                            "build/written-by-the-course")
    assert wrote.returncode == 0 and wrote.stdout.strip() == "ok", wrote.stderr


def test_torch_compile_builds_its_cpu_kernel_inside(course):
    """inductor compiles C++ for CPU tensors: the image's g++ and Python headers suffice"""
    compiled = course.exec_lab("python", "-c", "import torch; f = torch.compile(lambda x: "
                               "torch.sin(x) * 2 + 1); x = torch.arange(4.0); "
                               "print((f(x) - (torch.sin(x) * 2 + 1)).abs().max().item())",
                               timeout=300)
    assert compiled.returncode == 0, compiled.stderr[-3000:]
    assert float(compiled.stdout.split()[-1]) == 0.0


def test_notebook_00_is_ready_inside_and_its_results_land_in_the_volume(course):
    verify = course.exec_lab("make", "verify", "ONLY=00", timeout=600)
    assert verify.returncode == 0, verify.stdout[-3000:] + verify.stderr[-2000:]
    mountpoint = course.podman("volume", "inspect", course.volume(), "--format",
                               "{{.Mountpoint}}").stdout.strip()
    volume = Path(mountpoint)
    report = json.loads((volume / "verify.json").read_text())
    assert [n["status"] for n in report["notebooks"]] == ["passed"], report
    results = json.loads((volume / "results" / "00_environment_check.json").read_text())
    assert results["verdict"].startswith("READY"), results["verdict"]
    assert results["tier"] == "cpu" and results["allreduce_ok"] is True
    assert (volume / "written-by-the-course").read_text().strip() == "ok"


def test_down_leaves_no_container_volume_or_process(course):
    ids = list(course.containers().values())
    assert len(ids) == 2, "the lab and tensorboard containers ran"
    down = course.compose("down", "-v")
    assert down.returncode == 0, down.stdout + down.stderr
    assert course.containers() == {}
    assert course.podman("volume", "exists", course.volume()).returncode == 1

    def leftovers():
        """conmon names its container's id; the course's own processes run from its folder"""
        found = []
        for p in psutil.process_iter(["cmdline", "status"]):
            cmdline = " ".join(p.info["cmdline"] or [])
            if p.info["status"] != psutil.STATUS_ZOMBIE and (
                    any(i in cmdline for i in ids) or "/home/course/course" in cmdline):
                found.append(cmdline)
        return found

    deadline = time.monotonic() + 30
    while leftovers() and time.monotonic() < deadline:
        time.sleep(1)
    assert not leftovers()
