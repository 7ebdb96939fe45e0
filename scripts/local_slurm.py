#!/usr/bin/env python3
"""A real Slurm on this one machine: two logical nodes, for the course's sbatch scripts.

    python scripts/local_slurm.py start    # install (apt, as root) if missing, then start
    python scripts/local_slurm.py status
    python scripts/local_slurm.py stop     # drain, cancel jobs, stop the daemons by PID

Debian's slurmctld, slurmd, slurm-client and munge. One slurmctld and two slurmd
(``slurmd -N node1``, ``slurmd -N node2``), both nodes on 127.0.0.1 with ports of their
own, ``proctrack/linuxproc`` and ``task/none`` (no cgroups, no systemd needed). Its own
munged with its own key and socket, so a system munge is never touched. Everything
(config, state, logs, the PIDs of the daemons it started) lives in one folder,
``COURSE_SLURM_DIR`` (default ``build/slurm``). ``start`` is idempotent: a cluster that
is already up and answering is left as it is. ``stop`` only ever signals the PIDs it
recorded.

Exit codes: 0 ok, 2 Slurm cannot be installed here (the reason is printed), 1 any other
failure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ["slurmctld", "slurmd", "slurm-client", "munge"]
BINARIES = ["slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "munged", "mungekey"]
NODES = ["node1", "node2"]
CTLD_PORT, NODE_PORTS = 16817, {"node1": 16818, "node2": 16819}
CPUS_PER_NODE = 2


class Unavailable(RuntimeError):
    """Slurm is not installed and cannot be installed here."""


def state_dir() -> Path:
    return Path(os.environ.get("COURSE_SLURM_DIR", ROOT / "build" / "slurm")).resolve()


def _which(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin")


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if _which(b) is None]


def install() -> None:
    """apt-get the Debian packages when a binary is missing; Unavailable if that cannot work."""
    if not missing_binaries():
        return
    if os.geteuid() != 0:
        raise Unavailable(f"Slurm is not installed ({', '.join(missing_binaries())} missing) "
                          "and installing it needs root (apt-get)")
    if _which("apt-get") is None:
        raise Unavailable("Slurm is not installed and there is no apt-get to install it with")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    print(f"installing {' '.join(PACKAGES)} with apt-get ...", flush=True)
    for cmd in (["apt-get", "update", "-qq"],
                ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES]):
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            raise Unavailable(f"`{' '.join(cmd)}` failed (exit {proc.returncode}): "
                              + (proc.stderr or proc.stdout).strip()[-800:])
    if missing_binaries():
        raise Unavailable(f"apt-get ran but {', '.join(missing_binaries())} are still missing")


def write_config(d: Path) -> Path:
    host = socket.gethostname()
    user = os.environ.get("USER") or subprocess.run(
        ["id", "-un"], capture_output=True, text=True).stdout.strip()
    for sub in ("state", "log", "munge", *(f"spool/{n}" for n in NODES)):
        (d / sub).mkdir(parents=True, exist_ok=True)
    nodes = "\n".join(
        f"NodeName={n} NodeHostname={host} NodeAddr=127.0.0.1 Port={NODE_PORTS[n]} "
        f"CPUs={CPUS_PER_NODE} State=UNKNOWN" for n in NODES)
    conf = f"""\
# written by scripts/local_slurm.py: a single-host cluster with two logical nodes
ClusterName=course
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={CTLD_PORT}
SlurmUser={user}
SlurmdUser={user}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={d}/munge/munge.socket
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
MinJobAge=3600
SlurmdTimeout=60
InactiveLimit=0
MailProg=/bin/true
KillWait=5
{nodes}
PartitionName=course Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""
    path = d / "slurm.conf"
    path.write_text(conf)
    (d / "cgroup.conf").unlink(missing_ok=True)  # no cgroups: proctrack/linuxproc
    return path


def slurm_env(d: Path | None = None) -> dict[str, str]:
    """The environment the Slurm commands need to find this cluster."""
    d = d or state_dir()
    return {**os.environ, "SLURM_CONF": str(d / "slurm.conf")}


def _pids(d: Path) -> dict[str, int]:
    path = d / "pids.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _answers(d: Path) -> bool:
    proc = subprocess.run([_which("sinfo") or "sinfo", "-h", "-N", "-o", "%N %t"], env=slurm_env(d),
                          capture_output=True, text=True, timeout=30)
    states = dict(line.split()[:2] for line in proc.stdout.splitlines() if line.strip())
    if any(states.get(n, "").startswith("drain") for n in NODES):  # left drained by `stop`
        subprocess.run([_which("scontrol"), "update", f"NodeName={','.join(NODES)}",
                        "State=RESUME"], env=slurm_env(d), capture_output=True, timeout=30)
    return proc.returncode == 0 and all(
        states.get(n, "").rstrip("*") in {"idle", "mix", "alloc"} for n in NODES)


def running(d: Path | None = None) -> bool:
    d = d or state_dir()
    pids = _pids(d)
    return bool(pids) and all(_alive(p) for p in pids.values())


def _spawn(cmd: list[str], d: Path, name: str) -> int:
    log = open(d / "log" / f"{name}.stdout", "ab")  # noqa: SIM115 - the daemon keeps it
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                            env=slurm_env(d), start_new_session=True)
    log.close()
    return proc.pid


def start(d: Path | None = None, wait_s: float = 60) -> None:
    d = d or state_dir()
    install()
    if running(d) and _answers(d):
        print(f"local Slurm already running (config {d / 'slurm.conf'})")
        return
    stop(d, quiet=True)  # a half-started cluster: clear it first
    write_config(d)
    key = d / "munge" / "munge.key"
    if not key.exists():
        subprocess.run([_which("mungekey"), "--create", f"--keyfile={key}"], check=True)
        key.chmod(0o600)
    pids: dict[str, int] = {}

    def record() -> None:
        (d / "pids.json").write_text(json.dumps(pids))

    pids["munged"] = _spawn([_which("munged"), "--foreground", "--force",
                             f"--socket={d}/munge/munge.socket", f"--key-file={key}",
                             f"--pid-file={d}/munge/munged.pid", f"--log-file={d}/log/munged.log",
                             f"--seed-file={d}/munge/munged.seed"], d, "munged")
    record()
    _wait_for(lambda: (d / "munge" / "munge.socket").exists(), 15, "munged's socket", d)
    pids["slurmctld"] = _spawn([_which("slurmctld"), "-D", "-c", "-i", "-f", str(d / "slurm.conf")],
                               d, "slurmctld")
    record()
    for n in NODES:
        pids[f"slurmd-{n}"] = _spawn([_which("slurmd"), "-D", "-N", n, "-f",
                                      str(d / "slurm.conf")], d, f"slurmd-{n}")
        record()
    try:
        _wait_for(lambda: _answers(d), wait_s, "both nodes idle in sinfo", d, pids)
    except RuntimeError:
        stop(d, quiet=True)
        raise
    print(f"local Slurm up: nodes {', '.join(NODES)}; export SLURM_CONF={d / 'slurm.conf'}")


def _wait_for(ready, seconds: float, what: str, d: Path, pids: dict | None = None) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ready():
            return
        dead = [name for name, pid in (pids or {}).items() if not _alive(pid)]
        if dead:
            break
        time.sleep(0.5)
    logs = "\n".join(f"--- {p.name}\n{p.read_text()[-1500:]}"
                     for p in sorted((d / "log").glob("*")) if p.stat().st_size)
    raise RuntimeError(f"local Slurm did not come up (waited for {what}).\n{logs}")


def stop(d: Path | None = None, quiet: bool = False, drain_s: float = 30) -> None:
    """Drain the nodes, cancel what is left, then stop each recorded daemon by its PID."""
    d = d or state_dir()
    pids = _pids(d)
    if not pids:
        if not quiet:
            print("local Slurm is not running (no recorded PIDs)")
        return
    if pids.get("slurmctld") and _alive(pids["slurmctld"]):
        env = slurm_env(d)
        run = lambda *cmd: subprocess.run(cmd, env=env, capture_output=True, text=True,  # noqa: E731
                                          timeout=30)
        run("scontrol", "update", f"NodeName={','.join(NODES)}", "State=DRAIN",
            "Reason=local_slurm stop")
        deadline = time.monotonic() + drain_s
        while time.monotonic() < deadline:
            jobs = run("squeue", "-h", "-o", "%i").stdout.split()
            if not jobs:
                break
            run("scancel", *jobs)
            time.sleep(0.5)
    order = [n for n in (*(f"slurmd-{n}" for n in NODES), "slurmctld", "munged") if n in pids]
    for name in order:
        pid = pids[name]
        if _alive(pid):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
        _reap(pid)
    (d / "pids.json").unlink()
    if not quiet:
        print("local Slurm stopped: " + ", ".join(f"{n} (pid {pids[n]})" for n in order))


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["start", "stop", "status"])
    args = parser.parse_args(argv)
    d = state_dir()
    try:
        if args.action == "start":
            start(d)
        elif args.action == "stop":
            stop(d)
        else:
            up = running(d) and _answers(d)
            print(f"local Slurm {'running' if up else 'not running'} ({d})")
            return 0 if up else 3
    except Unavailable as e:
        print(f"Slurm unavailable: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        print(str(e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
