"""The instructor's HTML report that the verify command writes, read as a file and in a browser.

One verify run over a copy of the course plus two planted notebooks: 00 passes (with its
plot), 98 passes with a claim that does not hold, 99 fails in a known cell, and every other
notebook is listed as not run.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys

import nbformat
import pytest
from browser_kit import artifacts_dir, launch_browser, sync_playwright
from conftest import NOTEBOOKS, ROOT

from coursekit.report import (
    AFTER_CLASS,
    FUNCTION_TASK_MIN,
    LAUNCHER_TASK_MIN,
    PREDICT_MIN,
    class_minutes,
)

_spec = importlib.util.spec_from_file_location("ci_times", ROOT / "scripts" / "ci_times.py")
ci_times = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ci_times)  # the last fresh-clone record's verify seconds

KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}
PARAMETERS = 'DEVICE = "auto"\nNPROC = None\nSMOKE = False\nTIMEOUT_S = 300\nRESULTS_DIR = "r"'


CLAIM_NOT_HELD = """import coursekit
setup = coursekit.configure(DEVICE=DEVICE, NPROC=NPROC, TIMEOUT_S=TIMEOUT_S,
                            RESULTS_DIR=RESULTS_DIR, SMOKE=SMOKE)
claims = coursekit.Claims()
claims.check("planted claim 7c3a", "x > 1", otherwise="planted truth 9b2d, x = {x}", x=0.5)
coursekit.save_results("98_claim_differs", {"x": 0.5}, setup, claims=claims)"""
PRINTS_45_LINES = """import os
assert os.environ["COURSEKIT_HEADLESS"] == "1"  # verify's kernels know no front end is there
print("\\n".join(f"planted line {i}" for i in range(45)))"""


def test_report_lists_the_claims_that_did_not_hold(verified):
    build, _ = verified
    page = (build / "report.html").read_text()
    table = page[page.index('<table id="claims-not-held">'):]
    table = table[: table.index("</table>")]
    assert "98_claim_differs" in table and "planted claim 7c3a" in table
    assert "planted truth 9b2d, x = 0.5" in table
    rows = {r["notebook"]: r for r in json.loads((build / "verify.json").read_text())["notebooks"]}
    not_held = rows["98_claim_differs"]["claims_not_held"]
    assert [c["text"] for c in not_held] == ["planted claim 7c3a"]


@pytest.fixture(scope="module")
def verified(tmp_path_factory):
    course = tmp_path_factory.mktemp("course")
    shutil.copytree(ROOT / "notebooks", course / "notebooks")
    shutil.copytree(ROOT / "launchers", course / "launchers")
    failing = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell(PARAMETERS, metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("fraction = 1 / 0  # planted failure 5e1d",
                                  metadata={"jupyter": {"source_hidden": True}}),
    ], metadata={"kernelspec": KERNELSPEC})  # fmt: skip
    nbformat.write(failing, course / "notebooks" / "99_fails_on_purpose.ipynb")
    differs = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell(PARAMETERS, metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell(CLAIM_NOT_HELD),
        nbformat.v4.new_code_cell(PRINTS_45_LINES),
    ], metadata={"kernelspec": KERNELSPEC})  # fmt: skip
    nbformat.write(differs, course / "notebooks" / "98_claim_differs.ipynb")
    build = course / "build"
    proc = subprocess.run(
        [sys.executable, "-m", "coursekit.verify", "--smoke", "--build", str(build),
         "--notebooks-dir", str(course / "notebooks"), "00", "98", "99"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr  # 99 fails, as planted
    assert f"report for the instructor: {build / 'report.html'}" in proc.stdout
    assert "98_claim_differs: NOT HERE: planted claim 7c3a" in proc.stdout
    assert "true here: planted truth 9b2d, x = 0.5" in proc.stdout
    return build, sorted((course / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def test_report_is_self_contained(verified):
    build, _ = verified
    page = (build / "report.html").read_text()
    assert not re.search(r"""(src|href)=["']?(https?:|//|file:)""", page), "links outside the file"
    assert "<script" not in page and "<link" not in page
    images = re.findall(r'<img [^>]*src="([^"]+)"', page)
    assert images and all(src.startswith("data:image/png;base64,") for src in images)


def test_report_shows_status_figures_plots_and_the_failing_cell(verified):
    build, notebooks = verified
    page = (build / "report.html").read_text()
    rows = dict(re.findall(r'<tr id="row-([^"]+)" class="notebook-row">(.*?)</tr>', page))
    assert sorted(rows) == [nb.stem for nb in notebooks]
    assert ">passed<" in rows["00_environment_check"] and ">passed<" in rows["98_claim_differs"]
    assert ">failed<" in rows["99_fails_on_purpose"]
    assert "cell 1: ZeroDivisionError" in rows["99_fails_on_purpose"]
    for stem in rows.keys() - {"00_environment_check", "98_claim_differs", "99_fails_on_purpose"}:
        assert ">not run<" in rows[stem]
    failed = page[page.index('<section id="nb-99_fails_on_purpose">'):]
    assert "fraction = 1 / 0  # planted failure 5e1d" in failed  # the failing cell's source
    # collapsed in JupyterLab, so collapsible here
    assert '<details class="course-collapsed"><summary>fraction = 1 / 0' in failed
    # key figures come from the notebook's results file
    passed = page[page.index('<section id="nb-00_environment_check">'):page.index("</section>")]
    results = json.loads((build / "results" / "00_environment_check.json").read_text())
    for name in ("allreduce_world_size", "allreduce_backend", "ready"):
        assert f"<td>{name}</td><td>{results[name]}</td>" in passed
    # every picture the executed notebook shows, no more, no fewer
    executed = nbformat.read(build / "executed" / "00_environment_check.ipynb", as_version=4)
    pictures = sum("image/png" in out.get("data", {}) for cell in executed.cells
                   for out in cell.get("outputs", []))  # fmt: skip
    assert pictures >= 1 and passed.count("<img ") == pictures


def test_report_names_the_tier_and_the_hardware(verified):
    build, _ = verified
    page = (build / "report.html").read_text()
    hardware = page[page.index('<table id="hardware">'):]
    hardware = hardware[:hardware.index("</table>")]
    assert "<th>tier</th><td>cpu</td>" in hardware  # this machine has no GPU
    assert f"{os.cpu_count()} logical" in hardware
    assert "GiB" in hardware and "<th>gpus</th><td>none visible to PyTorch</td>" in hardware


def test_report_and_verify_json_show_the_longest_output(verified):
    build, _ = verified
    rows = {r["notebook"]: r for r in json.loads((build / "verify.json").read_text())["notebooks"]}
    assert (rows["98_claim_differs"]["longest_output_lines"],
            rows["98_claim_differs"]["longest_output_cell"]) == (45, 2)  # fmt: skip
    assert rows["00_environment_check"]["longest_output_lines"] > 0
    page = (build / "report.html").read_text()
    row = dict(re.findall(r'<tr id="row-([^"]+)" class="notebook-row">(.*?)</tr>', page))
    assert '<td class="longest-output"><span class="too-long">45 (cell 2)</span></td>' in (
        row["98_claim_differs"])


def test_verify_json_carries_the_class_budget(verified):
    build, notebooks = verified
    rows = json.loads((build / "verify.json").read_text())["notebooks"]
    for row in rows:
        notebook = next(nb for nb in notebooks if nb.stem == row["notebook"])
        assert row["class_minutes"] == class_minutes(notebook, row["seconds"])["minutes"]
        assert row["class_minutes"] % 5 == 0 and row["class_minutes"] >= 5


def test_class_minutes_adds_reading_code_running_and_exercises(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell(" ".join(["word"] * 200)),  # 2 min at 100 words/min
        nbformat.v4.new_code_cell("\n".join(f"x{i} = {i}" for i in range(23))
                                  + "\n\ntasks.check('f', ok, 'right', why)"),  # 24 lines, 1 task
    ])  # fmt: skip
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    budget = class_minutes(path, run_seconds=120)
    assert (budget["reading"], budget["code"], budget["running"], budget["exercises"]) == (
        2, 2, 2, FUNCTION_TASK_MIN)
    assert budget["minutes"] == 5 * math.ceil((6 + FUNCTION_TASK_MIN) / 5)
    assert class_minutes(path, None)["running"] == 0
    # a task whose answer is a launcher file takes longer; a prediction less
    nb.cells[1].source = ('answer = coursekit.answer_file("x.py", "x.py")\n'
                          "tasks.check('f', ok, 'right', why)\ntasks.predict('g', 1, 1)")
    nbformat.write(nb, path)
    assert class_minutes(path, None)["exercises"] == LAUNCHER_TASK_MIN + PREDICT_MIN


def test_an_after_class_section_is_budgeted_apart(tmp_path):
    task = "tasks.check('f', ok, 'right', why)"
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("## 1. In class\n\n" + " ".join(["word"] * 96)),
        nbformat.v4.new_code_cell(task),
        nbformat.v4.new_markdown_cell(AFTER_CLASS + ": more\n\n" + " ".join(["word"] * 296)),
        nbformat.v4.new_code_cell(task),
        nbformat.v4.new_markdown_cell("## What you saw"),
    ])  # fmt: skip
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    budget = class_minutes(path, run_seconds=60)
    # "## What you saw" (4 words) is in class again
    assert (budget["words"], budget["n_exercises"], budget["running"]) == (104, 1, 1)
    assert budget["after_class"] == 5 * math.ceil((3 + FUNCTION_TASK_MIN) / 5)


def test_class_minutes_counts_a_collapsed_launcher_as_what_is_shown_after_it(tmp_path):
    launcher = "\n".join(f"x{i} = {i}" for i in range(120))  # 120 lines, no function
    (tmp_path / "long.py").write_text('"""A long launcher."""\n' + launcher + "\n")
    writefile = nbformat.v4.new_code_cell("%%writefile long.py\n" + launcher)
    outline = nbformat.v4.new_code_cell('coursekit.show_outline("long.py")')  # shows 1 line
    path = tmp_path / "nb.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[writefile, outline]), path)
    assert class_minutes(path, None)["code_lines"] == 121 + 1  # not collapsed: all of it
    writefile.metadata["jupyter"] = {"source_hidden": True}
    nbformat.write(nbformat.v4.new_notebook(cells=[writefile, outline]), path)
    assert class_minutes(path, None)["code_lines"] == 1  # the outline's line, nothing more
    nbformat.write(nbformat.v4.new_notebook(cells=[outline]), path)  # the file committed alone
    assert class_minutes(path, None)["code_lines"] == 1


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_notebook_fits_a_class(notebook):
    """Class time at full size (its seconds in the last fresh-clone .ci/run's verify, the
    README's table; 0 for a notebook that run did not pass) is at most an hour."""
    seconds = ci_times.verify_seconds().get(notebook.name[:2], 0)
    budget = class_minutes(notebook, seconds)
    assert budget["minutes"] <= 60, f"{notebook.stem}: {budget} with {seconds} s of running"


@pytest.mark.slow
def test_report_opens_in_the_browser_with_every_notebook_row(verified):
    build, notebooks = verified
    shots = artifacts_dir("report")
    with sync_playwright()() as playwright:
        browser = launch_browser(playwright)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 1000})
            page.goto((build / "report.html").as_uri())
            for nb in notebooks:
                row = page.locator(f"#row-{nb.stem}")
                assert row.is_visible(), f"no visible row for {nb.stem}"
                assert nb.stem in row.inner_text()
            page.screenshot(path=shots / "report.png", full_page=True)
            images = page.locator("#nb-00_environment_check img")
            assert images.count() >= 1
            assert images.first.evaluate("img => img.complete && img.naturalWidth > 0")
        finally:
            browser.close()
    assert NOTEBOOKS  # the course's own notebooks were among those rows
