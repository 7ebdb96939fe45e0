"""What the browser tests need: Debian's Chromium (installed here when missing), Playwright
driving it by its path (no browser download), a JupyterLab from the course environment on a
free local port with a token, and a folder for screenshots.

CI runs the tests as root on a fresh Debian machine: a missing Chromium is installed with
apt-get. The tests are skipped, with the reason printed, only where that cannot work.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
# JupyterLab's default overrides for the course (jupyterlab_server/settings_utils.py reads
# <app dir>/settings/overrides.json; the app dir is <sys.prefix>/share/jupyter/lab)
LAB_OVERRIDES = Path(sys.prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
ARTIFACTS = ROOT / "build" / "test-artifacts"
# as this machine needs them: without the networking flags Chromium keeps dialling out
# through a closed network; --headless comes from Playwright
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync"]  # fmt: skip


def _skip(reason: str):
    print(f"\nBROWSER TESTS SKIPPED: {reason}", file=sys.stderr)
    pytest.skip(reason)


def ensure_chromium() -> Path:
    """Debian's chromium, installed with apt-get when missing (CI runs as root)."""
    if CHROMIUM.exists():
        return CHROMIUM
    apt = shutil.which("apt-get")
    if apt is None:
        _skip(f"{CHROMIUM} is missing and this machine has no apt-get to install Debian's chromium")
    if os.geteuid() != 0:
        _skip(f"{CHROMIUM} is missing and installing it needs root: sudo apt-get install chromium")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    lock = ["-o", "DPkg::Lock::Timeout=300"]  # another apt-get may be running: wait for it
    print("\ninstalling Debian's chromium with apt-get (once per machine)", file=sys.stderr)
    for cmd in ([apt, *lock, "update", "-q"], [apt, *lock, "install", "-y", "-q", "chromium"]):
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        if proc.returncode != 0:
            _skip(f"`{' '.join(cmd)}` failed, so Chromium cannot be installed here:\n"
                  + (proc.stdout + proc.stderr)[-2000:])  # fmt: skip
    if not CHROMIUM.exists():
        _skip(f"apt-get installed chromium, yet {CHROMIUM} does not exist")
    return CHROMIUM


def sync_playwright():
    """Playwright for Python (requirements-dev.txt); installed here if the venv lacks it."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pin = next(line.strip() for line in (ROOT / "requirements-dev.txt").read_text().splitlines()
                   if line.startswith("playwright=="))  # fmt: skip
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", pin], check=True)
        from playwright.sync_api import sync_playwright
    return sync_playwright


def launch_browser(playwright):
    return playwright.chromium.launch(
        executable_path=str(ensure_chromium()), headless=True, args=CHROMIUM_FLAGS
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    """A JupyterLab server of the course environment, serving ``root`` on 127.0.0.1."""

    def __init__(self, root: Path, scratch: Path, env: dict | None = None):
        """``env``: more environment for the server and its kernels."""
        self.root, self.token, self.port = root, uuid.uuid4().hex, free_port()
        self.runtime_dir = scratch / "runtime"
        dirs = {  # nothing from the user's own Jupyter folders, nothing left in them
            "JUPYTER_RUNTIME_DIR": self.runtime_dir,
            "JUPYTER_CONFIG_DIR": scratch / "config",
            "JUPYTER_DATA_DIR": scratch / "data",  # no user kernel may shadow .venv's python3
            "JUPYTERLAB_SETTINGS_DIR": scratch / "lab-settings",
            "JUPYTERLAB_WORKSPACES_DIR": scratch / "lab-workspaces",
        }
        for folder in dirs.values():
            folder.mkdir(parents=True, exist_ok=True)
        # no "Jupyter news?" question: the course's overrides, as `make setup` installs them
        if not LAB_OVERRIDES.exists():
            pytest.fail(f"{LAB_OVERRIDES} is missing: `make setup` installs it from "
                        "jupyter/overrides.json (or: install -D jupyter/overrides.json "
                        f"{LAB_OVERRIDES})")  # fmt: skip
        env = {**os.environ, **{k: str(v) for k, v in dirs.items()},
               # the kernels import this checkout's coursekit, as `make lab` does
               "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               **(env or {})}  # fmt: skip
        env.pop("COURSEKIT_HEADLESS", None)  # a front end is attached: widgets are drawn
        self.env = env  # what its kernels inherit
        self.log = (scratch / "jupyterlab.log").open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1",
             f"--port={self.port}", "--port-retries=0", f"--IdentityProvider.token={self.token}",
             f"--ServerApp.root_dir={root}", "--LabApp.extension_manager=readonly",
             "--allow-root"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, env=env,
            start_new_session=True,
        )  # fmt: skip
        self._wait_ready(timeout=90)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        """``path`` opened alone, in a fresh workspace (no tabs restored from an earlier page)."""
        workspace = f"w{uuid.uuid4().hex[:8]}"
        return f"{self.base}/lab/workspaces/{workspace}/tree/{path}?reset&token={self.token}"

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited ({self.proc.returncode}): {self.log.name}")
            try:
                with urllib.request.urlopen(f"{self.base}/api/status?token={self.token}",
                                            timeout=2):  # fmt: skip
                    return
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"JupyterLab did not answer in {timeout:g} s: see {self.log.name}")

    def api(self, path: str, method: str = "GET"):
        request = urllib.request.Request(f"{self.base}/api/{path}?token={self.token}",
                                         method=method)  # fmt: skip
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
        return json.loads(body) if body else None

    def shutdown_kernels(self) -> None:
        """Shut down every kernel of this server (each one stops the runs it started)."""
        for kernel in self.api("kernels"):
            self.api(f"kernels/{kernel['id']}", method="DELETE")

    def kernel_processes(self) -> list:
        import psutil

        return [p for p in psutil.process_iter(["cmdline"])
                if str(self.runtime_dir) in " ".join(p.info["cmdline"] or [])]  # fmt: skip

    def course_processes(self) -> list:
        """Live processes of the served course other than the server and its kernels: the
        runs the notebooks started (torchrun, its workers, a TensorBoard)."""
        ours = {self.proc.pid} | {p.pid for p in self.kernel_processes()}
        return [p for p in processes_in(self.root) if p.pid not in ours]

    def stop(self) -> None:
        """Shut the kernels down (they stop their runs), then the server; kill what is left."""
        try:
            if self.proc.poll() is None:
                self.shutdown_kernels()
                self.proc.terminate()  # the server shuts down whatever kernel is still up
                self.proc.wait(30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # anything of the group still around
            except ProcessLookupError:
                pass
            self.log.close()


def artifacts_dir(name: str) -> Path:
    folder = ARTIFACTS / name
    folder.mkdir(parents=True, exist_ok=True)
    print(f"\nscreenshots in {folder}", file=sys.stderr)
    return folder


def processes_in(folder: Path) -> list:
    """Live processes working in ``folder`` or naming it on their command line."""
    import psutil

    found = []
    for p in psutil.process_iter(["cmdline", "cwd", "status"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if str(folder) in " ".join(p.info["cmdline"] or []) + " " + (p.info["cwd"] or ""):
                found.append(p)
        except psutil.Error:
            pass
    return found
