"""make test's table of where its time went, and the README's figures of a whole .ci/run."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import NOTEBOOKS, ROOT
from time_table import part_of

CI_TIMES = ROOT / "scripts" / "ci_times.py"


@pytest.mark.parametrize("nodeid, part", [
    ("tests/test_browser.py::test_x[03]", "browser"),
    ("tests/test_container.py::test_x", "container"),
    ("tests/test_docker.py::test_x", "container"),
    ("tests/test_04_a_real_ddp_training_loop.py::test_x[2]", "notebooks"),
    ("tests/test_notebooks.py::test_x", "notebooks"),
    ("tests/test_ranks.py::test_x", "live ranks"),
    ("tests/test_exercises.py::test_x", "the rest"),
    ("tests/test_launchers.py::test_x[a-1ranks]", "launchers"),
    ("tests/test_slurm.py::test_x", "slurm"),
    ("tests/test_runner.py::test_x", "the rest"),
    ("tests/test_4.py::test_x", "the rest"),
])  # fmt: skip
def test_every_module_counts_for_one_part(nodeid, part):
    assert part_of(nodeid) == part


def test_a_suite_ends_with_the_table_and_writes_it(tmp_path):
    """A small suite of its own, with the course's plugin: a test module per part it names."""
    (tmp_path / "conftest.py").write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT / "tests")!r})
        import time_table
        def pytest_configure(config):
            time_table.register(config)
    """))  # fmt: skip
    (tmp_path / "test_browser.py").write_text("import time\ndef test_a():\n    time.sleep(0.3)\n")
    (tmp_path / "test_runner.py").write_text("def test_b():\n    pass\ndef test_c():\n    pass\n")
    times = tmp_path / "times.json"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COURSE_TEST_TIMES": str(times)})  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "where the time went" in proc.stdout
    rows = {r["part"]: r for r in json.loads(times.read_text())["parts"]}
    assert {p: r["tests"] for p, r in rows.items()} == {"browser": 1, "the rest": 2}
    assert rows["browser"]["seconds"] >= 0.3 > rows["the rest"]["seconds"]
    slowest = json.loads(times.read_text())["slowest"]  # every test here, the slowest first
    assert [(t["test"].split("::")[-1], t["part"]) for t in slowest][0] == ("test_a", "browser")
    assert len(slowest) == 3 and slowest[0]["seconds"] >= 0.3
    table = proc.stdout[proc.stdout.index("where the time went"):]
    assert "browser" in table and "the rest" in table and "all" in table


def test_ci_record_takes_the_stages_and_the_tests_table(tmp_path):
    times, record = tmp_path / "test-times.json", tmp_path / "ci-times.json"
    parts = [{"part": "browser", "tests": 16, "seconds": 12.5}]
    slowest = [{"test": f"tests/test_browser.py::test_{i}", "part": "browser", "seconds": 40 - i}
               for i in range(40)]  # fmt: skip
    times.write_text(json.dumps({"wall_seconds": 20, "parts": parts, "slowest": slowest}))
    proc = subprocess.run([sys.executable, str(CI_TIMES), "record", "--setup", "3", "--test", "20",
                           "--verify", "40"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "COURSE_TEST_TIMES": str(times),
                               "COURSE_CI_TIMES": str(record)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(record.read_text())
    assert figures["stages"] == {"setup": 3, "make test": 20, "make verify": 40}
    assert figures["test_parts"] == parts and len(figures["commit"]) == 40
    assert figures["slowest_tests"] == slowest[:30]  # the record keeps the 30 slowest
    assert "63 s in all" in proc.stdout


def test_the_readme_shows_the_last_fresh_clone_figures_as_recorded():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "readme.py"), "--check"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr


def test_the_last_fresh_clone_record_times_every_notebook():
    """The class budgets and docs/instructors.md's table read each notebook's full-size verify
    seconds from the record: a notebook without them would get a budget with no running time."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from ci_times import LAST_FRESH_CLONE, verify_seconds

    timed = verify_seconds()
    untimed = [nb.stem for nb in NOTEBOOKS if nb.name[:2] not in timed]
    assert not untimed, (
        f"{LAST_FRESH_CLONE.relative_to(ROOT)} has no passed full-size verify of {untimed}: run "
        ".ci/run from a fresh clone on an idle machine, copy its build/ci-times.json there and "
        "run scripts/readme.py")
