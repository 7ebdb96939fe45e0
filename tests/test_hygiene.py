"""Notebooks are committed clean, share the parameters contract, and everything lints."""

import ast
import importlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from conftest import NOTEBOOKS, ROOT

from coursekit.cells import (
    LONG_CELL_LINES,
    MAX_OUTPUT_LINES,
    is_collapsed,
    is_long_writefile,
    show_call,
    shown_lines,
)
from coursekit.screen import MAX_BOOKKEEPING_SHARE, report, screen

CONTRACT = {"DEVICE", "NPROC", "SMOKE", "TIMEOUT_S", "RESULTS_DIR"}


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_clean(notebook):
    nb = nbformat.read(notebook, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.kernelspec.name == "python3"
    assert "papermill" not in nb.metadata
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), "outputs committed"
    tags = [t for c in nb.cells for t in c.metadata.get("tags", [])]
    assert tags.count("parameters") == 1
    assert "injected-parameters" not in tags


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_parameters_cell_follows_the_contract(notebook):
    nb = nbformat.read(notebook, as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    assigned = {t.id for node in ast.parse(cell.source).body for t in node.targets}
    assert assigned == CONTRACT
    # the results file is named after the notebook: its lesson module (coursekit/lessons/nbNN.py)
    # writes it under STEM
    module = ROOT / "coursekit" / "lessons" / f"nb{notebook.stem[:2]}.py"
    source = "".join(c.source for c in nb.cells)
    assert f"from coursekit.lessons import nb{notebook.stem[:2]} as lesson" in source
    assert f'STEM = "{notebook.stem}"' in module.read_text()
    assert "save_results(STEM," in module.read_text()


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_launchers_common_is_imported_only_after_configure(notebook):
    """`coursekit.configure` puts launchers/ on the kernel's path: a cell before it that imports
    `common` (or `nbNN`) works under papermill's runs from the course folder but not in
    JupyterLab."""
    code = [c.source for c in nb_cells(notebook) if c.cell_type == "code"]
    first = next(i for i, s in enumerate(code) if "coursekit.configure(" in s)
    early = [s.splitlines()[0] for s in code[:first]
             if re.search(r"^\s*(from|import)\s+(common|nb\d\d|coursekit\.memory)\b", s, re.M)]
    assert not early, f"{notebook.name}: cells that import common before configure: {early}"


def nb_cells(notebook):
    return nbformat.read(notebook, as_version=4).cells


def test_notebooks_are_numbered_in_order():
    numbers = [int(nb.name[:2]) for nb in NOTEBOOKS]
    assert numbers == sorted(set(numbers))


def test_ruff_is_clean():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent))
    proc = subprocess.run([ruff, "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # ruff does lint the notebooks, cells and all (except %%writefile cells: see test_launchers)
    listed = subprocess.run([ruff, "check", "--show-files", "."], cwd=ROOT, capture_output=True,
                            text=True).stdout
    assert all(nb.name in listed for nb in NOTEBOOKS)


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_long_launchers_are_collapsed_with_their_diff_in_view(notebook):
    """A %%writefile cell whose file runs over LONG_CELL_LINES lines is collapsed in JupyterLab,
    and the next cell is one coursekit.show_diff/show_functions/show_outline call about the file
    it writes, whose output (computed here from the launcher files) fits MAX_OUTPUT_LINES. A
    shorter one is open: its lines are the lesson (coursekit/screen.py counts which launchers
    have their lesson lines on screen)."""
    cells = nbformat.read(notebook, as_version=4).cells
    problems = []
    for i, cell in enumerate(cells):
        if cell.cell_type == "code" and cell.source.startswith("%%writefile ") \
                and not is_long_writefile(cell) and is_collapsed(cell):
            problems.append(f"cell {i}: a launcher of {LONG_CELL_LINES} lines or fewer is "
                            "collapsed: open it, its lines are the lesson")
        if not is_long_writefile(cell):
            continue
        written = cell.source.splitlines()[0].split()[-1]  # %%writefile [-a] PATH
        where = f"cell {i} ({written})"
        if not is_collapsed(cell):
            problems.append(f"{where}: not collapsed (metadata jupyter.source_hidden)")
        after = cells[i + 1] if i + 1 < len(cells) else None
        call = show_call(after.source) if after and after.cell_type == "code" else None
        if call is None:
            problems.append(f"{where}: the next cell is not one coursekit.show_diff(old, new), "
                            "show_functions(path, name, ...) or show_outline(path) call")
            continue
        name, args = call
        if (args[-1] if name == "show_diff" else args[0]) != written:
            problems.append(f"{where}: the {name} after it is about {args[-1]}")
        shown = shown_lines(after.source, notebook.parent)
        if len(shown) > MAX_OUTPUT_LINES:
            problems.append(f"{where}: its {name} shows {len(shown)} lines (at most "
                            f"{MAX_OUTPUT_LINES}: show_outline, or a smaller step)")  # fmt: skip
    assert not problems, "\n".join(problems)


def test_the_learners_screen_shows_the_lesson():
    """make screen's goals (coursekit/screen.py): the calls of the claims, tasks and results
    bookkeeping at most 8 % of the visible code lines, no visible cell over 30 lines, and every
    launcher's lesson lines on screen (its cell open, or its diff or functions printed below)."""
    screens = [screen(nb) for nb in NOTEBOOKS]
    visible = sum(s.visible_lines for s in screens)
    share = sum(s.bookkeeping for s in screens) / visible
    assert share <= MAX_BOOKKEEPING_SHARE, report(screens)
    assert not [s.long_cells for s in screens if s.long_cells], report(screens)
    assert not [s.hidden_launchers for s in screens if s.hidden_launchers], report(screens)
    assert all(s.share <= 2 * MAX_BOOKKEEPING_SHARE for s in screens), report(screens)


def test_the_screen_counts_bookkeeping_long_cells_and_hidden_launchers(tmp_path):
    """The instrument itself, on a made-up notebook."""
    launcher = "%%writefile ../launchers/x.py\n" + "x = 1\n" * 70
    cells = [nbformat.v4.new_code_cell("claims.check('a', 'b > 1', b=2)\nx = 1"),
             nbformat.v4.new_code_cell("\n".join(["y = 2"] * 31)),
             nbformat.v4.new_code_cell(launcher, metadata={"jupyter": {"source_hidden": True}}),
             nbformat.v4.new_code_cell('coursekit.show_outline("../launchers/x.py")')]
    path = tmp_path / "99_made_up.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    seen = screen(path)
    assert (seen.visible_lines, seen.bookkeeping) == (34, 1)
    assert seen.long_cells == [(1, 31)] and seen.hidden_launchers == [(2, "../launchers/x.py")]
    cells[3].source = 'coursekit.show_lines("../launchers/x.py", "x = 1", "x = 1")'
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    assert screen(path).hidden_launchers == []


DOCUMENTS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "docker" / "README.md",
             *sorted((ROOT / "docs").glob("*.md"))]  # fmt: skip
CODE_NAME = re.compile(r"`(coursekit(?:\.[A-Za-z_]\w*)+)(?![\w*])")  # `coursekit.x.y`, not `x_*`
FILE_NAME = re.compile(r"`((?:coursekit|launchers|scripts|tests|solutions|notebooks|docker|docs)"
                       r"/[\w./-]+)`")  # fmt: skip


def resolves(dotted: str) -> bool:
    """A module, or a module's attribute chain (coursekit.Tasks.predict)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_the_docs_name_no_function_or_file_the_code_lacks():
    missing = []
    for doc in DOCUMENTS:
        text = doc.read_text()
        missing += [f"{doc.name}: {m}" for m in CODE_NAME.findall(text) if not resolves(m)]
        missing += [f"{doc.name}: {p}" for p in FILE_NAME.findall(text)
                    if "NN" not in p and not (ROOT / p.rstrip(".")).exists()]  # NN: a pattern
    assert not missing, missing


def test_each_lesson_constant_is_bound_once():
    """A lesson's number lives in one place: one cell of its notebook, or its lesson module
    named in the notebook as ``X = lesson.X`` (CONTRIBUTING.md, "A lesson's numbers, once")."""
    from coursekit.lesson_constants import bound_twice

    found = [said for nb in NOTEBOOKS for said in bound_twice(nb)]
    assert not found, "\n".join(found)


def test_a_second_binding_of_a_lesson_constant_is_named(tmp_path, monkeypatch):
    from coursekit import lesson_constants

    (tmp_path / "lessons").mkdir()
    (tmp_path / "lessons" / "nb99.py").write_text('CAPS = (1, 2)\nSTRATEGIES = ("a", "b")\n')
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("SMOKE = False\nWIDTH, DEPTH = 8, 2"),
                nbformat.v4.new_code_cell("STRATEGIES = lesson.STRATEGIES\nCAPS = (1, 2)"),
                nbformat.v4.new_code_cell("%%writefile x.py\nWIDTH = 3"),
                nbformat.v4.new_code_cell("WIDTH = 16  # a second definition")]
    path = tmp_path / "99_made_up.ipynb"
    nbformat.write(nb, path)
    monkeypatch.setattr(lesson_constants, "LESSONS", tmp_path / "lessons")
    monkeypatch.setattr(lesson_constants, "ROOT", tmp_path)
    assert lesson_constants.bound_twice(path) == [
        "99_made_up: WIDTH is bound in cells [0, 3]",
        "99_made_up: CAPS is bound in cell 1 and in lessons/nb99.py"]
    assert lesson_constants.from_lesson_module(path) == ["STRATEGIES"]
    assert lesson_constants.constant_values(path, "WIDTH", "DEPTH", "CAPS") == {
        "WIDTH": 16, "DEPTH": 2, "CAPS": (1, 2)}
