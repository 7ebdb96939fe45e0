"""Every exercise in the course follows the one pattern (coursekit/exercises.py):

a learner's cell, ``coursekit.answer(...)``/``coursekit.answer_file(...)``, a check recorded
with ``tasks.check(...)`` or ``tasks.predict(...)``, a reference in solutions/, and a test
module that runs the notebook with the reference (accepted) and with a deliberately wrong
solution (rejected).
The scan picks up every notebook that has exercises; it is itself tested on made-up cases.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest
from conftest import NOTEBOOKS, ROOT
from IPython.core.inputtransformer2 import TransformerManager

import coursekit
from coursekit.progress import progress_table

TESTS = Path(__file__).parent
SOLUTIONS = ROOT / "solutions"
SETENV = re.compile(r"setenv\(\s*(?:\"COURSE_SOLUTIONS\"|'COURSE_SOLUTIONS'|SOLUTIONS_ENV)\s*,"
                    r"\s*([^)]+?)\s*\)")  # fmt: skip


def exercise_calls(notebook: Path) -> list[tuple[str, list[str]]]:
    """(function, literal arguments) of every answer/answer_file call and task record
    (tasks.check/tasks.predict, as "record")."""
    calls = []
    for cell in nbformat.read(notebook, as_version=4).cells:
        if cell.cell_type != "code" or cell.source.lstrip().startswith("%%"):
            continue  # %%writefile cells are launchers, not notebook code
        source = TransformerManager().transform_cell(cell.source)  # %magics -> Python
        for node in ast.walk(ast.parse(source)):
            func = node.func if isinstance(node, ast.Call) else None
            if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                    and func.value.id in ("coursekit", "tasks")):  # fmt: skip
                name = "record" if (func.value.id == "tasks" and func.attr in (
                    "check", "predict")) else func.attr  # a task's verdict (coursekit.Tasks)
                if func.value.id == "tasks" and name != "record":
                    continue
                if name in {"answer", "answer_file", "record"}:
                    literals = [a.value if isinstance(a, ast.Constant) else None
                                for a in node.args]  # positions kept: None where no literal
                    calls.append((name, literals))
    return calls


def exercise_problems(notebook: Path, tests_dir: Path = TESTS,
                      solutions_dir: Path = SOLUTIONS) -> list[str]:  # fmt: skip
    """What is missing for ``notebook``'s exercises to follow the pattern ([] = nothing)."""
    calls = exercise_calls(notebook)
    picks = [(f, args) for f, args in calls if f in {"answer", "answer_file"}]
    if not picks:
        return []
    problems = []
    if not any(f == "record" for f, _ in calls):
        problems.append(f"{notebook.name}: no tasks.check(...) or tasks.predict(...) "
                        "cell checks the answer")
    for f, args in picks:
        if f == "answer":
            if len(args) < 3 or not all(isinstance(a, str) for a in args[1:3]):
                problems.append(f"{notebook.name}: give answer() the notebook stem and the "
                                "name as plain strings")  # fmt: skip
                continue
            stem, name = args[1], args[2]
            path = solutions_dir / f"{stem}.py"
            if not path.exists():
                problems.append(f"{notebook.name}: solutions/{stem}.py is missing")
                continue
            defined = {t.id for node in ast.parse(path.read_text()).body
                       for t in getattr(node, "targets", [])
                       if isinstance(t, ast.Name)}  # fmt: skip
            defined |= {node.name for node in ast.parse(path.read_text()).body
                        if isinstance(node, ast.FunctionDef | ast.ClassDef)}  # fmt: skip
            if name not in defined:
                problems.append(f"{notebook.name}: solutions/{stem}.py does not define {name}")
        else:
            if len(args) < 2 or not isinstance(args[1], str):
                problems.append(f"{notebook.name}: give answer_file() the solution's file name")
                continue
            if not (solutions_dir / args[1]).exists():
                problems.append(f"{notebook.name}: solutions/{args[1]} is missing")
    modules = sorted(tests_dir.glob(f"test_{notebook.stem}.py"))
    text = "\n".join(m.read_text() for m in modules)
    values = SETENV.findall(text)
    if not any(v.strip() in {'"1"', "'1'"} for v in values):
        problems.append(f"{notebook.name}: no test runs it with COURSE_SOLUTIONS=1 "
                        "(the reference must be accepted)")  # fmt: skip
    if not any(v.strip() not in {'"1"', "'1'"} for v in values):
        problems.append(f"{notebook.name}: no test runs it with a wrong solution folder "
                        "(a wrong answer must be rejected)")  # fmt: skip
    if "is True" not in text or "is False" not in text:
        problems.append(f"{notebook.name}: its tests must assert the check accepted (is True) "
                        "and rejected (is False)")  # fmt: skip
    return problems


WITH_EXERCISES = [nb for nb in NOTEBOOKS if exercise_calls(nb)]


@pytest.mark.parametrize("notebook", WITH_EXERCISES, ids=lambda p: p.stem)
def test_every_exercise_follows_the_pattern(notebook):
    assert exercise_problems(notebook) == []


def test_every_reference_solution_belongs_to_an_exercise():
    used = set()
    for nb in NOTEBOOKS:
        for f, args in exercise_calls(nb):
            if f == "answer" and len(args) >= 2 and isinstance(args[1], str):
                used.add(f"{args[1]}.py")
            elif f == "answer_file" and len(args) >= 2 and isinstance(args[1], str):
                used.add(args[1])
    orphans = sorted(p.name for p in SOLUTIONS.glob("*.py") if p.name not in used)
    assert orphans == [], f"solutions no notebook uses: {orphans}"


# the scan itself, on a made-up notebook and made-up tests

LEARNER = 'my_bytes = 0  # your answer'
PICK = 'answer = coursekit.answer(my_bytes, "42_demo", "device0_bytes")'
CHECK = 'tasks.check("device0_bytes", answer == 8, "right", "wrong")'
GOOD_TEST = '''
def test_reference(monkeypatch, tmp_path):
    monkeypatch.setenv("COURSE_SOLUTIONS", "1")
    assert execute_notebook("42", tmp_path)["exercise_passed"] is True

def test_wrong(monkeypatch, tmp_path):
    monkeypatch.setenv("COURSE_SOLUTIONS", str(WRONG))
    assert execute_notebook("42", tmp_path)["exercise_passed"] is False
'''


def make_course(tmp_path, cells, test_text=GOOD_TEST, solution="device0_bytes = 8\n"):
    nb = tmp_path / "notebooks" / "42_demo.ipynb"
    nb.parent.mkdir()
    nbformat.write(nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(c) for c in cells]), nb)  # fmt: skip
    (tmp_path / "solutions").mkdir()
    if solution is not None:
        (tmp_path / "solutions" / "42_demo.py").write_text(solution)
    tests = tmp_path / "tests"
    (tests / "wrong_solutions").mkdir(parents=True)
    (tests / "test_42_demo.py").write_text(test_text)
    (tests / "wrong_solutions" / "42_demo.py").write_text("device0_bytes = 4\n")
    return nb, tests, tmp_path / "solutions"


def test_scan_accepts_a_complete_exercise(tmp_path):
    assert exercise_problems(*make_course(tmp_path, [LEARNER, PICK, CHECK])) == []


@pytest.mark.parametrize("change, message", [
    ({"cells": [LEARNER, PICK]}, "no tasks.check(...) or tasks.predict(...)"),
    ({"solution": None}, "solutions/42_demo.py is missing"),
    ({"solution": "other = 1\n"}, "does not define device0_bytes"),
    ({"test_text": GOOD_TEST.split("def test_wrong")[0]}, "with a wrong solution folder"),
    ({"test_text": GOOD_TEST.split("def test_wrong")[1]}, "with COURSE_SOLUTIONS=1"),
])  # fmt: skip
def test_scan_names_what_is_missing(tmp_path, change, message):
    kwargs = {"cells": [LEARNER, PICK, CHECK], **change}
    problems = exercise_problems(*make_course(tmp_path, **kwargs))
    assert any(message in p for p in problems), problems


# tasks: predict-then-measure and write-it, their outcomes in the results and make progress


def test_a_prediction_is_right_inside_the_runs_spread_and_says_how_far_off_outside(capsys):
    tasks = coursekit.Tasks()
    assert tasks.predict("all-reduces", 24, 24) is True
    assert tasks.predict("step ms", 30.0, 25.0, low=21.0, high=33.0, unit=" ms") is True
    assert tasks.predict("bytes", 8, 24, why="each rank sends 2(p-1)/p of it") is False
    assert tasks.predict("which rank hangs", "rank 1", "rank 0") is False
    assert tasks.predict("bubble", None, 0.33) is False
    shown = capsys.readouterr().out
    assert "RIGHT (all-reduces): you predicted 24, the run measured 24" in shown
    assert "the run's range 21 to 33 ms" in shown
    assert "NOT YET (bytes): you predicted 8, the run measured 24: 0.33x the measurement. each " \
           "rank sends 2(p-1)/p of it." in shown
    assert "(no prediction for bubble: the run measured 0.33)" in shown
    # a choice is said once, with what decides it when given
    assert "NOT YET (which rank hangs): you predicted rank 1, the run measured rank 0.\n" \
        in shown and shown.count("rank 1") == 1
    assert [r["outcome"] for r in tasks.records] == ["solved", "solved", "not yet", "not yet",
                                                      "not tried"]  # fmt: skip


def test_a_prediction_is_judged_as_written_not_as_typed():
    """Case, spacing, a list for a tuple: the same answer (09's indices, 08's places)."""
    tasks = coursekit.Tasks()
    assert tasks.predict("places", ["Forward ", "backward"], ("forward", "backward")) is True
    assert tasks.predict("indices", (8, 9), [8, 9]) is True
    assert tasks.predict("shares", {"Rank 0": [0, 2]}, {"rank 0": (0, 2)}) is True
    assert tasks.predict("places", ("forward", "forward"), ("forward", "backward")) is False
    assert tasks.predict("equal", "True", True) is False  # a bool is not its name


def test_a_check_runs_again_and_keeps_the_latest_verdict(setup, capsys):
    """The attendee's loop: NOT YET, fix, run the same check again, RIGHT; no restart."""
    tasks = coursekit.Tasks()
    tasks.check("ring", None, "", "write ring_all_reduce() above, then run this cell")
    tasks.predict("bubble", 0.9, 0.33, within=0.1)
    tasks.check("ring", False, "it sums", "rank 1 holds 3, one process 6: a chunk was dropped")
    assert tasks.check("ring", True, "it sums like dist.all_reduce", "") is True
    tasks.predict("bubble", 0.33, 0.33, within=0.1)
    shown = capsys.readouterr().out
    assert shown.index("NOT YET (ring)") < shown.index("RIGHT (ring)")
    assert [(r["name"], r["outcome"]) for r in tasks.records] == [("ring", "solved"),
                                                                   ("bubble", "solved")]
    assert tasks.summary() == {"solved": 2, "not yet": 0, "not tried": 0}


def test_hints_work_before_the_check_one_at_a_time(capsys):
    tasks = coursekit.Tasks()  # a fresh kernel: no check has run
    hints = coursekit.exercises.course_hints()["ring_all_reduce"]
    tasks.hint("ring_all_reduce")
    tasks.hint("ring_all_reduce")
    tasks.hint("ring_all_reduce")  # past the last: the last again
    tasks.hint("ring_all_reduce", 1)
    shown = capsys.readouterr().out.splitlines()
    assert shown[0] == f"hint 1 of 2 (ring_all_reduce); run it again for hint 2: {hints[0]}"
    assert shown[1] == f"hint 2 of 2 (ring_all_reduce) (the last one): {hints[1]}"
    assert shown[2] == shown[1] and shown[3] == shown[0]
    with pytest.raises(ValueError, match=r"it has 2 hint\(s\), ask for 1 to 2"):
        tasks.hint("ring_all_reduce", 3)
    with pytest.raises(ValueError, match="no task of that name has hints.*ring_all_reduce"):
        tasks.hint("ring")


def test_every_hint_a_notebook_names_exists_and_none_stands_in_a_cell():
    """The texts say `tasks.hint("x", 1)`: x has hints in solutions/hints.yaml, and no cell
    holds a hint's text (the last hint is close to the answer)."""
    hints = coursekit.exercises.course_hints()
    named, sources = set(), []
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            named.update(re.findall(r"tasks\.hint\(\\?\"(\w+)", cell.source))
            sources.append(cell.source)
    assert named and named <= set(hints), sorted(named - set(hints))
    text = "\n".join(sources)
    assert not [h for hs in hints.values() for h in hs if h[:60] in text]


def test_written_tasks_and_the_progress_table(setup, capsys):
    tasks = coursekit.Tasks()
    tasks.check("ring", False, "it sums", "rank 1 holds 3, one process 6: a chunk was dropped")
    tasks.check("atomic save", None, "", "write save_checkpoint() above, then run this cell")
    shown = capsys.readouterr().out
    assert "NOT YET (ring): rank 1 holds 3, one process 6: a chunk was dropped" in shown
    coursekit.save_results("04_a_real_ddp_training_loop", {}, setup, tasks=tasks)
    table = progress_table(setup.results_dir)
    assert table.startswith("0 of 2 tasks solved, 1 not yet, 1 not tried")
    assert "| 04_a_real_ddp_training_loop | ring | write | ✘ not yet |" in table
    assert "| 00_environment_check | (not run yet) | | |" in table
