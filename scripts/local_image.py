#!/usr/bin/env python3
"""The course image's CPU flavour, built with podman on this machine, with no registry.

    python scripts/local_image.py build    # install podman when missing, then build
    python scripts/local_image.py env      # the environment podman needs here (CONTAINERS_CONF)

For a machine that reaches Debian's packages and a Python package index but no container
registry (a class server behind a firewall, the course's CI): the base image is made from
Debian's packages with debootstrap (bookworm, Python 3.11) and imported into podman, pip
installs from a local wheelhouse that pip downloads here for that Python, and
``docker/Dockerfile`` is built with ``FLAVOUR=cpu`` on that base, tagged as
``docker/compose.yaml`` names it. Start it as the compose file does:
``podman-compose -p ddp-course -f docker/compose.yaml up -d``.

As root it installs Debian's ``podman``, ``podman-compose`` and ``debootstrap`` when missing.
It mends two things some hosts need before podman's runtime (crun) starts anything: the
cgroup v2 controllers of a hybrid cgroup layout are mounted in v1 (crun refuses hybrid
mode while v2 holds any), and containers get the limits this machine allows, not podman's
defaults (nofile 1048576, nproc above ``kernel.pid_max``), which a root without
CAP_SYS_RESOURCE may not set. What it writes lives in ``COURSE_IMAGE_DIR`` (default
``build/image``), except the wheelhouse, kept per machine (:func:`wheelhouse_dir`) as podman
keeps the base image and the built layers, so that a second build, from any checkout,
reuses them.

Exit codes: 0 ok, 2 podman cannot run here (the reason is printed), 1 any other failure.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ["podman", "podman-compose", "debootstrap"]
IMAGE_LABEL = "org.opencontainers.image.title=ddp-course"  # docker/Dockerfile's LABEL
# what python:3.11-slim-bookworm (the CPU flavour's usual base) has: Python with its venv
# module and its headers (inductor's C++ includes Python.h), and the CA certificates
BASE_PACKAGES = ["python3", "python3-venv", "python3-dev", "ca-certificates"]
BASE_REPOSITORY = "localhost/ddp-course-base"
BASE_IMAGE = (f"{BASE_REPOSITORY}:bookworm-"
              f"{hashlib.sha256(' '.join(BASE_PACKAGES).encode()).hexdigest()[:8]}")
DEBIAN_MIRROR = os.environ.get("DEBIAN_MIRROR", "http://deb.debian.org/debian")
CGROUP = Path("/sys/fs/cgroup")


class Unavailable(RuntimeError):
    """podman is not installed and cannot be installed, or cannot start a container here."""


def state_dir() -> Path:
    return Path(os.environ.get("COURSE_IMAGE_DIR", ROOT / "build" / "image")).resolve()


def wheelhouse_dir() -> Path:
    """Where the wheelhouse is kept: beside podman's own cache of layers, per machine, not per
    checkout (a fresh clone need not download it again). ``COURSE_WHEELHOUSE_DIR`` moves it."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ddp-course"
    return Path(os.environ.get("COURSE_WHEELHOUSE_DIR", cache)).resolve()


def image_tag() -> str:
    """The CPU flavour's name in docker/compose.yaml: what the build tags."""
    import yaml

    compose = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
    return compose["services"]["lab"]["image"]


def podman_env(d: Path | None = None) -> dict[str, str]:
    """The environment every podman (and podman-compose) command of the course runs with."""
    return {**os.environ, "CONTAINERS_CONF": str((d or state_dir()) / "containers.conf")}


def run(cmd: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)


def podman(d: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return run(["podman", *args], timeout, env=podman_env(d))


def install() -> None:
    missing = [p for p in PACKAGES if not shutil.which(p, path="/usr/sbin:/usr/bin:/sbin:/bin")]
    if not missing:
        return
    if platform.system() != "Linux":
        raise Unavailable(f"podman runs containers on Linux; this is {platform.system()}")
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise Unavailable(f"{', '.join(missing)} missing, and installing them needs root and "
                          f"apt-get: sudo apt-get install {' '.join(PACKAGES)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    print(f"installing {' '.join(missing)} with apt-get ...", flush=True)
    for cmd in (["apt-get", "update", "-qq"],
                ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing]):
        proc = run(cmd, timeout=900, env=env)
        if proc.returncode != 0:
            raise Unavailable(f"`{' '.join(cmd)}` failed (exit {proc.returncode}): "
                              + (proc.stderr or proc.stdout).strip()[-800:])


def mount_v2_controllers_in_v1() -> None:
    """In a hybrid layout (v1 controllers under /sys/fs/cgroup, cgroup2 at unified/) crun
    refuses to start while cgroup2 holds a controller; a controller that no v2 group uses
    moves to a v1 hierarchy of its own when one is mounted."""
    unified = CGROUP / "unified" / "cgroup.controllers"
    if not unified.exists() or os.geteuid() != 0:
        return
    for name in unified.read_text().split():
        target = CGROUP / name
        print(f"cgroup: mounting the {name} controller in cgroup v1 ({target}) for crun")
        target.mkdir(exist_ok=True)
        proc = run(["mount", "-t", "cgroup", "-o", name, "cgroup", str(target)], timeout=30)
        if proc.returncode != 0:
            raise Unavailable(f"crun needs cgroup v2 free of controllers, and mounting {name} "
                              f"in v1 failed: {proc.stderr.strip()}")


def write_containers_conf(d: Path) -> Path:
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    if nproc == resource.RLIM_INFINITY or nproc > pid_max:
        nproc = pid_max
    path = d / "containers.conf"
    path.write_text(f"""\
# written by scripts/local_image.py: containers get this machine's own limits
[containers]
default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]
""")
    return path


def check_engine(d: Path) -> None:
    """A container from the base image starts and exits; else podman cannot run here."""
    proc = podman(d, "run", "--rm", "--network", "none", BASE_IMAGE, "true")
    if proc.returncode != 0:
        raise Unavailable(f"podman cannot start a container here: {proc.stderr.strip()[-600:]}")


def make_base(d: Path) -> None:
    if podman(d, "image", "exists", BASE_IMAGE).returncode == 0:
        print(f"base image {BASE_IMAGE}: already built")
        return
    print(f"base image {BASE_IMAGE}: debootstrap bookworm from {DEBIAN_MIRROR} ...", flush=True)
    with tempfile.TemporaryDirectory(dir=d) as rootfs:
        proc = run(["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
                    "bookworm", rootfs, DEBIAN_MIRROR], timeout=1200)
        if proc.returncode != 0:
            raise RuntimeError(f"debootstrap failed: {(proc.stderr or proc.stdout)[-800:]}")
        for deb in Path(rootfs, "var/cache/apt/archives").glob("*.deb"):
            deb.unlink()
        tar = subprocess.Popen(["tar", "-C", rootfs, "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(["podman", "import", "--change", 'CMD ["/bin/bash"]', "-",
                                   BASE_IMAGE], stdin=tar.stdout, capture_output=True,
                                  text=True, env=podman_env(d), timeout=600)
        tar.wait()
        if imported.returncode != 0 or tar.returncode != 0:
            raise RuntimeError(f"podman import failed: {imported.stderr[-800:]}")


def base_python(d: Path) -> str:
    proc = podman(d, "run", "--rm", "--network", "none", BASE_IMAGE, "python3", "-c",
                  "import platform; print(platform.python_version())")
    if proc.returncode != 0:
        raise RuntimeError(f"no python3 in {BASE_IMAGE}: {proc.stderr[-400:]}")
    return proc.stdout.strip()


def make_wheelhouse(d: Path, python_version: str) -> Path:
    """Every wheel the image installs, resolved for the base image's Python (Debian's 3.11.2:
    some releases need a newer 3.11), downloaded into ``d`` once per requirements and Python."""
    d.mkdir(parents=True, exist_ok=True)
    wanted = [ROOT / "requirements.txt", ROOT / "pyproject.toml"]
    key = hashlib.sha256(python_version.encode() + b"".join(p.read_bytes() for p in wanted))
    wheels = d / f"wheels-{key.hexdigest()[:12]}"
    if (wheels / ".complete").exists():
        print(f"wheelhouse {wheels.name}: already downloaded")
        return wheels
    print(f"wheelhouse {wheels.name}: pip download for Python {python_version} ...", flush=True)
    for old in d.glob("wheels-*"):
        shutil.rmtree(old)
    # setuptools: the build backend of `pip install -e .` (pyproject.toml's build-system)
    proc = run([sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:",
                "--python-version", python_version, "--dest", str(wheels),
                "-r", str(ROOT / "requirements.txt"), "setuptools>=68"], timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"pip download failed: {proc.stderr[-1200:]}")
    (wheels / ".complete").touch()
    return wheels


def remove_old_images(d: Path) -> None:
    """The previous build of the tag (now untagged) and bases made from another package
    list: their layers that this build does not share would fill the disk run after run."""
    podman(d, "image", "prune", "--force", "--filter", f"label={IMAGE_LABEL}", timeout=300)
    listed = podman(d, "images", "--format", "{{.Repository}}:{{.Tag}}", "--filter",
                    f"reference={BASE_REPOSITORY}").stdout.split()
    for old in set(listed) - {BASE_IMAGE}:
        podman(d, "rmi", old)


def build(d: Path) -> dict[str, float]:
    seconds: dict[str, float] = {}

    def timed(name, fn, *args):
        start = time.monotonic()
        value = fn(*args)
        seconds[name] = round(time.monotonic() - start, 1)
        return value

    timed("install", install)
    timed("cgroups", mount_v2_controllers_in_v1)
    write_containers_conf(d)
    timed("base image", make_base, d)
    timed("engine check", check_engine, d)
    wheels = timed("wheelhouse", make_wheelhouse, wheelhouse_dir(), base_python(d))
    tag = image_tag()
    print(f"podman build {tag} (FLAVOUR=cpu) ...", flush=True)
    # the wheelhouse is mounted into the build's RUN steps, not copied into a layer;
    # host networking: apt-get reaches the Debian mirror as this machine does
    cmd = ["podman", "build", "--network", "host", "--volume", f"{wheels}:/wheels:ro",
           "--build-arg", "FLAVOUR=cpu", "--build-arg", f"CPU_BASE={BASE_IMAGE}",
           "--build-arg", "WHEELS=/wheels", "-f", str(ROOT / "docker" / "Dockerfile"),
           "-t", tag, str(ROOT)]
    start = time.monotonic()
    with open(d / "build.log", "w") as log:
        proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=podman_env(d),
                              timeout=2400)
    seconds["podman build"] = round(time.monotonic() - start, 1)
    if proc.returncode != 0:
        raise RuntimeError(f"podman build failed (exit {proc.returncode}); its log: "
                           f"{d / 'build.log'}:\n{(d / 'build.log').read_text()[-2000:]}")
    remove_old_images(d)
    (d / "timings.json").write_text(json.dumps({"image": tag, "seconds": seconds}, indent=1))
    print(f"built {tag}; seconds: {json.dumps(seconds)}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["build", "env"])
    args = parser.parse_args(argv)
    d = state_dir()
    d.mkdir(parents=True, exist_ok=True)
    if args.action == "env":
        print(f"export CONTAINERS_CONF={write_containers_conf(d)}")
        return 0
    try:
        build(d)
    except Unavailable as why:
        print(f"podman cannot run here: {why}", file=sys.stderr)
        return 2
    except (RuntimeError, subprocess.TimeoutExpired) as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
