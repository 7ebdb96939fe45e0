"""make reset: stops this checkout's leftover course processes, spares others, removes build/."""

import subprocess
import sys
import time

import psutil
from conftest import ROOT

SLEEPER = "import time; time.sleep(120)"


def test_reset_stops_course_processes_of_this_folder_only(tmp_path, token):
    course = tmp_path / "course"
    (course / "notebooks").mkdir(parents=True)
    (course / "build" / "runs").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # a stray torchrun agent, kernel and live-ranks engine of the course (a pool's processes
    # work in its kernel's folder); the same kinds in another folder
    stray = [subprocess.Popen([sys.executable, "-c", SLEEPER, kind, token],
                              cwd=course / "notebooks")
             for kind in ("torch.distributed.run", "ipykernel_launcher",
                          "ipyparallel.engine")]  # fmt: skip
    other = subprocess.Popen([sys.executable, "-c", SLEEPER, "ipykernel_launcher", token],
                             cwd=elsewhere)  # fmt: skip
    try:
        dry = subprocess.run([sys.executable, "-m", "coursekit.reset", "--root", str(course),
                              "--dry-run"], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert dry.returncode == 0, dry.stderr
        assert all(f"would stop {p.pid}:" in dry.stdout for p in stray)
        assert str(other.pid) not in dry.stdout
        assert all(p.poll() is None for p in stray) and (course / "build").exists()

        start = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "coursekit.reset", "--root", str(course)],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert time.monotonic() - start < 30
        for p in stray:
            assert p.wait(10) is not None
        assert other.poll() is None and psutil.pid_exists(other.pid)
        assert not (course / "build").exists()
    finally:
        for p in [*stray, other]:
            p.kill()
            p.wait()
