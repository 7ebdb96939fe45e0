"""The checks of the learner's tasks, taken from the notebooks themselves.

A code cell tagged ``task-check`` defines a task's check as a plain function,
``check_<task>(candidate, ...) -> (ok, message)``: self-contained (its own imports, nothing
from earlier cells), so the lesson's check stays in the notebook where the learner reads it,
and the tests can run it on every planted wrong answer of the task's catalogue without
running the notebook (tests/solutions_wrong/<catalogue>/).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import nbformat
from conftest import notebook_path

TAG = "task-check"


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
