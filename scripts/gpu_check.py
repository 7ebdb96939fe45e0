"""The first command to run on a GPU machine: does the course's GPU tier work here?

    python scripts/gpu_check.py                 # or: make gpu-check
    python scripts/gpu_check.py --device cpu    # the same checks on the CPU tier (tested)
    python scripts/gpu_check.py --only 00 03    # a subset of the notebooks

1. Every notebook at SMOKE sizes on this machine's tier, in parallel lanes (one verify
   process per lane, each with its own build folder).
2. Launcher probes: the training script with `--amp bf16 --compile` and, on a GPU,
   `--amp fp16` (a loss that turns NaN is a failure: it did once with torch 2.11 on an H200),
   and an all-reduce between two processes (NCCL where there are 2 GPUs or more).
3. The course image's CUDA flavour: the CUDA of its base image tag (docker/Dockerfile's
   CUDA_TAG) against the CUDA of the torch this machine runs, so that the image runs the
   same build the notebooks were checked with here.
4. One JSON summary, build/gpu-check/summary.json: the torch it ran on against the pinned
   one, every notebook's status, every probe's figures, and for each failure whether a
   torch other than the pinned one may explain it (an AttributeError, ImportError or
   TypeError from torch itself) or it is a defect of the course.

A GPU machine may come with another torch and no way to install the pinned one: the check
runs on the torch it finds and names it.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import coursekit  # noqa: E402
from coursekit.verify import select  # noqa: E402

# errors that another torch release explains more often than a defect of the course does
VERSION_SYMPTOMS = re.compile(r"AttributeError|ImportError|ModuleNotFoundError|TypeError|"
                              r"unexpected keyword|has no attribute")  # fmt: skip


def pinned_torch() -> str:
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        if line.startswith("torch=="):
            return line.split("==", 1)[1].strip()
    raise SystemExit("requirements.txt pins no torch version")


def image_cuda_check(torch_cuda: str | None, torch_matches: bool) -> dict:
    """docker/Dockerfile's CUDA_TAG (cuda12.8-cudnn9-runtime) against this torch's CUDA."""
    text = (ROOT / "docker" / "Dockerfile").read_text()
    tag = re.search(r"^ARG CUDA_TAG=cuda(\d+\.\d+)\S*$", text, re.M)
    check = {"dockerfile_cuda": tag and tag.group(1), "torch_cuda": torch_cuda}
    if torch_cuda is None or not torch_matches:
        why = "no CUDA build of torch here" if torch_cuda is None else "not the pinned torch"
        return {**check, "status": "not checked", "why": why}
    if check["dockerfile_cuda"] != torch_cuda:
        return {**check, "status": "failed",
                "error": f"the image's base has CUDA {check['dockerfile_cuda']}, the pinned "
                         f"torch here CUDA {torch_cuda}: set ARG CUDA_TAG=cuda{torch_cuda}-..."}
    return {**check, "status": "passed"}


def diagnose(error: str, torch_matches: bool) -> str:
    if not error:
        return ""
    if not torch_matches and VERSION_SYMPTOMS.search(error):
        return "maybe the torch version: rerun with the pinned torch before filing a defect"
    return "a defect of the course (or of this machine): the pinned torch or not, report it"


def run_lanes(notebooks: list[Path], lanes: int, device: str, build: Path, timeout: float):
    """Every notebook once, spread over `lanes` verify processes; their rows, merged."""
    groups = [notebooks[i::lanes] for i in range(lanes)]
    procs = []
    for i, group in enumerate(g for g in groups if g):
        lane = build / f"lane{i}"
        cmd = [sys.executable, "-m", "coursekit.verify", "--smoke", "--device", device,
               "--build", str(lane), "--timeout", str(timeout), *(nb.name[:2] for nb in group)]
        log = open(build / f"lane{i}.log", "w")  # noqa: SIM115 - closed after the wait below
        procs.append((lane, log, subprocess.Popen(cmd, cwd=ROOT, stdout=log,
                                                  stderr=subprocess.STDOUT)))  # fmt: skip
    rows = []
    for lane, log, proc in procs:
        try:
            proc.wait(timeout=timeout * len(notebooks) + 60)
        except subprocess.TimeoutExpired:
            proc.kill()  # verify stops its kernels on the way out of a KeyboardInterrupt only
            proc.wait()
        log.close()
        summary = lane / "verify.json"
        if summary.exists():
            rows += json.loads(summary.read_text())["notebooks"]
    return sorted(rows, key=lambda r: r["notebook"])


def probe(name: str, launcher: str, args: list, setup, nproc: int) -> dict:
    """One launcher run; its figures, or its error."""
    start = time.monotonic()
    try:
        run = coursekit.run_launcher(ROOT / "launchers" / launcher, args, setup=setup,
                                     nproc=nproc, name=f"gpu_check_{name}", echo=False)  # fmt: skip
        result = {"status": "passed", "metrics": run.metrics}
    except (coursekit.LauncherFailed, coursekit.LauncherTimeout) as err:
        result = {"status": "failed", "error": str(err).strip().splitlines()[-1][:400]}
    result["seconds"] = round(time.monotonic() - start, 1)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--only", nargs="*", default=[], help="notebooks by number (00 03 ...)")
    parser.add_argument("--lanes", type=int, help="parallel verify processes (default: by cores)")
    parser.add_argument("--timeout", type=float, default=420, help="seconds per notebook")
    parser.add_argument("--build", type=Path, default=ROOT / "build" / "gpu-check")
    parser.add_argument("--compile-backend", default="inductor",
                        help="for the --compile probe (the tests use eager: seconds, not minutes)")
    args = parser.parse_args(argv)

    setup = coursekit.configure(DEVICE=args.device, TIMEOUT_S=args.timeout, SMOKE=True,
                                RESULTS_DIR=args.build / "probes" / "results")  # fmt: skip
    args.build.mkdir(parents=True, exist_ok=True)
    import torch

    found, pinned = importlib.metadata.version("torch"), pinned_torch()
    matches = found.split("+")[0] == pinned
    notebooks = select(ROOT / "notebooks", args.only)
    # a notebook at SMOKE sizes keeps about 2 cores busy: one lane per 4 cores, at most 4
    lanes = args.lanes or max(1, min(4, (os.cpu_count() or 1) // 4, len(notebooks)))
    print(f"torch {found} (the course pins {pinned}); tier {setup.tier}; "
          f"{len(notebooks)} notebook(s) in {lanes} lane(s)", flush=True)
    start = time.monotonic()
    rows = run_lanes(notebooks, lanes, setup.device, args.build, args.timeout)
    notebooks_seconds = time.monotonic() - start

    small = ["--train-size", 256, "--test-size", 128, "--epochs", 1]
    probes = {"bf16_compile": probe("bf16_compile", "train_step6_amp_compile.py",
                                    [*small, "--amp", "bf16", "--compile",
                                     "--compile-backend", args.compile_backend], setup, 1)}
    if setup.device == "cuda":
        probes["fp16_scaler"] = probe("fp16_scaler", "train_step6_amp_compile.py",
                                      [*small, "--amp", "fp16"], setup, 1)  # fmt: skip
    probes["allreduce"] = probe("allreduce", "check_allreduce.py", [], setup,
                                max(2, min(setup.n_gpus, 8)))  # fmt: skip
    for name, result in probes.items():
        losses = result.get("metrics", {}).get("losses")
        if losses is not None and not all(math.isfinite(x) for x in losses):
            result.update(status="failed", error=f"a loss is not finite: {losses[:8]}")
        if name == "allreduce" and result["status"] == "passed":
            m = result["metrics"]
            expected = m["world_size"] * (m["world_size"] + 1) / 2
            result["backend"] = m["backend"]
            if any(r["received"] != expected for r in m["ranks"]):
                result.update(status="failed", error=f"all-reduce did not sum to {expected}")
        result["diagnosis"] = diagnose(result.get("error", ""), matches)

    image = image_cuda_check(torch.version.cuda, matches)
    failures = [r["notebook"] for r in rows if r["status"] != "passed"]
    failures += ["image CUDA tag"] if image["status"] == "failed" else []
    failures += [f"probe {n}" for n, r in probes.items() if r["status"] != "passed"]
    missing = sorted({nb.stem for nb in notebooks} - {r["notebook"] for r in rows})
    failures += [f"{stem} (no result: see its lane's log)" for stem in missing]
    summary = {
        "torch": found, "torch_pinned": pinned, "torch_matches_pin": matches,
        "cuda": torch.version.cuda, "gpus": setup.gpu_names, "tier": setup.tier,
        "device": setup.device, "lanes": lanes, "notebooks_seconds": round(notebooks_seconds, 1),
        "notebooks": [{"notebook": r["notebook"], "status": r["status"],
                       "seconds": round(r["seconds"], 1), "error": r["error"],
                       "failed_cell": r["failed_cell"],
                       "claims_not_held": [c["text"] for c in r.get("claims_not_held", [])],
                       "diagnosis": diagnose(r["error"], matches)} for r in rows],
        "probes": probes, "image_cuda_tag": image, "failures": failures, "passed": not failures,
    }  # fmt: skip
    path = args.build / "summary.json"
    path.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    for r in summary["notebooks"]:
        print(f"{r['notebook']:<40} {r['status']:<10} {r['seconds']:7.1f} s  {r['error'][:90]}")
    for name, r in probes.items():
        error = r.get("error", "")[:90]
        print(f"probe {name:<34} {r['status']:<10} {r['seconds']:7.1f} s  {error}")
    print(f"image CUDA tag {image['dockerfile_cuda']} vs torch CUDA {image['torch_cuda']}: "
          f"{image['status']} {image.get('why', image.get('error', ''))}")
    print(f"\nsummary: {path}")
    print("all passed" if not failures else "FAILED: " + ", ".join(failures))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
