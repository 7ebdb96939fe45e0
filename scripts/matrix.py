#!/usr/bin/env python3
"""The whole course at SMOKE sizes on CPU, once per torch release of the supported range.

    python scripts/matrix.py                          # or: make matrix  (every version in TORCH)
    python scripts/matrix.py --torch 2.11.0 --only 00 03
    make matrix TORCH="2.11.0 2.15.0" ONLY="02"

For each version, a side environment .matrix/torch-<version>/ (a venv, kept between runs:
made once, then reused while requirements.txt is unchanged) with that torch and the rest of
requirements.txt at its pins; then ``python -m coursekit.verify --smoke --device cpu`` in it,
with the course on PYTHONPATH and a ``python3`` kernelspec of that venv (JUPYTER_PATH), into
build/matrix/torch-<version>/ (emptied first). It prints a table per version (notebook,
status, seconds, the failing cell and error) and one across versions, and writes
build/matrix/summary.json. The exit status is 1 where any notebook failed on any version.

The versions: SUPPORTED's floor, the pinned release, and the newest. On x86_64 Linux, pip takes
the pinned 2.13.0 as a CPU build where one lies in its find-links; the others from the index
are CUDA builds of several GB (they run on the CPU all the same). A machine whose pip caps
torch (a constraints file) gets an empty one of ours for these installs only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from gpu_check import write_kernelspec  # noqa: E402  beside this script

ENVS = ROOT / ".matrix"
BUILD = ROOT / "build" / "matrix"
SUPPORTED = ("2.11.0", "2.15.0")  # the range the course declares (docs/instructors.md)
TORCH = ("2.11.0", "2.13.0", "2.15.0")  # floor, pinned, newest


def requirements_without_torch() -> list[str]:
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    return [ln for ln in lines if ln.strip() and not ln.startswith(("#", "torch=="))]


def env_stamp(version: str) -> str:
    text = "\n".join([version, *requirements_without_torch()])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def ensure_env(version: str, envs: Path, python: str) -> Path:
    """The venv for ``version``, made or completed once; reused while its stamp holds."""
    env = envs / f"torch-{version}"
    stamp = env / ".matrix-stamp"
    py = env / "bin" / "python"
    if stamp.exists() and stamp.read_text().strip() == env_stamp(version) and py.exists():
        return env
    if not py.exists():
        subprocess.run([python, "-m", "venv", str(env)], check=True)
    with open(env / "requirements-matrix.txt", "w") as f:
        f.write("\n".join([f"torch=={version}", *requirements_without_torch()]) + "\n")
    start = time.monotonic()
    print(f"torch {version}: installing into {env} (once; a CUDA build is several GB)",
          flush=True)  # fmt: skip
    # a machine's pip may cap torch (a constraints file in its configuration): an empty one of
    # ours, named in the environment (which wins over configuration files), lifts it here only
    (env / "no-constraints.txt").write_text("")
    proc = subprocess.run([str(py), "-m", "pip", "install", "--quiet", "-r",
                           str(env / "requirements-matrix.txt")],
                          env={**os.environ, "PIP_CONSTRAINT": str(env / "no-constraints.txt"),
                               "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
                          capture_output=True, text=True)  # fmt: skip
    if proc.returncode != 0:
        noise = "is ignored: it is neither a file nor a directory"
        text = "\n".join(ln for ln in (proc.stdout + proc.stderr).splitlines() if noise not in ln)
        raise SystemExit(f"torch {version}: pip failed:\n{text[-3000:]}")
    stamp.write_text(env_stamp(version) + "\n")
    print(f"torch {version}: installed in {time.monotonic() - start:.0f} s", flush=True)
    return env


def verify_in(env: Path, version: str, build: Path, only: list[str], timeout: float) -> dict:
    """coursekit.verify --smoke --device cpu with that venv's Python; its rows."""
    out = build / f"torch-{version}"
    shutil.rmtree(out, ignore_errors=True)  # this run's rows only
    out.mkdir(parents=True)
    py = str(env / "bin" / "python")
    pythonpath = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    write_kernelspec(out / "kernel", py, pythonpath)
    env_vars = {**os.environ, "PYTHONPATH": pythonpath, "VIRTUAL_ENV": str(env),
                "PATH": os.pathsep.join([str(env / "bin"), os.environ.get("PATH", "")]),
                "JUPYTER_PATH": str(out / "kernel" / "share" / "jupyter")}  # fmt: skip
    cmd = [py, "-m", "coursekit.verify", "--smoke", "--device", "cpu", "--build", str(out),
           "--timeout", str(timeout), *only]  # fmt: skip
    start = time.monotonic()
    with open(out / "verify.log", "w") as log:
        proc = subprocess.run(cmd, cwd=ROOT, env=env_vars, stdout=log, stderr=subprocess.STDOUT)
    seconds = time.monotonic() - start
    found = subprocess.run([py, "-c", "import torch; print(torch.__version__)"],
                           capture_output=True, text=True).stdout.strip()  # fmt: skip
    rows = []
    if (out / "verify.json").exists():
        rows = json.loads((out / "verify.json").read_text())["notebooks"]
    return {"torch": found or version, "returncode": proc.returncode, "seconds": round(seconds, 1),
            "log": str(out / "verify.log"),
            "notebooks": [{"notebook": r["notebook"], "status": r["status"],
                           "seconds": round(r["seconds"], 1), "failed_cell": r["failed_cell"],
                           "error": r["error"]} for r in rows]}  # fmt: skip


def print_version(result: dict) -> None:
    print(f"\ntorch {result['torch']}: {result['seconds']:.0f} s, exit {result['returncode']} "
          f"(log {result['log']})")
    print(f"{'notebook':<46} {'status':<10} {'seconds':>7}  failures")
    for r in result["notebooks"]:
        where = f"cell {r['failed_cell']}: " if r["failed_cell"] is not None else ""
        failure = f"{where}{r['error']}"[:100] if r["status"] != "passed" else ""
        print(f"{r['notebook']:<46} {r['status']:<10} {r['seconds']:>7.1f}  {failure}")
    if not result["notebooks"]:
        print("  no notebook ran: see the log")


def print_across(results: list[dict]) -> None:
    names = sorted({r["notebook"] for res in results for r in res["notebooks"]})
    print("\n" + f"{'notebook':<46}" + "".join(f"{res['torch'][:14]:>16}" for res in results))
    for name in names:
        cells = []
        for res in results:
            row = next((r for r in res["notebooks"] if r["notebook"] == name), None)
            cells.append("-" if row is None else f"{row['status'][:6]} {row['seconds']:.0f}s")
        print(f"{name:<46}" + "".join(f"{c:>16}" for c in cells))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--torch", nargs="*", default=list(TORCH), help="versions (2.11.0 ...)")
    parser.add_argument("--only", nargs="*", default=[], help="notebooks by number")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per notebook")
    parser.add_argument("--envs", type=Path, default=ENVS, help="the side environments")
    parser.add_argument("--build", type=Path, default=BUILD)
    parser.add_argument("--python", default=shutil.which("python3") or sys.executable,
                        help="the Python the venvs are made from")  # fmt: skip
    parser.add_argument("--setup-only", action="store_true", help="make the envs, run nothing")
    args = parser.parse_args(argv)
    results = []
    for version in args.torch:
        env = ensure_env(version, args.envs, args.python)
        if args.setup_only:
            continue
        result = verify_in(env, version, args.build, args.only, args.timeout)
        print_version(result)
        results.append(result)
        args.build.mkdir(parents=True, exist_ok=True)
        (args.build / "summary.json").write_text(json.dumps(results, indent=2) + "\n")
    if args.setup_only:
        print(f"environments ready in {args.envs}: " + ", ".join(args.torch))
        return 0
    if len(results) > 1:
        print_across(results)
    failed = [f"{res['torch']}: {r['notebook']}" for res in results for r in res["notebooks"]
              if r["status"] != "passed"] + [f"{res['torch']}: no result" for res in results
                                              if not res["notebooks"]]  # fmt: skip
    print("\n" + ("all passed" if not failed else "FAILED: " + "; ".join(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
