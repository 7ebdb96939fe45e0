"""The class server: JupyterHub seating a workshop on one machine (make class-hub).

    sudo CLASS_PASSWORD=... python -m coursekit.classhub --seats 16 [plan options] \\
        [--ip 0.0.0.0] [--port 8000] [--seats-dir /srv/ddp-class] [--cull-timeout 1800] \\
        [--ssl-cert F --ssl-key F]

The plan comes first (coursekit/classplan.py): a plan that cannot work is refused before
anything is made. Then, as root, each seat becomes a system user (``seat01``...) whose home
is its own copy of the course under ``--seats-dir`` (mode 700: no other seat can read it), with
its own ``build/``; its cores and memory are held by a cgroup where this machine lets one be
made (v1 or v2), and its server is pinned to its cores (``taskset``) with the plan's
environment (``CUDA_VISIBLE_DEVICES``, ``OMP_NUM_THREADS``) either way. JupyterHub runs with
its own parts only: LocalProcessSpawner (each server as its seat's user), the shared-password
login (``CLASS_PASSWORD``, the seats' names as the only users), configurable-http-proxy as
npm ships it (jupyter/class-hub/package.json), and jupyterhub-idle-culler as a service.
Stopping the command (Ctrl-C) stops the hub, which stops every seat's server; what a seat left
running is then stopped too, and the command says so. The seats' copies stay (the attendees'
work); ``--remove-seats`` deletes them and their users.

jupyter/class-hub/jupyterhub_config.py reads the state this command writes
(``<seats-dir>/.hub/state.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from .classplan import PlanError, add_plan_arguments, plan_from

ROOT = Path(__file__).resolve().parent.parent
HUB_DIR = ROOT / "jupyter" / "class-hub"
CONFIG = HUB_DIR / "jupyterhub_config.py"
PROXY = HUB_DIR / "node_modules" / ".bin" / "configurable-http-proxy"
# what a seat's copy holds: what its notebooks read, run and import (its own coursekit first
# on PYTHONPATH, so that its results land in its own build/)
COPIED = ("notebooks", "launchers", "coursekit", "solutions", "README.md", "pyproject.toml")
CGROUP = "ddp-class"  # the parent cgroup of the seats'
PASSWORD_ENV = "CLASS_PASSWORD"


class HubError(RuntimeError):
    """The class hub cannot start here; the message says why and the fix."""


def _cgroup_v2() -> bool:
    return Path("/sys/fs/cgroup/cgroup.controllers").exists()


def seat_cgroup(seat: dict, user: pwd.struct_passwd) -> tuple[list[Path], str]:
    """Make the seat's cgroup(s) holding its memory and cores; -> (the files its server's
    process writes its pid into, what is enforced in words). Nothing where none can be made."""
    limit = str(int(seat["memory_gib"] * 2**30))
    cpus = ",".join(map(str, seat["cpus"]))
    try:
        if _cgroup_v2():
            parent = Path("/sys/fs/cgroup") / CGROUP
            parent.mkdir(exist_ok=True)
            (parent / "cgroup.subtree_control").write_text("+memory +cpuset")
            group = parent / seat["name"]
            group.mkdir(exist_ok=True)
            (group / "memory.max").write_text(limit)
            (group / "cpuset.cpus").write_text(cpus)
            procs = [group / "cgroup.procs"]
        else:
            memory = Path("/sys/fs/cgroup/memory") / CGROUP / seat["name"]
            memory.mkdir(parents=True, exist_ok=True)
            (memory / "memory.limit_in_bytes").write_text(limit)
            cpuset = Path("/sys/fs/cgroup/cpuset") / CGROUP
            cpuset.mkdir(exist_ok=True)  # a v1 cpuset needs its parent's cpus and mems first
            for name in ("cpuset.cpus", "cpuset.mems"):
                if not (cpuset / name).read_text().strip():
                    (cpuset / name).write_text((cpuset.parent / name).read_text())
            (cpuset / seat["name"]).mkdir(exist_ok=True)
            (cpuset / seat["name"] / "cpuset.mems").write_text((cpuset / "cpuset.mems").read_text())
            (cpuset / seat["name"] / "cpuset.cpus").write_text(cpus)
            procs = [memory / "cgroup.procs", cpuset / seat["name"] / "cgroup.procs"]
    except OSError as err:
        return [], f"memory not enforced (no cgroup could be made here: {err.strerror})"
    for path in procs:  # the seat's server moves itself in: it runs as the seat's user
        os.chown(path, user.pw_uid, user.pw_gid)
    return procs, f"memory at most {seat['memory_gib']:g} GiB and cores {cpus} (cgroup)"


def remove_cgroups() -> None:
    """The seats' cgroups, once no process is left in them."""
    parents = ([Path("/sys/fs/cgroup") / CGROUP] if _cgroup_v2() else
               [Path("/sys/fs/cgroup") / c / CGROUP for c in ("memory", "cpuset")])  # fmt: skip
    for parent in parents:
        for group in sorted(parent.glob("seat*")) if parent.exists() else []:
            group.rmdir()
        if parent.exists():
            parent.rmdir()


def seat_user(name: str, home: Path) -> pwd.struct_passwd:
    """The seat's system user, made once (its home: its copy of the course)."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--system", "--user-group", "--no-create-home",
                        "--home-dir", str(home), "--shell", "/bin/bash", name],
                       check=True)  # fmt: skip
        return pwd.getpwnam(name)


def seat_copy(home: Path, user: pwd.struct_passwd) -> None:
    """The seat's own copy of the course, made once and kept (the attendee's edits), readable
    by its user alone."""
    if not (home / "notebooks").exists():
        home.mkdir(parents=True, exist_ok=True)
        for name in COPIED:
            source = ROOT / name
            if source.is_dir():
                shutil.copytree(source, home / name, dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
            elif source.exists():
                shutil.copy2(source, home / name)
    for folder, _, files in os.walk(home):
        os.chown(folder, user.pw_uid, user.pw_gid)
        for f in files:
            os.lchown(os.path.join(folder, f), user.pw_uid, user.pw_gid)
    home.chmod(0o700)


def check_python(seat: dict, user: pwd.struct_passwd) -> None:
    """The seat's user can run the course's Python and import its own copy of coursekit."""
    def as_seat():
        os.setgid(user.pw_gid)
        os.setuid(user.pw_uid)

    try:
        proc = subprocess.run(
            [sys.executable, "-c", "import coursekit; print(coursekit.__file__)"],
            cwd=seat["home"], env={"PYTHONPATH": seat["home"], "HOME": seat["home"]},
            preexec_fn=as_seat, capture_output=True, text=True)  # fmt: skip
        said = (proc.stderr or proc.stdout).strip()[-300:]
        ok = proc.returncode == 0 and proc.stdout.startswith(seat["home"])
    except OSError as err:  # the interpreter itself is out of its reach
        ok, said = False, str(err)
    if not ok:
        raise HubError(f"{seat['name']} cannot run the course's Python {sys.executable} "
                       f"({said}): every seat's user must "
                       "be able to run it; install the course where all users can (a Python "
                       "outside /root, e.g. /usr/bin/python3, and the course under /opt or /srv), "
                       "or let them traverse the folders above it (chmod o+x)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def seat_processes(names: list[str]) -> list:
    """Live processes of the seats' users."""
    import psutil

    uids = set()
    for name in names:
        try:
            uids.add(pwd.getpwnam(name).pw_uid)
        except KeyError:
            pass
    found = []
    for p in psutil.process_iter(["uids", "status"]):
        try:
            if p.info["uids"].real in uids and p.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.Error:
            pass
    return found


def prepare(args: argparse.Namespace) -> dict:
    """Everything before the hub starts: the plan (refused first), the seats, the state file."""
    seated = plan_from(args)  # PlanError: nothing has been made yet
    if os.geteuid() != 0:
        raise HubError("each seat is a system user of its own, which only root can make and "
                       "serve: run it as root (sudo make class-hub SEATS=...)")
    password = os.environ.get(PASSWORD_ENV, "")
    if len(password) < 8:
        raise HubError(f"{PASSWORD_ENV} must hold the workshop's password (8 characters or "
                       f"more): {PASSWORD_ENV}=... make class-hub SEATS=...")
    if not PROXY.exists():
        raise HubError(f"{PROXY.relative_to(ROOT)} is missing: make class-hub installs it "
                       f"(npm ci --prefix {HUB_DIR.relative_to(ROOT)})")
    if bool(args.ssl_cert) != bool(args.ssl_key):
        raise HubError("--ssl-cert and --ssl-key go together (or neither: behind a TLS proxy)")
    seats_dir = args.seats_dir.resolve()
    seats_dir.mkdir(parents=True, exist_ok=True)
    seats_dir.chmod(0o755)  # the seats find their own home; each home is theirs alone
    state_dir = seats_dir / ".hub"
    state_dir.mkdir(exist_ok=True)
    state_dir.chmod(0o700)
    seats = []
    for seat in seated.as_json()["seats"]:
        home = seats_dir / seat["name"]
        user = seat_user(seat["name"], home)
        if Path(user.pw_dir) != home:
            raise HubError(f"user {seat['name']} exists with home {user.pw_dir}, not {home}: "
                           f"pass --seats-dir {Path(user.pw_dir).parent} or remove the user")
        seat_copy(home, user)
        procs, held = seat_cgroup(seat, user)
        seats.append({**seat, "home": str(home), "cgroup_procs": [str(p) for p in procs],
                      "held": held})  # fmt: skip
        check_python(seats[-1], user)
    state = {
        "bind_url": f"{'https' if args.ssl_cert else 'http'}://{args.ip}:{args.port}",
        "hub_port": free_port(), "proxy_api_port": free_port(),  # internal, on 127.0.0.1
        "ssl_cert": str(args.ssl_cert or ""), "ssl_key": str(args.ssl_key or ""),
        "state_dir": str(state_dir), "python": sys.executable, "proxy": str(PROXY),
        "cull_timeout": args.cull_timeout, "check_token": secrets.token_hex(32),
        "seats": seats, "notes": seated.notes,
    }  # fmt: skip
    path = state_dir / "state.json"
    path.write_text(json.dumps(state, indent=1))
    path.chmod(0o600)
    print(seated.table())
    for seat in seats:
        print(f"{seat['name']}: {seat['home']}, {seat['held']}")
    return state


def serve(state: dict) -> int:
    """Run JupyterHub until it is stopped; then make sure no seat's process is left."""
    env = {**os.environ, "CLASS_HUB_STATE": str(Path(state["state_dir"]) / "state.json")}
    hub = subprocess.Popen([state["python"], "-m", "jupyterhub", "-f", str(CONFIG)],
                           cwd=state["state_dir"], env=env, start_new_session=True)

    def stop(signum, frame):  # Ctrl-C or a kill: the hub stops every seat's server
        if hub.poll() is None:
            hub.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"class hub: {state['bind_url']} (the seats log in with their name and the "
          f"workshop's password; Ctrl-C stops it)", flush=True)
    code = hub.wait()
    names = [s["name"] for s in state["seats"]]
    deadline = time.monotonic() + 15  # a server's kernels and runs end as it stops
    while seat_processes(names) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = seat_processes(names)
    for p in left:
        p.kill()
    if left:
        print(f"stopped {len(left)} process(es) the seats left running", flush=True)
    remove_cgroups()
    print("class hub stopped: no seat's process is left", flush=True)
    return code


def remove_seats(seats_dir: Path) -> None:
    """Delete the seats' copies and users (their processes first)."""
    homes = sorted(p for p in seats_dir.glob("seat[0-9]*") if p.is_dir())
    names = [p.name for p in homes]
    for p in seat_processes(names):
        p.kill()
    for home in homes:
        subprocess.run(["userdel", home.name], check=False, capture_output=True)
        shutil.rmtree(home)
    shutil.rmtree(seats_dir / ".hub", ignore_errors=True)
    print(f"removed {len(homes)} seat(s) from {seats_dir}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m coursekit.classhub",
                                     description=__doc__.split("\n\n")[0])
    add_plan_arguments(parser)
    parser.add_argument("--ip", default="127.0.0.1", help="where the hub listens (0.0.0.0: all)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--seats-dir", type=Path, default=Path("/srv/ddp-class"),
                        help="the seats' copies of the course, one folder each")
    parser.add_argument("--cull-timeout", type=int, default=1800,
                        help="seconds idle before a seat's server is stopped (its files stay)")
    parser.add_argument("--ssl-cert", type=Path, help="TLS certificate (or a TLS proxy in front)")
    parser.add_argument("--ssl-key", type=Path)
    parser.add_argument("--prepare-only", action="store_true",
                        help="make the seats and the state file, start nothing")
    parser.add_argument("--remove-seats", action="store_true",
                        help="delete the seats' copies and users under --seats-dir, then exit")
    if "--remove-seats" in (argv if argv is not None else sys.argv[1:]):
        args, _ = parser.parse_known_args([*(argv or sys.argv[1:]), "--seats", "1"])
        remove_seats(args.seats_dir.resolve())
        return 0
    args = parser.parse_args(argv)
    try:
        state = prepare(args)
    except (PlanError, HubError) as err:
        print(f"class hub refused: {err}", file=sys.stderr)
        return 2
    return 0 if args.prepare_only else serve(state)


if __name__ == "__main__":
    sys.exit(main())
