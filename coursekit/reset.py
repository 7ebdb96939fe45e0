"""Between classes: stop this course's leftover processes, then remove build/.

    python -m coursekit.reset [--dry-run] [--keep-build]      (or: make reset)

A leftover process is a Python process of this checkout: a kernel, a torchrun agent or
worker, papermill or the verify command, or a JupyterLab server, working in this folder (its
notebooks/, build/, ...) or running one of its launchers. Python processes of other folders,
this command itself and the shell that started it are left alone.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("ipykernel_launcher", "torch.distributed.run", "torchrun", "papermill",
         "coursekit.verify", "jupyter-lab", "jupyterlab", "jupyter_lab", "launchers/",
         "ipyparallel", "coursekit.guard")  # fmt: skip  (live ranks: coursekit/ranks.py)


def _inside(path: str | None, root: Path) -> bool:
    if not path:
        return False
    try:
        return Path(path).resolve().is_relative_to(root)
    except (OSError, ValueError):
        return False


def course_processes(root: Path = ROOT) -> list[psutil.Process]:
    """This checkout's leftover course processes (never this one nor its ancestors)."""
    root = root.resolve()
    me = psutil.Process()
    spared = {me.pid, *(p.pid for p in me.parents())}
    found = []
    for p in psutil.process_iter(["pid", "name", "cmdline", "cwd", "status"]):
        try:
            info = p.info
            cmdline = info["cmdline"] or []
            if info["pid"] in spared or info["status"] == psutil.STATUS_ZOMBIE or not cmdline:
                continue
            if "python" not in Path(cmdline[0]).name and "python" not in (info["name"] or ""):
                continue
            text = " ".join(cmdline)
            if not any(kind in text for kind in KINDS):
                continue
            if _inside(info["cwd"], root) or str(root / "launchers") in text:
                found.append(p)
        except psutil.Error:
            pass
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="only list what would go")
    parser.add_argument("--keep-build", action="store_true", help="leave build/ in place")
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    leftovers = course_processes(args.root)
    for p in leftovers:
        try:
            print(f"{'would stop' if args.dry_run else 'stopping'} {p.pid}: "
                  f"{' '.join(p.cmdline())[:150]}")  # fmt: skip
        except psutil.Error:
            pass
    if not leftovers:
        print("no leftover course processes")
    if not args.dry_run:
        for p in leftovers:
            try:
                p.terminate()
            except psutil.Error:
                pass
        _, alive = psutil.wait_procs(leftovers, timeout=5)
        for p in alive:
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(alive, timeout=5)
    build = args.root / "build"
    if not args.keep_build and build.exists():
        print(f"{'would remove' if args.dry_run else 'removing'} {build}")
        if not args.dry_run:
            shutil.rmtree(build)
    return 0


if __name__ == "__main__":
    sys.exit(main())
