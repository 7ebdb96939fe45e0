"""Run a command so that nothing it starts outlives it: the parent the runner puts above torchrun.

    python -m coursekit.guard [--orphan-exit] COMMAND [ARG ...]

torchrun stops its workers when it gets SIGTERM, except in one window: while it is still
starting them, its signal handler raises before it holds their handles, it exits, and the
workers run on (orphans waiting for a rendezvous that is gone). A kernel that dies just after
pressing Run hits that window. So the runner starts torchrun under this guard, which

- is a child subreaper (Linux): orphans below it are re-parented to it, not to init, so it
  still sees them once torchrun is gone;
- on SIGTERM (the runner stopping a run, or the kernel's death through PR_SET_PDEATHSIG),
  and whenever the command ends, SIGTERMs the command, gives it a grace period, then
  SIGKILLs every process left below it;
- exits with the command's exit code (128 + N where signal N ended it, as a shell does).

``--orphan-exit``: also stop everything when the guard's own parent is gone (it is
re-parented). For processes a library starts on the kernel's behalf (the live ranks'
ipyparallel controller and engines), where no PR_SET_PDEATHSIG can be set for it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time

import psutil

PR_SET_CHILD_SUBREAPER = 36  # from linux/prctl.h
GRACE_S = 2.0  # inside the runner's own grace period, so the guard finishes its cleanup first


def stop_everything_below(command: subprocess.Popen) -> None:
    if command.poll() is None:
        command.terminate()  # torchrun stops its workers on SIGTERM
        try:
            command.wait(GRACE_S)
        except subprocess.TimeoutExpired:
            pass
    left = psutil.Process().children(recursive=True)
    for process in left:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    command.wait()  # reaped here, so that its exit status is known
    # the orphans are our children now: waiting reaps them too
    psutil.wait_procs([p for p in left if p.pid != command.pid], timeout=GRACE_S)


def main(argv: list[str]) -> int:
    orphan_exit = argv[:1] == ["--orphan-exit"]
    argv = argv[1:] if orphan_exit else argv
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1)
    # The handler only appends to a list. SIGTERM can arrive several times (seen when the
    # kernel dies) and at any point: a handler that raised would cut the cleanup short, one
    # that took a lock (threading.Event) could deadlock with the code it interrupted.
    stop_requested = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stop_requested.append(signum))
    command = subprocess.Popen(argv)
    while command.poll() is None and not stop_requested:
        if orphan_exit and os.getppid() != parent:  # whoever started us is gone
            break
        time.sleep(0.2)
    stop_everything_below(command)
    return command.returncode if command.returncode >= 0 else 128 - command.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
