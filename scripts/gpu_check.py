"""The first command to run on a GPU machine: does the course's GPU tier work here?

    python scripts/gpu_check.py                 # or: make gpu-check
    python scripts/gpu_check.py --device cpu    # the same checks on the CPU tier (tested)
    python scripts/gpu_check.py --only 00 03    # a subset of the notebooks
    python3 scripts/gpu_check.py --offline build/gpu-wheels   # a machine with no index

1. Every notebook at SMOKE sizes on this machine's tier, in parallel lanes: each notebook in a
   verify process of its own, with its own folder (build/gpu-check/notebooks/<notebook>/,
   emptied before it runs, so a notebook that dies or is cut off shows as such, never with an
   earlier run's row). Without ``--budget`` every notebook runs, the longest first. With one
   (a rented machine's hour), 00 runs first and is never cut, then the notebooks whose GPU
   tier teaches most (TEACHES_MOST_ON_A_GPU); one the budget leaves no time for is reported
   "cut", with why, apart from the failures.
2. Per notebook: its tier and device (its results file), every run it launched (the launcher,
   ranks, device, backend: the run's own metrics.json, or the launchers' rule where it wrote
   none) and what ran on the GPU: the launches on cuda, and, where NVML answers, every process
   that held the GPU (the kernel, or a launcher's ranks) with its peak memory.
3. Launcher probes, while the notebooks run: the training script with `--amp bf16 --compile`
   and, on a GPU, `--amp fp16` (a loss that turns NaN is a failure: it did once with torch
   2.11 on an H200), and an all-reduce between processes (NCCL where there are 2 GPUs or more).
4. The course image's CUDA flavour: the CUDA of its base image tag (docker/Dockerfile's
   CUDA_TAG) against the CUDA of the torch this machine runs: a difference is reported, not
   a failure (the tag itself was never pulled by the course's checks).
5. One JSON summary, build/gpu-check/summary.json: the torch it ran on against the pinned one,
   every notebook's row, every probe's figures, and for each failure whether a torch other than
   the pinned one may explain it (an AttributeError, ImportError or TypeError from torch
   itself) or it is a defect of the course.

``--offline WHEELS``: for a machine with its own Python and torch and no package index (the
course's GPU machine). WHEELS is the folder `make gpu-wheels` builds (scripts/gpu_wheels.py);
this installs them with ``pip install --no-index --no-deps --target SCRATCH`` (SCRATCH:
build/gpu-scratch, emptied first; a package this Python already has is left to it), writes a
``python3`` kernelspec for this Python into SCRATCH (found through JUPYTER_PATH), checks that
every installed package's requirements are met on this path and that nothing shadows a package
of the machine, then runs the check itself with SCRATCH and the course on PYTHONPATH. No
`make setup`, no .venv.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import math
import os
import queue
import re
import shutil
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BUILD = ROOT / "build" / "gpu-check"
SCRATCH = ROOT / "build" / "gpu-scratch"
MARGIN_S = 20  # for the summary, and for the lanes' kernels to stop
MIN_BUDGET_S = 120  # notebook 00 (about 40 s at SMOKE), the probes beside it, the margin
# with a budget, the order the notebooks start in: 00 (is this machine's GPU tier working at
# all?), then those whose lesson changes most on GPUs (the first DDP run on NCCL, DP against
# DDP per GPU, AMP and compile, DP's device 0, the training loop, sharding, pipelines) before
# those that read the same on a CPU
TEACHES_MOST_ON_A_GPU = ("00", "03", "06", "05", "01", "04", "11", "12", "07", "02", "09", "10",
                         "08")  # fmt: skip
# SMOKE seconds per notebook (torch 2.11, CPU tier, one lane on a loaded 2-core host): the lanes
# take the longest first, so that the last notebook to start is a short one; a summary.json of
# an earlier run in the build folder gives its own seconds instead
SMOKE_SECONDS = {"00": 39, "01": 36, "02": 60, "03": 33, "04": 158, "05": 243, "06": 81,
                 "07": 100, "08": 192, "09": 59, "10": 96, "11": 129, "12": 150}  # fmt: skip
# errors that another torch release explains more often than a defect of the course does
VERSION_SYMPTOMS = re.compile(r"AttributeError|ImportError|ModuleNotFoundError|TypeError|"
                              r"unexpected keyword|has no attribute")  # fmt: skip


def pinned_torch() -> str:
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        if line.startswith("torch=="):
            return line.split("==", 1)[1].strip()
    raise SystemExit("requirements.txt pins no torch version")


def image_cuda_check(torch_cuda: str | None, torch_matches: bool) -> dict:
    """docker/Dockerfile's CUDA_TAG (cuda12.8-cudnn9-runtime) against this torch's CUDA:
    passed, differs (said, never a failure: the pinned torch is built for several CUDA
    releases, and whether pytorch/pytorch has a tag for this one is not known here) or not
    checked."""
    text = (ROOT / "docker" / "Dockerfile").read_text()
    tag = re.search(r"^ARG CUDA_TAG=cuda(\d+\.\d+)\S*$", text, re.M)
    check = {"dockerfile_cuda": tag and tag.group(1), "torch_cuda": torch_cuda}
    if torch_cuda is None or not torch_matches:
        why = "no CUDA build of torch here" if torch_cuda is None else "not the pinned torch"
        return {**check, "status": "not checked", "why": why}
    if check["dockerfile_cuda"] != torch_cuda:
        return {**check, "status": "differs",
                "why": f"the image's base has CUDA {check['dockerfile_cuda']}, the pinned torch "
                       f"here CUDA {torch_cuda}: to match it, set ARG CUDA_TAG=cuda{torch_cuda}-"
                       "... if pytorch/pytorch has that tag (not verified by the course)"}
    return {**check, "status": "passed"}


def diagnose(error: str, torch_matches: bool) -> str:
    if not error:
        return ""
    if not torch_matches and VERSION_SYMPTOMS.search(error):
        return "maybe the torch version: rerun with the pinned torch before filing a defect"
    return "a defect of the course (or of this machine): the pinned torch or not, report it"


# ---- --offline: the course's missing packages from a wheel folder, into a scratch path ------


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_here(names: list[str], path: list[str] | None = None) -> dict[str, str]:
    """Which of ``names`` this Python already has on ``path`` (sys.path): name -> version."""
    found = {}
    for dist in importlib.metadata.distributions(path=path if path is not None else sys.path):
        name = canonical(dist.metadata["Name"] or "")
        if name in names and name not in found:
            found[name] = dist.version
    return found


def unpack_wheel(wheel: Path, target: Path) -> None:
    """A wheel's files into ``target`` as pip --target lays them out (for a Python without
    pip): the package folders and .dist-info as they are, a .data folder's purelib and
    platlib merged in, its scripts and headers left out."""
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            parts = Path(info.filename).parts
            if parts[0].endswith(".data"):
                if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
                    continue
                parts = parts[2:]
            dest = target.joinpath(*parts)
            if info.is_dir():
                dest.mkdir(parents=True, exist_ok=True)
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(zf.read(info))


def write_kernelspec(scratch: Path, python: str, pythonpath: str) -> Path:
    """A ``python3`` kernel for ``python`` in SCRATCH/share/jupyter (JUPYTER_PATH finds it
    before any other): the notebooks name that kernel, and the kernel needs the scratch path."""
    folder = scratch / "share" / "jupyter" / "kernels" / "python3"
    folder.mkdir(parents=True, exist_ok=True)
    spec = {"argv": [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Python 3 (ddp-course, gpu-check)", "language": "python",
            "env": {"PYTHONPATH": pythonpath}, "metadata": {"debugger": False}}  # fmt: skip
    (folder / "kernel.json").write_text(json.dumps(spec, indent=1) + "\n")
    return folder


def install_offline(wheels: Path, scratch: Path) -> dict:
    """Install the folder's wheels (its wheels.json) into ``scratch``; returns what was done."""
    manifest = json.loads((wheels / "wheels.json").read_text())
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if manifest["python"] != here:
        raise SystemExit(f"{wheels} holds wheels for Python {manifest['python']}, this is {here}: "
                         f"build them with python scripts/gpu_wheels.py --python {here}")
    names = [w["name"] for w in manifest["wheels"]]
    kept = installed_here(names)  # the machine's own copy wins: never a second one on the path
    todo = [w for w in manifest["wheels"] if w["name"] not in kept]
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    has_pip = subprocess.run([sys.executable, "-m", "pip", "--version"],
                             capture_output=True).returncode == 0  # fmt: skip
    if has_pip and todo:
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
               "--find-links", str(wheels), "--target", str(scratch),
               *(f"{w['name']}=={w['version']}" for w in todo)]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True,
                              env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
        if proc.returncode != 0:
            raise SystemExit(f"pip could not install the wheels:\n{proc.stdout}{proc.stderr}")
    else:
        for w in todo:
            unpack_wheel(wheels / w["file"], scratch)
    return {"installed": [w["name"] for w in todo], "kept": kept,
            "how": "pip --no-index --no-deps --target" if has_pip else "unzipped (no pip)"}


def preflight(scratch: Path) -> list[str]:
    """What would stop the check on this path: a requirement of a scratch package that nothing
    here meets, or a scratch package that is also somewhere else on the path (a second copy)."""
    from packaging.requirements import Requirement  # matplotlib's dependency: the machine has it

    problems = []
    scratch_dists = list(importlib.metadata.distributions(path=[str(scratch)]))
    others = [p for p in sys.path if Path(p or ".").resolve() != scratch.resolve()]
    elsewhere = installed_here([canonical(d.metadata["Name"]) for d in scratch_dists], others)
    for name, version in sorted(elsewhere.items()):
        problems.append(f"{name}: a second copy ({version} on the machine's own path)")
    for dist in scratch_dists:
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker and not req.marker.evaluate({"extra": ""}):
                continue
            try:
                have = importlib.metadata.version(req.name)
            except importlib.metadata.PackageNotFoundError:
                problems.append(f"{dist.metadata['Name']} needs {req}: not on this path")
                continue
            if req.specifier and not req.specifier.contains(have, prereleases=True):
                problems.append(f"{dist.metadata['Name']} needs {req}: this path has {have}")
    return problems


def offline(args: argparse.Namespace, argv: list[str]) -> int:
    """Install the wheels, then run this script again with them on the path."""
    scratch = args.scratch.resolve()
    done = install_offline(args.offline.resolve(), scratch)
    print(f"{len(done['installed'])} packages into {scratch} ({done['how']}); this Python "
          f"already has {', '.join(f'{n} {v}' for n, v in done['kept'].items()) or 'none'}",
          flush=True)  # fmt: skip
    pythonpath = os.pathsep.join([str(scratch), str(ROOT), os.environ.get("PYTHONPATH", "")])
    pythonpath = pythonpath.rstrip(os.pathsep)
    write_kernelspec(scratch, sys.executable, pythonpath)
    env = {**os.environ, "PYTHONPATH": pythonpath,
           "JUPYTER_PATH": os.pathsep.join([str(scratch / "share" / "jupyter"),
                                            os.environ.get("JUPYTER_PATH", "")]).rstrip(os.pathsep),
           "JUPYTER_RUNTIME_DIR": str(scratch / "runtime"),
           "PATH": os.pathsep.join([str(scratch / "bin"), os.environ.get("PATH", "")])}  # fmt: skip
    rest = []
    skip = False
    for arg in argv:  # the same arguments, less --offline and --scratch
        if skip:
            skip = False
        elif arg in ("--offline", "--scratch"):
            skip = True
        elif not arg.startswith(("--offline=", "--scratch=")):
            rest.append(arg)
    cmd = [sys.executable, str(Path(__file__).resolve()), *rest, "--installed", str(scratch)]
    return subprocess.run(cmd, env=env, cwd=ROOT).returncode


# ---- what ran where: the launches of a notebook, and the processes that held the GPU -------


def launcher_rule(device: str, nproc: int, n_gpus: int) -> str:
    """The launchers' own choice (device_and_backend in each): NCCL when each rank of the node
    has a GPU of its own, gloo otherwise."""
    return "nccl" if device == "cuda" and 0 < nproc <= n_gpus else "gloo"


def launches(runs_dir: Path, n_gpus: int) -> list[dict]:
    """Every run a notebook launched (runs/<name>/run.json): launcher, ranks, device, backend
    (the run's metrics.json where it wrote one, else the launchers' rule, marked so)."""
    found = []
    for run_json in sorted(runs_dir.glob("*/run.json")):
        run = json.loads(run_json.read_text())
        cmd = [str(c) for c in run.get("cmd", [])]
        script = next((Path(c).name for c in cmd if c.endswith(".py")), "?")
        device = cmd[cmd.index("--device") + 1] if "--device" in cmd[:-1] else "cpu"
        nproc = int(run.get("nproc") or 1)
        backend, source = None, "metrics"
        for metrics in sorted((run_json.parent / "out").glob("*.json")):
            with contextlib.suppress(ValueError, OSError):
                data = json.loads(metrics.read_text())
                if isinstance(data, dict) and isinstance(data.get("backend"), str):
                    backend = data["backend"]
                    break
        if backend is None:
            backend, source = launcher_rule(device, nproc, n_gpus), "rule"
        found.append({"run": run_json.parent.name, "launcher": script, "nproc": nproc,
                      "device": device, "backend": backend, "backend_from": source,
                      "returncode": run.get("returncode")})  # fmt: skip
    return found


class GpuWatch:
    """Samples NVML's compute processes every ``every`` seconds and keeps, per process that
    held a GPU, its command, peak memory and the check's process it descends from (a
    notebook's verify process, registered with :meth:`track`). ``sample`` can be given
    (tests): a callable returning [(pid, used_bytes)]."""

    def __init__(self, sample=None, every: float = 0.5):
        self.sample = sample or self._nvml_sampler()
        self.every = every
        self.roots: dict[int, str] = {}  # pid of a notebook's verify process -> notebook
        self.seen: dict[int, dict] = {}
        self.error = "" if self.sample else "NVML not available: no per-process GPU record"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    @staticmethod
    def _nvml_sampler():
        try:
            import pynvml

            pynvml.nvmlInit()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i)
                       for i in range(pynvml.nvmlDeviceGetCount())]  # fmt: skip
        except Exception:  # noqa: BLE001 - no NVML, no driver, no GPU: no record
            return None

        def sample():
            out = []
            for h in handles:
                for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
                    out.append((p.pid, p.usedGpuMemory or 0))
            return out

        return sample

    def track(self, pid: int, owner: str) -> None:
        self.roots[pid] = owner

    def start(self) -> GpuWatch:
        if self.sample:
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.poll()
            self._stop.wait(self.every)

    def poll(self) -> None:
        import psutil

        try:
            sampled = self.sample()
        except Exception as err:  # noqa: BLE001 - a driver hiccup ends the record, not the check
            self.error = f"NVML stopped answering: {err}"
            self._stop.set()
            return
        for pid, used in sampled:
            entry = self.seen.get(pid)
            if entry is None:
                entry = {"pid": pid, "what": "?", "owner": None, "peak_mib": 0.0}
                try:
                    proc = psutil.Process(pid)
                    entry["what"] = describe_process(proc.cmdline())
                    chain = [proc.pid] + [p.pid for p in proc.parents()]
                    entry["owner"] = next((self.roots[p] for p in chain if p in self.roots),
                                          "this check" if os.getpid() in chain else None)
                except psutil.Error:  # gone, or a pid of another namespace (a container)
                    pass
                self.seen[pid] = entry
            entry["peak_mib"] = max(entry["peak_mib"], round(used / 2**20, 1))

    def of(self, owner: str) -> list[dict]:
        return [e for e in self.seen.values() if e["owner"] == owner]

    def unattributed(self) -> list[dict]:
        return [e for e in self.seen.values() if e["owner"] is None]


def describe_process(cmdline: list[str]) -> str:
    """'kernel' for a Jupyter kernel, the launcher's file name for a rank, else the command."""
    if any("ipykernel" in part for part in cmdline):
        return "kernel"
    script = next((Path(c).name for c in cmdline if c.endswith(".py")), None)
    return script or " ".join(Path(c).name for c in cmdline[:3])


def on_the_gpu(runs: list[dict], held: list[dict]) -> str:
    """One line: what of the notebook ran on the GPU."""
    parts = []
    kernel = [e for e in held if e["what"] == "kernel"]
    if kernel:
        parts.append(f"kernel ({max(e['peak_mib'] for e in kernel):.0f} MiB)")
    shown: dict[str, list] = {}
    for r in runs:
        if r["device"] == "cuda":
            shown.setdefault(r["launcher"], []).append(f"{r['nproc']}x {r['backend']}")
    for e in held:  # a process NVML saw that no run.json names as cuda (say, a launcher's child)
        if e["what"] not in ("kernel", *shown):
            shown.setdefault(e["what"], []).append("seen by NVML")
    for launcher, how in shown.items():
        parts.append(f"{launcher} ({', '.join(sorted(set(how)))})")
    return "; ".join(parts) or "nothing"


# ---- the notebooks, one verify process each, in lanes -------------------------------------


EXCEPTION = re.compile(r"\b([A-Za-z_.]*(?:Error|Exception)): (.+)")


def launch_error(runs_dir: Path) -> str:
    """The first exception of the last launched run that failed (a rank's own line), for a
    notebook that failed: "LauncherFailed: ... a Python exception" names no cause."""
    failed = [p for p in runs_dir.glob("*/run.json")
              if json.loads(p.read_text()).get("returncode") not in (0, None)]  # fmt: skip
    for run_json in sorted(failed, key=lambda p: p.stat().st_mtime, reverse=True)[:1]:
        log = run_json.parent / "output.log"
        lines = log.read_text(errors="replace").splitlines() if log.exists() else []
        for line in lines:  # the first: the rank that failed first (the others follow it)
            found = EXCEPTION.search(line)
            if found and "ChildFailedError" not in found.group(1):
                return f"{run_json.parent.name}: {found.group(1)}: {found.group(2)}"[:300]
    return ""


def notebook_row(stem: str, folder: Path, status: str, seconds: float, error: str,
                 n_gpus: int, held: list[dict]) -> dict:  # fmt: skip
    """The row of one notebook, from its own folder only (emptied before it ran)."""
    row = {"notebook": stem, "status": status, "seconds": round(seconds, 1), "error": error,
           "failed_cell": None, "claims_not_held": [], "tier": None, "device": None,
           "nproc": None}  # fmt: skip
    summary = folder / "verify.json"
    if summary.exists():
        (verified,) = json.loads(summary.read_text())["notebooks"]
        row.update(status=verified["status"], seconds=round(verified["seconds"], 1),
                   error=verified["error"], failed_cell=verified["failed_cell"],
                   claims_not_held=[c["text"] for c in verified.get("claims_not_held", [])],
                   figures=verified.get("figures", {}))  # what the notebook measured on this tier
    results = folder / "results" / f"{stem}.json"
    if results.exists():
        figures = json.loads(results.read_text())
        row.update(tier=figures.get("tier"), device=figures.get("device"),
                   nproc=figures.get("nproc"))
    runs = launches(folder / "runs", n_gpus)
    row["launch_error"] = launch_error(folder / "runs") if row["status"] != "passed" else ""
    row["launches"] = runs
    row["backend"] = "+".join(sorted({r["backend"] for r in runs})) or "-"
    row["gpu_processes"] = held
    row["on_the_gpu"] = on_the_gpu(runs, held)
    return row


def run_notebooks(notebooks: list[Path], lanes: int, device: str, build: Path,
                  timeout: float, deadline: float, n_gpus: int, watch: GpuWatch,
                  command=None) -> tuple[list[dict], list[threading.Thread]]:  # fmt: skip
    """Each notebook in a verify process of its own, ``lanes`` at a time, each in its own
    folder (emptied first); none starts after ``deadline`` (time.monotonic())."""
    command = command or (lambda nb, folder, limit: [
        sys.executable, "-m", "coursekit.verify", "--smoke", "--device", device, "--build",
        str(folder), "--timeout", str(limit), nb.name[:2]])  # fmt: skip
    todo: queue.Queue = queue.Queue()
    for nb in notebooks:
        todo.put(nb)
    rows, lock = [], threading.Lock()
    threads = max(1, (os.cpu_count() or 1) // (2 * lanes))  # 2 ranks per run, per lane

    def lane() -> None:
        while True:
            try:
                nb = todo.get_nowait()
            except queue.Empty:
                return
            folder = build / "notebooks" / nb.stem
            shutil.rmtree(folder, ignore_errors=True)  # never an earlier run's rows (N3)
            folder.mkdir(parents=True)
            never_cut = nb.name[:2] == "00"
            left = deadline - time.monotonic()
            if left < 30 and not never_cut:
                row = notebook_row(nb.stem, folder, "cut", 0.0,
                                   f"the budget was spent before it could start ({left:.0f} s "
                                   "left): rerun it with --only", n_gpus, [])  # fmt: skip
                with lock:
                    rows.append(row)
                continue
            limit = timeout if never_cut else min(timeout, left)
            start = time.monotonic()
            with open(folder / "verify.log", "w") as log:
                proc = subprocess.Popen(command(nb, folder, int(limit)), cwd=ROOT, stdout=log,
                                        stderr=subprocess.STDOUT, start_new_session=True,
                                        env={**os.environ, "OMP_NUM_THREADS": str(threads)})
                watch.track(proc.pid, nb.stem)
                status, error = "failed", ""
                try:
                    proc.wait(timeout=limit + 30)  # verify interrupts a notebook at its limit
                except subprocess.TimeoutExpired:
                    kill_session(proc)
                    status, error = "timed out", f"stopped after {limit + 30:.0f} s"
            seconds = time.monotonic() - start
            if not (folder / "verify.json").exists() and not error:
                tail = (folder / "verify.log").read_text(errors="replace").strip().splitlines()
                error = f"no result (exit {proc.returncode}): {tail[-1][:200] if tail else ''}"
            row = notebook_row(nb.stem, folder, status, seconds, error, n_gpus,
                               watch.of(nb.stem))  # fmt: skip
            if row["status"] != "passed" and limit < timeout and seconds >= limit - 1:
                row["status"] = "cut"  # the budget, not the notebook, stopped it
                row["error"] = (f"the budget ran out while it ran (stopped at {limit:.0f} s): "
                                f"rerun it with --only; {row['error']}")
            with lock:
                rows.append(row)

    workers = [threading.Thread(target=lane) for _ in range(lanes)]
    for w in workers:
        w.start()
    return rows, workers


def kill_session(proc: subprocess.Popen) -> None:
    """The verify process and everything it started (its kernel, their launches)."""
    import psutil

    try:
        family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.Error:
        family = []
    for p in family:
        with contextlib.suppress(psutil.Error):
            p.kill()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, 9)
    proc.wait()


def probe(name: str, launcher: str, args: list, setup, nproc: int) -> dict:
    """One launcher run; its figures, or its error."""
    import coursekit

    start = time.monotonic()
    try:
        run = coursekit.run_launcher(ROOT / "launchers" / launcher, args, setup=setup,
                                     nproc=nproc, name=f"gpu_check_{name}", echo=False)  # fmt: skip
        result = {"status": "passed", "metrics": run.metrics}
    except (coursekit.LauncherFailed, coursekit.LauncherTimeout) as err:
        result = {"status": "failed", "error": str(err).strip().splitlines()[-1][:400]}
    result["seconds"] = round(time.monotonic() - start, 1)
    return result


def run_probes(setup, compile_backend: str) -> dict:
    small = ["--train-size", 256, "--test-size", 128, "--epochs", 1]
    probes = {"bf16_compile": probe("bf16_compile", "train_step6_amp_compile.py",
                                    [*small, "--amp", "bf16", "--compile",
                                     "--compile-backend", compile_backend], setup, 1)}
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
    return probes


def start_order(notebooks: list[Path], build: Path, budget: float | None) -> list[Path]:
    """With a budget, 00 first, then what teaches most on a GPU; without, the longest first
    (by expected seconds: the earlier run's, if any), so the lanes end together."""
    if budget is not None:
        rank = {n: i for i, n in enumerate(TEACHES_MOST_ON_A_GPU)}
        return sorted(notebooks, key=lambda nb: rank.get(nb.name[:2], len(rank)))
    expected = {k: float(v) for k, v in SMOKE_SECONDS.items()}
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        earlier = json.loads((build / "summary.json").read_text())["notebooks"]
        expected |= {r["notebook"][:2]: float(r["seconds"]) for r in earlier
                     if r["status"] == "passed"}  # fmt: skip
    return sorted(notebooks, key=lambda nb: -expected.get(nb.name[:2], 60.0))


def budget_words(budget: float | None) -> str:
    return "no budget" if budget is None else f"budget {budget:.0f} s"


def clear(build: Path) -> None:
    """This check's own outputs from an earlier run (never anything else in the folder)."""
    for name in ("notebooks", "probes", "runs"):
        shutil.rmtree(build / name, ignore_errors=True)
    for old in [build / "summary.json", *build.glob("lane*.log")]:
        old.unlink(missing_ok=True)
    for old in build.glob("lane[0-9]*"):  # the lanes of an earlier version of this script
        shutil.rmtree(old, ignore_errors=True)


def print_table(rows: list[dict]) -> None:
    head = ("notebook", "status", "seconds", "tier", "device", "backend", "on the GPU")
    lines = [head] + [(r["notebook"], r["status"], f"{r['seconds']:.1f}", str(r["tier"]),
                       str(r["device"]), r["backend"], r["on_the_gpu"]) for r in rows]  # fmt: skip
    widths = [max(len(line[i]) for line in lines) for i in range(len(head) - 1)]
    for i, line in enumerate(lines):
        print("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=False)) + "  " + line[-1])
        if i == 0:
            print("-" * min(120, sum(widths) + 2 * len(widths) + 10))
    for r in rows:
        if r["status"] not in ("passed", "cut"):  # the cut ones: one line after the table
            where = f"cell {r['failed_cell']}: " if r["failed_cell"] is not None else ""
            print(f"  {r['notebook']}: {where}{r['error'][:150]}")
            if r.get("launch_error"):
                print(f"    its launch: {r['launch_error'][:150]}")
            if r.get("diagnosis"):
                print(f"    {r['diagnosis']}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--only", nargs="*", default=[], help="notebooks by number (00 03 ...)")
    parser.add_argument("--lanes", type=int, help="notebooks at once (default: a lane per 4 "
                        "cores, at most 4)")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=420, help="seconds per notebook")
    parser.add_argument("--budget", type=float,
                        help="seconds for the whole check (default: none, every notebook runs);"
                        " 00 first and never cut, then what teaches most on a GPU")
    parser.add_argument("--build", type=Path, default=BUILD)
    parser.add_argument("--compile-backend", default="inductor",
                        help="for the --compile probe (the tests use eager: seconds, not minutes)")
    parser.add_argument("--offline", type=Path, metavar="WHEELS",
                        help="install the wheels of `make gpu-wheels` into --scratch first")
    parser.add_argument("--scratch", type=Path, default=SCRATCH)
    parser.add_argument("--installed", type=Path, help=argparse.SUPPRESS)  # set by --offline
    args = parser.parse_args(argv)
    if args.budget is not None and args.budget < MIN_BUDGET_S:
        parser.error(f"--budget (BUDGET=) {args.budget:g} s leaves no time for notebook 00 and "
                     f"the probes: give at least {MIN_BUDGET_S} s, or none to run every notebook")
    if args.offline:
        return offline(args, argv)
    if args.installed:
        problems = preflight(args.installed)
        if problems:
            print("the installed wheels do not fit this Python's packages:")
            print("\n".join(f"  {p}" for p in problems))
            return 2
        print(f"preflight: every requirement of {args.installed} is met, nothing shadowed")

    import torch

    import coursekit
    from coursekit.verify import select

    start = time.monotonic()
    deadline = start + (math.inf if args.budget is None else args.budget - MARGIN_S)
    args.build.mkdir(parents=True, exist_ok=True)
    notebooks = start_order(select(ROOT / "notebooks", args.only), args.build, args.budget)
    clear(args.build)
    setup = coursekit.configure(DEVICE=args.device, TIMEOUT_S=min(args.timeout, args.budget
                                                                  or args.timeout),
                                SMOKE=True, RESULTS_DIR=args.build / "probes" / "results",
                                quiet=True)  # fmt: skip
    found, pinned = importlib.metadata.version("torch"), pinned_torch()
    matches = found.split("+")[0] == pinned
    lanes = args.lanes or max(1, min(4, (os.cpu_count() or 1) // 4, len(notebooks)))
    print(f"torch {found} (the course pins {pinned}); tier {setup.tier} "
          f"({', '.join(setup.gpu_names) or 'no GPU'}); {len(notebooks)} notebook(s) in "
          f"{lanes} lane(s), {budget_words(args.budget)}", flush=True)  # fmt: skip

    watch = GpuWatch().start() if setup.device == "cuda" else GpuWatch(sample=lambda: [])
    rows, workers = run_notebooks(notebooks, lanes, setup.device, args.build, args.timeout,
                                  deadline, setup.n_gpus, watch)  # fmt: skip
    probes = run_probes(setup, args.compile_backend)  # meanwhile, in this process
    for w in workers:
        w.join()
    watch.stop()
    rows.sort(key=lambda r: r["notebook"])
    for result in probes.values():
        result["diagnosis"] = diagnose(result.get("error", ""), matches)
    for r in rows:
        r["diagnosis"] = ("" if r["status"] == "cut" else
                          diagnose(f"{r['error']} {r['launch_error']}".strip(), matches))

    ranks = probes["allreduce"].get("metrics", {}).get("world_size")
    if probes["allreduce"].get("backend") == "nccl":
        nccl = f"ran: the all-reduce probe, {ranks} processes"
    elif setup.device == "cuda":
        nccl = (f"not possible with {setup.n_gpus} GPU: NCCL refuses two ranks on one GPU "
                "(the probe's ranks used gloo)")
    else:
        nccl = "not possible: no GPU"
    image = image_cuda_check(torch.version.cuda, matches)
    cut = [r["notebook"] for r in rows if r["status"] == "cut"]
    failures = [r["notebook"] for r in rows if r["status"] not in ("passed", "cut")]
    failures += [f"probe {n}" for n, r in probes.items() if r["status"] != "passed"]
    seconds = time.monotonic() - start
    summary = {
        "torch": found, "torch_pinned": pinned, "torch_matches_pin": matches,
        "cuda": torch.version.cuda, "gpus": setup.gpu_names, "tier": setup.tier,
        "device": setup.device, "lanes": lanes, "budget_s": args.budget, "cut": cut,
        "seconds": round(seconds, 1), "offline": str(args.installed or ""),
        "nccl_between_processes": nccl, "notebooks": rows, "probes": probes,
        "probe_processes": watch.of("this check"),
        "gpu_processes_unattributed": watch.unattributed(), "gpu_record": watch.error or "nvml",
        "image_cuda_tag": image, "failures": failures, "passed": not failures,
    }  # fmt: skip
    path = args.build / "summary.json"
    path.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    print_table(rows)
    for name, r in probes.items():
        error = r.get("error", "")[:90]
        print(f"probe {name:<20} {r['status']:<10} {r['seconds']:7.1f} s  "
              f"{r.get('backend', '')} {error}")  # fmt: skip
    print(f"NCCL between processes: {nccl}")
    if watch.error and setup.device == "cuda":
        print(watch.error)
    print(f"image CUDA tag {image['dockerfile_cuda']} vs torch CUDA {image['torch_cuda']}: "
          f"{image['status']} {image.get('why', '')}")
    print(f"\n{seconds:.0f} s ({budget_words(args.budget)}); summary: {path}")
    if cut:
        print(f"cut by the budget, not failed: {', '.join(cut)} (rerun with --only "
              f"{' '.join(n[:2] for n in cut)}, or with no --budget)")
    print(("all that ran passed" if cut else "all passed") if not failures
          else "FAILED: " + ", ".join(failures))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
