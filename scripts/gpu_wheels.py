#!/usr/bin/env python3
"""The course's Python packages that the GPU machine lacks, as wheels for its Python.

    python scripts/gpu_wheels.py                      # or: make gpu-wheels  (-> build/gpu-wheels)
    python scripts/gpu_wheels.py --python 3.11 --out build/gpu-wheels-py311   # this machine's

The GPU machine the course is checked on has its own Python (3.12) with torch, matplotlib,
tensorboard, psutil, tqdm, pyyaml and pytest (MACHINE_HAS), no package index, and none of
the Jupyter packages the check needs (papermill, nbclient, ipykernel, ...). This script, run
where an index is in reach:

1. resolves, for that Python on manylinux x86_64, the packages requirements.txt pins that the
   machine lacks, with their dependency closure (pip's resolver, metadata only: nothing for
   it is downloaded);
   (not jupyterlab nor jupyter-server-mathjax: NOT_FOR_THE_CHECK);
2. resolves what the machine has (MACHINE_HAS and their own dependencies), and takes every
   such name out: a second copy of a package the machine has, numpy above all, would shadow
   its own on the path; torch and numpy are never shipped (NEVER);
3. downloads exactly the rest, one wheel per package, into ``--out`` (emptied first), writes
   ``wheels.json`` there (the wheels, the Python they are for, what the machine is taken to
   have), and prints the folder's size: over ``--max-mib`` (64) it fails.

On the GPU machine, `python3 scripts/gpu_check.py --offline build/gpu-wheels` installs them
(pip --no-index --no-deps --target, into a scratch folder) and runs the check with them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "build" / "gpu-wheels"
MAX_MIB = 64
# the GPU machine's own packages (shared/DESIGN.md): torch at its version, the rest unpinned
MACHINE_TORCH = "2.11.0"
MACHINE_HAS = (f"torch=={MACHINE_TORCH}", "matplotlib", "tensorboard", "psutil", "tqdm", "pyyaml",
               "pytest")  # fmt: skip
NEVER = {"torch", "numpy"}  # a second copy on the path would shadow the machine's own
# pinned by the course, not used by the check (it runs the notebooks headless), and with their
# closures (jupyter_server, babel, ...) they would take the folder past its 64 MiB
NOT_FOR_THE_CHECK = {
    "jupyterlab": "make lab's front end (16.5 MiB, 28 with babel and its server)",
    "jupyter-server-mathjax": "make site's MathJax copy (3 MiB)",
}
PLATFORM = "manylinux_2_28_x86_64"  # glibc 2.28 or newer on the target
# pip does not widen a --platform given by hand: every older manylinux tag, named (2_28 .. 2_5,
# and the legacy names of 2_17, 2_12, 2_5); without them it quietly falls back to older releases
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(28, 4, -1)] + [
    "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
MANIFEST = "wheels.json"


def canonical(name: str) -> str:
    """A distribution's name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def course_pins(requirements: Path = ROOT / "requirements.txt") -> dict[str, str]:
    """requirements.txt's ``name==version`` lines, by canonical name."""
    pins = {}
    for line in requirements.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        name, sep, version = line.partition("==")
        if not sep:
            raise SystemExit(f"requirements.txt: {line!r} is not pinned with ==")
        pins[canonical(name)] = f"{name.strip()}=={version.strip()}"
    return pins


def lacking(pins: dict[str, str]) -> list[str]:
    """The course's pins that the GPU machine does not have (by name)."""
    has = {canonical(re.split(r"[=<>!~ ]", spec, maxsplit=1)[0]) for spec in MACHINE_HAS}
    return [spec for name, spec in pins.items() if name not in has | NEVER | set(NOT_FOR_THE_CHECK)]


def target_flags(python: str) -> list[str]:
    """pip's flags for wheels of CPython ``python`` (3.12) on manylinux x86_64."""
    abi = "cp" + python.replace(".", "")
    return ["--only-binary=:all:", "--python-version", python, "--implementation", "cp",
            "--abi", abi, "--abi", "abi3", "--abi", "none",
            *(flag for tag in PLATFORMS for flag in ("--platform", tag))]  # fmt: skip


def _pip(args: list[str], what: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True,
                          env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})  # fmt: skip
    if proc.returncode != 0:
        noise = "is ignored: it is neither a file nor a directory"  # a find-links dir absent
        text = "\n".join(ln for ln in (proc.stdout + proc.stderr).splitlines() if noise not in ln)
        raise SystemExit(f"pip could not {what}:\n{text[-3000:]}")


def resolve(requirements: list[str], python: str) -> dict[str, str]:
    """What pip would install for ``requirements`` on that Python, from nothing: name -> version.

    A dry run with a report: pip reads the packages' metadata, it downloads no wheel."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        _pip(["install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
              "--target", str(Path(tmp) / "target"), *target_flags(python), *requirements],
             f"resolve {' '.join(requirements)} for Python {python}")  # fmt: skip
        items = json.loads(report.read_text())["install"]
    return {canonical(i["metadata"]["name"]): i["metadata"]["version"] for i in items}


def plan(python: str) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """The wheels to ship (name -> version), what the machine is taken to have, the top level."""
    wanted = lacking(course_pins())
    course = resolve(wanted, python)
    machine = resolve(list(MACHINE_HAS), python)
    ship = {n: v for n, v in sorted(course.items()) if n not in machine and n not in NEVER}
    return ship, machine, wanted


def folder_mib(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.glob("*.whl")) / 2**20


def build(python: str, out: Path, max_mib: float) -> int:
    ship, machine, wanted = plan(python)
    assert not NEVER & set(ship), "torch and numpy are the machine's own: never shipped"
    shutil.rmtree(out, ignore_errors=True)  # only this run's wheels: a stale one would install
    out.mkdir(parents=True)
    _pip(["download", "--no-deps", "--quiet", "--dest", str(out), *target_flags(python),
          *(f"{n}=={v}" for n, v in ship.items())], f"download the wheels for Python {python}")
    files = {}
    for whl in sorted(out.glob("*.whl")):
        files[canonical(whl.name.split("-", 1)[0])] = whl
    missing = sorted(set(ship) - set(files))
    if missing:
        raise SystemExit(f"no wheel came for {', '.join(missing)}")
    manifest = {
        "python": python, "platform": PLATFORM, "requirements": wanted,
        "wheels": [{"name": n, "version": v, "file": files[n].name,
                    "bytes": files[n].stat().st_size} for n, v in ship.items()],
        "not_for_the_check": NOT_FOR_THE_CHECK, "machine_has": list(MACHINE_HAS),
        "machine_resolved": machine,  # the machine's packages as pip resolves them today
    }  # fmt: skip
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    mib = folder_mib(out)
    print(f"{len(ship)} wheels for Python {python} ({PLATFORM}) in {out}: {mib:.1f} MiB "
          f"(at most {max_mib:g})")
    print("top level: " + ", ".join(wanted))
    print("not shipped: " + "; ".join(f"{n} ({why})" for n, why in NOT_FOR_THE_CHECK.items()))
    biggest = sorted(manifest["wheels"], key=lambda w: -w["bytes"])[:5]
    print("largest: " + ", ".join(f"{w['name']} {w['bytes'] / 2**20:.1f}" for w in biggest))
    shared = sorted(n for n in machine if n in {canonical(w.split("==")[0]) for w in wanted})
    if shared:
        print("left to the machine: " + ", ".join(shared))
    if mib > max_mib:
        print(f"FAILED: {mib:.1f} MiB is over {max_mib:g} MiB")
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default="3.12", help="the target's Python (3.12)")
    parser.add_argument("--out", type=Path, default=OUT, help="the folder (emptied first)")
    parser.add_argument("--max-mib", type=float, default=MAX_MIB)
    parser.add_argument("--plan", action="store_true",
                        help="print what would be shipped, download nothing")  # fmt: skip
    args = parser.parse_args(argv)
    if args.plan:
        ship, machine, wanted = plan(args.python)
        print(json.dumps({"ship": ship, "machine": machine, "requirements": wanted}, indent=2))
        return 0
    return build(args.python, args.out, args.max_mib)


if __name__ == "__main__":
    sys.exit(main())
