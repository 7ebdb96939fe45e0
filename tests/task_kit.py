"""The checks of the learner's tasks, taken from the notebooks themselves.

A code cell tagged ``task-check`` defines a task's check as a plain function,
``check_<task>(candidate, ...) -> (ok, message)``: self-contained (its own imports, nothing
from earlier cells), so the lesson's check stays in the notebook where the learner reads it,
and the tests can run it on every planted wrong answer of the task's catalogue without
running the notebook. A catalogue, tests/planted/<catalogue>.py, holds each planted
mistake as edits of the reference (planted() writes them as files).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

import nbformat
from conftest import ROOT, notebook_path

import coursekit

TAG = "task-check"
PLANTED = ROOT / "tests" / "planted"  # the catalogues of planted mistakes


def task_checks(stem_prefix: str) -> dict:
    """name -> function: every ``check_*`` the notebook's ``task-check`` cells define."""
    namespace: dict = {"__name__": f"task_checks_{stem_prefix}"}
    cells = [c for c in nbformat.read(notebook_path(stem_prefix), as_version=4).cells
             if c.cell_type == "code" and TAG in c.metadata.get("tags", [])]  # fmt: skip
    assert cells, f"notebook {stem_prefix} has no cell tagged {TAG!r}"
    for cell in cells:
        exec(compile(cell.source, f"<{stem_prefix} task-check>", "exec"), namespace)
    return {k: v for k, v in namespace.items() if k.startswith("check_") and callable(v)}


def load_module(path: Path):
    """A planted wrong answer (or a reference) as a module: its functions to check."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def edited(text: str, edits, where: str) -> str:
    """text with each (old, new) of edits applied in turn, each old found exactly once in the
    text so far (where names the catalogue and the mistake in the error)."""
    for i, (old, new) in enumerate(edits):
        found = text.count(old)
        if found != 1:
            raise AssertionError(f"{where}, edit {i}: its old text is found {found} times, not "
                                 f"once: {old[:80]!r}")
        text = text.replace(old, new)
    return text


def mistakes(catalogue: str) -> dict[str, str]:
    """name -> text of every planted mistake of the catalogue (see planted)."""
    table = load_module(PLANTED / f"{catalogue}.py")
    reference = (ROOT / table.REFERENCE).read_text(encoding="utf-8")
    base = edited(reference, getattr(table, "SHARED", []), f"{catalogue}: SHARED")
    return {name: edited(base, edits, f"{catalogue}: {name}")
            for name, edits in table.MISTAKES.items()}  # fmt: skip


def wrong_answers(notebook: str, into: Path, launchers: dict[str, tuple[str, str]]) -> Path:
    """A notebook's wrong answers (COURSE_SOLUTIONS) in ``into``: a copy of
    tests/solutions_wrong/<notebook>, and each launcher file name -> (catalogue, mistake)
    written from its catalogue (a planted mistake, not a copy of the whole file)."""
    shutil.copytree(ROOT / "tests" / "solutions_wrong" / notebook, into)
    for name, (catalogue, mistake) in launchers.items():
        (into / name).write_text(mistakes(catalogue)[mistake], encoding="utf-8")
    return into


def planted(catalogue: str, folder: Path) -> dict[str, Path]:
    """Write every planted mistake of tests/planted/<catalogue>.py as folder/<name>.py:
    name -> its file, in the catalogue's order.

    A catalogue holds REFERENCE (the file the mistakes are planted in, from the repository's
    root), SHARED if every mistake makes the same edits first, and MISTAKES = {name: [(old,
    new), ...]}: each mistake is the reference with SHARED's edits, then its own, in turn, each
    old found exactly once in the text so far.
    """
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for name, text in mistakes(catalogue).items():
        files[name] = folder / f"{name}.py"
        files[name].write_text(text, encoding="utf-8")
    return files


def solved(results):
    """Task name -> its outcome in the run."""
    return {t["name"]: t["outcome"] for t in results["tasks"]}


DRIVER = '''"""Run launchers one after the other in ONE torchrun launch (a task's catalogue).

Each runs as __main__ on every rank, in a process group of its own (a fresh store on a port rank
0 picks and shares through torchrun's store); its stdout is kept, and how it ended (its error, its
innermost frame in its own file) goes to OUT/<i>/facts<rank>.json.
"""

import argparse
import contextlib
import gc
import io
import json
import os
import runpy
import socket
import sys
import time
import traceback
from datetime import timedelta

import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("scripts", nargs="+")
parser.add_argument("--pg-timeout", default="5")
parser.add_argument("--device", default="cpu")
parser.add_argument("--out", required=True)
args = parser.parse_args()
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
agent = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, False,
                      timeout=timedelta(seconds=120))
os.environ.update(TORCHELASTIC_USE_AGENT_STORE="False", MASTER_ADDR="127.0.0.1")
for i, script in enumerate(map(os.path.abspath, args.scripts)):
    if rank == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            agent.set(f"port{i}", str(s.getsockname()[1]))
    os.environ["MASTER_PORT"] = agent.get(f"port{i}").decode()
    agent.add(f"ready{i}", 1)
    while agent.add(f"ready{i}", 0) < world:  # together: each group's store waits pg-timeout
        time.sleep(0.05)
    out = os.path.join(args.out, str(i))
    sys.argv = [script, "--pg-timeout", args.pg_timeout, "--device", args.device, "--out", out]
    stdout, error, where = io.StringIO(), "", ""
    try:
        with contextlib.redirect_stdout(stdout):
            runpy.run_path(script, run_name="__main__")
    except BaseException as e:  # noqa: BLE001 - how the launcher ended is the fact kept
        if not (isinstance(e, SystemExit) and e.code in (0, None)):
            error = (f"{type(e).__name__}: {e}".splitlines() or [""])[0]
            mine = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == script]
            if mine:
                where = f"line {mine[-1].lineno} in {mine[-1].name}: {mine[-1].line}"
    gc.collect()  # its DDP object goes before its process group
    if dist.is_initialized():
        dist.destroy_process_group()
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"facts{rank}.json"), "w") as f:
        json.dump({"lines": stdout.getvalue().splitlines(), "error": error, "where": where}, f)
    print(f"{os.path.basename(script)}: {error[:80] or 'finished'}", flush=True)
'''


def facts_of_each(scripts, setup, tmp_path, nproc=2):
    """Run every launcher of ``scripts`` in turn, in one torchrun launch (DRIVER), with a 5 s
    collective timeout: each one's facts, as the notebooks' checks read them from a run of
    their own (finished, rank 0's metrics.json, each rank's lines, error and place)."""
    driver = tmp_path / "run_each.py"
    driver.write_text(DRIVER)
    path = os.pathsep.join([str(ROOT / "launchers"), os.environ.get("PYTHONPATH", "")])
    run = coursekit.run_launcher(driver, [str(s) for s in scripts], setup=setup, nproc=nproc,
                                 name="catalogue", echo=False, timeout_s=60 + 30 * len(scripts),
                                 env={"PYTHONPATH": path})  # fmt: skip
    facts = []
    for i in range(len(scripts)):
        out = run.out_dir / str(i)
        ranks = [json.loads((out / f"facts{r}.json").read_text()) for r in range(nproc)]
        finished = not any(r["error"] for r in ranks)
        metrics = finished and json.loads((out / "metrics.json").read_text())
        facts.append({"finished": finished, "metrics": metrics, "ranks": ranks})
    return facts
