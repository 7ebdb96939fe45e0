"""Each launch once per test session: a launch identical to one that another process already
made replays that one's record instead of starting torchrun again.

Only where ``COURSE_LAUNCH_REPLAY`` names a folder, which the test suite sets for the
notebooks' kernels alone (never a learner, never ``make verify``, never the tests' own
launches, which test the runner and the launchers themselves). Where the suite runs a
notebook again at the same sizes and ranks with other answers (JupyterLab with the reference
answers, papermill with the planted wrong ones), every launch the answers do not change is
the same launch. Identical means: the same command once this run's folders are named
generically, the same bytes in every file or folder it names, in the script's folder and in
``launchers/`` beside it (what it imports), the same ranks and the environment a run depends
on; and the record ended within this launch's limit (or hit the same limit). A process never
replays its own launches: a notebook that launches the same thing twice (to see the spread)
runs it twice. A replay copies the recorded run folder into this run's, shows the same lines
and says so.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from collections import Counter
from pathlib import Path

REPLAY_ENV = "COURSE_LAUNCH_REPLAY"
ORIGIN = uuid.uuid4().hex  # this process: its own launches are never replayed to it
_made: Counter = Counter()  # this process's launches per key: the Nth replays the Nth
# the environment a launch's outcome can depend on (the rest: paths, Jupyter's, the shell's)
RUN_ENV_PREFIXES = ("ATEN_", "OMP_", "MKL_", "KMP_", "TORCH", "PYTORCH_", "NCCL_", "GLOO_",
                    "CUDA_", "MASTER_", "LOGLEVEL")  # fmt: skip
TEXT_SUFFIXES = {".json", ".log", ".txt", ".jsonl", ".csv"}  # may hold the recorded paths


def enabled() -> bool:
    return _folder() is not None


def _folder() -> Path | None:
    folder = os.environ.get(REPLAY_ENV)
    return Path(folder) if folder else None


def _digest_path(h, path: Path) -> None:
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()
                                                 and "__pycache__" not in p.parts)  # fmt: skip
    for file in files:
        h.update(str(file.relative_to(path) if file != path else file.name).encode())
        h.update(hashlib.sha256(file.read_bytes()).digest())


def launch_key(cmd, env: dict, *, run_dir: Path, runs_dir: Path, nproc: int,
               script: str | None) -> str | None:
    """What makes two launches the same launch (see the module's docstring); None for a
    launch that names a folder of the runs outside its own (notebook 11's `--dcp` checkpoint
    folder): what it writes there is not in its record, so it is never replayed."""
    paths = [Path(str(c)) for c in [*cmd, *env.values()] if str(runs_dir) in str(c)]
    if any(not p.is_relative_to(run_dir) for p in paths):
        return None

    def generic(text: str) -> str:
        return text.replace(str(run_dir), "<RUN>").replace(str(runs_dir), "<RUNS>")

    merged = {**os.environ, **env}
    h = hashlib.sha256()
    h.update(json.dumps([[generic(str(c)) for c in cmd], nproc,
                         sorted((k, generic(v)) for k, v in merged.items()
                                if k.startswith(RUN_ENV_PREFIXES))]).encode())  # fmt: skip
    named = [Path(str(c)) for c in [*cmd[1:], *env.values()] if os.sep in str(c)]
    here = Path(script).resolve().parent if script else None  # and what it imports beside it:
    folders = sorted({here, here.parent / "launchers"}) if here else []  # launchers/, common/
    for path in [*named, *folders]:
        if path.exists():
            _digest_path(h, path)
    key = h.hexdigest()[:24]
    _made[key] += 1
    return f"{key}-{_made[key]}"  # a notebook that launches it twice gets two records


def recorded(key: str, timeout_s: float) -> dict | None:
    """The record of an identical launch another process made, or None; one that hit its
    limit counts only for the same limit, one that ended only for a limit it ended within."""
    folder = _folder()
    if folder is None or not (folder / key / "record.json").exists():
        return None
    record = json.loads((folder / key / "record.json").read_text())
    fits = (record["timeout_s"] == timeout_s if record["timed_out"]
            else record["seconds"] < timeout_s)  # fmt: skip
    return record if fits and record["origin"] != ORIGIN else None


def restore(key: str, record: dict, run_dir: Path, runs_dir: Path) -> list:
    """Copy the recorded run folder into ``run_dir`` with its paths renamed; its lines."""
    old_run, old_runs = record["run_dir"], record["runs_dir"]

    def renamed(text: str) -> str:
        return text.replace(old_run, str(run_dir)).replace(old_runs, str(runs_dir))

    shutil.copytree(_folder() / key / "run", run_dir, dirs_exist_ok=True)
    for file in run_dir.rglob("*"):
        if file.suffix in TEXT_SUFFIXES and file.is_file():
            try:
                file.write_text(renamed(file.read_text()))
            except UnicodeDecodeError:
                pass
    return [(rank, renamed(text)) for rank, text in record["lines"]]


def record(key: str, result, runs_dir: Path) -> None:
    """Keep a finished launch for the processes after this one (written whole, then named)."""
    folder = _folder()
    if folder is None or (folder / key).exists():
        return
    scratch = folder / f".{key}.{ORIGIN}"
    shutil.copytree(result.run_dir, scratch / "run")
    fields = {k: getattr(result, k) for k in ("returncode", "seconds", "timed_out", "timeout_s",
                                              "hooked", "asked_where")}  # fmt: skip
    (scratch / "record.json").write_text(json.dumps({
        **fields, "lines": result.lines, "origin": ORIGIN,
        "run_dir": str(result.run_dir), "runs_dir": str(runs_dir)}))  # fmt: skip
    try:
        scratch.rename(folder / key)
    except OSError:  # another process recorded the same launch meanwhile
        shutil.rmtree(scratch, ignore_errors=True)
