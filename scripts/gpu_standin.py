#!/usr/bin/env python3
"""A stand-in, on this machine, for the GPU machine's Python: its torch and only what it has.

    python scripts/gpu_standin.py        # or: make gpu-rehearsal (then runs the check with it)

The GPU machine (shared/DESIGN.md) has torch MACHINE_TORCH and the packages gpu_wheels.py lists
as MACHINE_HAS, and no papermill, nbclient, ipykernel, ...: the wheels `make gpu-wheels` builds
bring those. To rehearse its check here, before the few minutes of GPU time, this makes
build/gpu-standin/, a plain venv (its own pip and setuptools, as on the machine) whose site-packages
holds links to exactly those distributions and their dependency closure, taken from the side
environment `make matrix` keeps for that torch (.matrix/torch-<MACHINE_TORCH>/, made here if
missing). It fails if a package the wheels must bring is found in it: the rehearsal would then
prove nothing.
"""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_wheels import MACHINE_HAS, MACHINE_TORCH  # noqa: E402
from matrix import ENVS, ensure_env  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
STANDIN = ROOT / "build" / "gpu-standin"
# what the check needs and the GPU machine does not have: the wheels' part
WHEELS_BRING = ("papermill", "nbclient", "nbformat", "jupyter_client", "ipykernel", "ipywidgets")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(names: list[str], dists: dict) -> set[str]:
    """``names`` and every distribution they require (extras left out), as found in ``dists``."""
    want, seen = [canonical(n) for n in names], set()
    while want:
        name = want.pop()
        if name in seen or name not in dists:
            continue
        seen.add(name)
        for req in dists[name].requires or []:
            if "extra ==" not in req:
                want.append(canonical(re.split(r"[ ;<>=!~\[(]", req, maxsplit=1)[0]))
    return seen


def the_machines(dists: dict) -> set[str]:
    """The distributions the GPU machine has: MACHINE_HAS and their closure in ``dists``."""
    return closure([re.split(r"[=<>]", spec)[0] for spec in MACHINE_HAS], dists)


def site_packages(python: Path) -> Path:
    code = "import sysconfig; print(sysconfig.get_path('purelib'))"
    out = subprocess.run([str(python), "-c", code], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip())


def main() -> int:
    source_env = ensure_env(MACHINE_TORCH, ENVS, sys.executable)
    source = site_packages(source_env / "bin" / "python")
    dists = {canonical(d.metadata["Name"]): d
             for d in importlib.metadata.distributions(path=[str(source)])}  # fmt: skip
    names = the_machines(dists)
    shutil.rmtree(STANDIN, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(STANDIN)], check=True)
    target = site_packages(STANDIN / "bin" / "python")
    tops = {f.parts[0] for name in names for f in dists[name].files or []}
    for top in sorted(tops - {"..", "__pycache__"}):
        # (the venv's own pip and setuptools stay)
        if not top.endswith(".pth") and (source / top).exists() and not (target / top).exists():
            (target / top).symlink_to(source / top)
    python = STANDIN / "bin" / "python"
    probe = "import importlib.util as u, sys; print(*(m for m in sys.argv[1:] if u.find_spec(m)))"
    found = subprocess.run([str(python), "-c", probe, *WHEELS_BRING], check=True,
                           capture_output=True, text=True).stdout.split()  # fmt: skip
    if found:
        raise SystemExit(f"gpu_standin: {STANDIN} has {', '.join(found)}, which only the wheels "
                         "may bring: the rehearsal would not test them")  # fmt: skip
    torch = subprocess.run([str(python), "-c", "import torch; print(torch.__version__)"],
                           check=True, capture_output=True, text=True).stdout.strip()  # fmt: skip
    print(f"{python}: torch {torch} and {len(names)} distributions ({', '.join(sorted(names))}); "
          f"none of {', '.join(WHEELS_BRING)}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
