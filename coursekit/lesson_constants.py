"""A lesson's numbers, each defined once: the notebook's constants and where they live.

A lesson constant (a size, a cap, a count, the model's shape) is an upper-case name bound by
a notebook's code cell: the ``parameters`` cell's are the course's parameters (``DEVICE``,
``NPROC``, ...), the others the lesson's own. It is bound in one cell; launchers take it as a
flag with no default of their own (``--bucket-caps``), the lesson module
(coursekit/lessons/nbNN.py) receives it as an argument, and a printed line, not the markdown,
states its value. :func:`constants_table` lists them for CONTRIBUTING.md (scripts/readme.py);
:func:`bound_twice` finds a name bound in two cells, or in a cell and the lesson module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
LESSONS = ROOT / "coursekit" / "lessons"
PARAMETERS = ("DEVICE", "NPROC", "SMOKE", "TIMEOUT_S", "RESULTS_DIR")  # DESIGN.md's, everywhere


def _is_alias(statement: ast.stmt) -> bool:
    """``X = lesson.X``: the notebook names its lesson module's constant, no second definition."""
    return (isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Attribute)
            and ast.unparse(statement.value.value) == "lesson"
            and [ast.unparse(t) for t in statement.targets] == [statement.value.attr])


def _bound(tree: ast.Module) -> list[str]:
    """The upper-case names a module's top-level statements bind (not aliases)."""
    names = []
    for statement in tree.body:
        if _is_alias(statement):
            continue
        targets = (statement.targets if isinstance(statement, ast.Assign)
                   else [statement.target] if isinstance(statement, ast.AnnAssign) else [])
        for target in targets:
            names += [n.id for n in ast.walk(target)
                      if isinstance(n, ast.Name) and n.id.isupper() and len(n.id) > 1]
    return names


def cell_tree(source: str) -> ast.Module | None:
    """A code cell's Python (IPython's % and ! lines left out); None for a %%writefile cell."""
    if source.startswith("%%"):
        return None
    return ast.parse("\n".join(line for line in source.splitlines()
                               if not line.lstrip().startswith(("%", "!"))))  # fmt: skip


def notebook_constants(notebook: Path) -> dict[str, list[int]]:
    """Each lesson constant of ``notebook`` -> the code cells (indices) that bind it."""
    found: dict[str, list[int]] = {}
    for k, cell in enumerate(nbformat.read(notebook, as_version=4).cells):
        tree = cell_tree(cell.source) if cell.cell_type == "code" else None
        for name in _bound(tree) if tree else []:
            if name not in PARAMETERS and k not in found.setdefault(name, []):
                found[name].append(k)
    return found


def from_lesson_module(notebook: Path) -> list[str]:
    """The constants ``notebook`` takes from its lesson module (``X = lesson.X``)."""
    names = []
    for cell in nbformat.read(notebook, as_version=4).cells:
        tree = cell_tree(cell.source) if cell.cell_type == "code" else None
        names += [s.value.attr for s in (tree.body if tree else []) if _is_alias(s)]
    return names


def bound_twice(notebook: Path) -> list[str]:
    """Where ``notebook`` binds a lesson constant twice: in two cells, or in a cell and its
    lesson module (a second definition that can drift from the first)."""
    lesson = LESSONS / f"nb{notebook.name[:2]}.py"
    in_module = set(_bound(ast.parse(lesson.read_text()))) if lesson.exists() else set()
    said = []
    for name, cells in notebook_constants(notebook).items():
        if len(cells) > 1:
            said.append(f"{notebook.stem}: {name} is bound in cells {cells}")
        if name in in_module:
            said.append(f"{notebook.stem}: {name} is bound in cell {cells[0]} and in "
                        f"{lesson.relative_to(ROOT)}")  # fmt: skip
    return said


def constants_table() -> str:
    """CONTRIBUTING.md's list: per notebook, its lesson constants and the cell binding each."""
    lines = ["| notebook | its constants (the code cell that binds them, counted from 0) | from "
             "coursekit/lessons/nbNN.py |", "|---|---|---|"]
    for notebook in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        by_cell: dict[int, list[str]] = {}
        for name, cells in notebook_constants(notebook).items():
            by_cell.setdefault(cells[0], []).append(f"`{name}`")
        said = "; ".join(f"cell {k}: {', '.join(names)}" for k, names in sorted(by_cell.items()))
        module = ", ".join(f"`{name}`" for name in from_lesson_module(notebook)) or "-"
        lines.append(f"| {notebook.stem} | {said or 'none beyond the parameters'} | {module} |")
    return "\n".join(lines)


def constant_values(notebook: Path, *names: str) -> dict[str, object]:
    """The values of lesson constants that ``notebook`` binds to literals (a test reads the
    lesson's numbers where the lesson sets them, instead of restating them)."""
    wanted, found = set(names), {}
    for cell in nbformat.read(notebook, as_version=4).cells:
        tree = cell_tree(cell.source) if cell.cell_type == "code" else None
        for statement in tree.body if tree else []:
            if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
                continue
            target = statement.targets[0]
            names_here = ([target] if isinstance(target, ast.Name) else
                          target.elts if isinstance(target, ast.Tuple) else [])  # fmt: skip
            value = ast.literal_eval(statement.value) if any(
                isinstance(n, ast.Name) and n.id in wanted for n in names_here) else None
            for k, n in enumerate(names_here):
                if isinstance(n, ast.Name) and n.id in wanted:
                    found[n.id] = value[k] if isinstance(target, ast.Tuple) else value
    missing = wanted - set(found)
    if missing:
        raise KeyError(f"{notebook.name} binds no literal {', '.join(sorted(missing))}")
    return found
