"""The course as attendees meet it: JupyterLab in a real (headless) browser.

One JupyterLab from the course environment serves a copy of notebooks/ and launchers/
(running a notebook writes its launchers and results: the checkout stays untouched), plus
the fixture notebooks in tests/browser/. Each copy gets the parameters of its row in the
course table (coursekit/course.py: SMOKE = True, to keep CI short, but for notebook 00), with
the reference solutions of their exercises (the notebooks' own tests take these runs instead of
running them again; make verify runs them unsolved), and notebook 04's copy starts its
TensorBoard (OPEN_TENSORBOARD = True). Every notebook is opened, run with Run All
to its end, saved, and its saved outputs checked as papermill's are (no error, no cell over
40 lines, the figure check in its kernel, the claims); its kernel is shut down after it, and
nothing it started may be left. Screenshots land in build/test-artifacts/browser/.

A subset while developing: ``pytest tests/test_browser.py -k "03 or interrupt"``.
"""

from __future__ import annotations

import collections
import json
import re
import shutil
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import pytest
from browser_kit import ARTIFACTS, Lab, artifacts_dir, launch_browser, processes_in, sync_playwright
from conftest import (
    BROWSER_RUNS,
    LAUNCH_REPLAY,
    NOTEBOOKS,
    ROOT,
    BrowserRun,
    assert_claims_contract,
    assert_figures_checked,
    assert_output_sizes,
    figure_check_profile,
    kernel_environment,
    processes_with,
)

from coursekit.course import COURSE

pytestmark = pytest.mark.slow
FIXTURES = Path(__file__).parent / "browser"
PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"  # the notebook on show
# sliders made in a cell, or by notebook 01's lesson module (coursekit/lessons/nb01.py)
SLIDER = re.compile(r"\binteract(ive)?\(|(Int|Float)(Range|Log)?Slider\(|\bmemory_explorer\(")
RUN_ALL_TIMEOUT_S = 900  # one notebook at SMOKE sizes, Run All to the last cell
OWN_TEST = ("00_", "01_", "04_")  # notebooks whose own test below also runs them to the end


def calculator_notebooks() -> list[Path]:
    """Course notebooks with an ipywidgets slider (notebook 01's memory calculator)."""
    return [nb for nb in NOTEBOOKS
            if any(SLIDER.search(c.source) for c in nbformat.read(nb, as_version=4).cells
                   if c.cell_type == "code")]  # fmt: skip


def set_parameters(notebook: Path, values: dict) -> None:
    """Give the parameters cell of this (served, copied) notebook these values."""
    nb = nbformat.read(notebook, as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    for name, value in values.items():
        cell.source, n = re.subn(rf"^{name} = [^#\n]*?(?=\s*#|$)", f"{name} = {value!r}",
                                 cell.source, flags=re.M)  # fmt: skip
        assert n == 1, f"{notebook.name}: no single '{name} = ...' line in its parameters cell"
    nbformat.write(nb, notebook)


def open_tensorboard(notebook: Path) -> None:
    """Set OPEN_TENSORBOARD = True in this (served, copied) notebook 04."""
    nb = nbformat.read(notebook, as_version=4)
    n = 0
    for cell in nb.cells:
        cell.source, k = re.subn(r"^OPEN_TENSORBOARD = False\b", "OPEN_TENSORBOARD = True",
                                 cell.source, flags=re.M)  # fmt: skip
        n += k
    assert n == 1, f"{notebook.name}: no single 'OPEN_TENSORBOARD = False' line"
    nbformat.write(nb, notebook)


@pytest.fixture(scope="module")
def lab(tmp_path_factory, slurm_cluster):
    served = tmp_path_factory.mktemp("course")
    shutil.copytree(ROOT / "notebooks", served / "notebooks")
    for row in COURSE:  # the parameters of its row in the course table (SMOKE unless it says)
        copy = served / "notebooks" / row.path.name
        set_parameters(copy, {"SMOKE": True, **row.browser})
        if row.number == "04":
            open_tensorboard(copy)
    shutil.copytree(ROOT / "launchers", served / "launchers")
    shutil.copytree(FIXTURES, served / "fixtures")
    scratch = tmp_path_factory.mktemp("jupyter")
    figure_log = scratch / "figure-check.jsonl"  # the kernels' figure check (as papermill's)
    server = Lab(served, scratch, env={
        "IPYTHONDIR": str(figure_check_profile(scratch)), "COURSEKIT_FIGURE_LOG": str(figure_log),
        "COURSE_SOLUTIONS": "1",  # the exercises solved: the notebooks' own tests take these runs
        "COURSE_SLURM_DIR": str(slurm_cluster.state),  # notebook 10's Slurm: the tests' cluster
        **LAUNCH_REPLAY,  # what these runs launch, later runs of the same notebooks replay
    })  # fmt: skip
    server.figure_log = figure_log
    yield server
    server.stop()
    kernels, runs = processes_with(str(server.runtime_dir)), processes_in(served)
    for survivor in kernels + runs:  # fail, but leave nothing behind
        survivor.kill()
    assert kernels == [], "a kernel outlived JupyterLab"
    assert runs == [], "a process of the course outlived JupyterLab"


@pytest.fixture(scope="module")
def browser(lab):
    with sync_playwright()() as playwright:
        browser = launch_browser(playwright)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(60_000)
    yield page
    context.close()


@pytest.fixture(scope="module")
def shots():
    return artifacts_dir("browser")


@pytest.fixture(autouse=True)
def kernels_shut_down_after_each_test(lab):
    """One notebook at a time: its kernel is shut down after it, and nothing it started
    (torchrun, workers, a TensorBoard) outlives that kernel."""
    lab.figure_log.unlink(missing_ok=True)  # the next kernel arms the figure check anew
    yield
    lab.shutdown_kernels()
    left = [] if wait_for(lambda: not lab.course_processes(), 20) else lab.course_processes()
    for survivor in left:  # fail, but leave nothing behind
        survivor.kill()
    assert not left, f"processes outlived their kernel: {[p.info['cmdline'] for p in left]}"


def wait_for(condition, timeout: float, interval: float = 0.3):
    """condition()'s first true value within ``timeout`` seconds, else None."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value or None
        time.sleep(interval)


def open_and_run_all(page, lab: Lab, path: str) -> None:
    """Open a notebook, wait for its kernel, then Run > Run All Cells, as a person would."""
    page.goto(lab.url(path))
    page.locator(f"{PANEL} .jp-Cell").first.wait_for()
    # the kernel indicator in the toolbar turns idle once the kernel is up
    toolbar = page.locator(f"{PANEL} .jp-NotebookPanel-toolbar")
    toolbar.get_by_text("Python 3 (ddp-course)").first.wait_for()  # the kernel `make setup` made
    page.locator(f"{PANEL} .jp-Notebook-ExecutionIndicator[data-status='idle']").first.wait_for(
        state="attached", timeout=90_000)
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()


def outputs(page):
    return page.locator(f"{PANEL} .jp-OutputArea-output")


# the prompt of each code cell of the notebook on show: "[3]:", "[*]:" (running or queued)
PROMPTS_JS = """panel => [...document.querySelectorAll(panel + ' .jp-CodeCell .jp-InputPrompt')]
                   .map(e => e.textContent.trim())"""
# true when the cell running now (the first [*] in order) shows a progress bar widget; it is
# scrolled into view first (Run All leaves the view where it was). textContent, not innerText:
# JupyterLab skips rendering cells off screen (windowingMode contentVisibility), and the
# innerText of what is not rendered is empty.
RUNNING_BAR_JS = """panel => {
    const cells = [...document.querySelectorAll(panel + ' .jp-CodeCell')];
    const running = cells.find(c => c.querySelector('.jp-InputPrompt').textContent.includes('*'));
    if (!running) return false;
    running.scrollIntoView({block: 'end'});
    return !!running.querySelector('.widget-hprogress');
}"""
NEWS = re.compile(r"Jupyter news", re.I)


def saved_copy(file: Path, before: float, errors: list):
    """The notebook as saved, once ``file`` is newer than ``before``; None until then. Read
    from the disk, not through the server: a GET of a notebook the server is still writing
    finds it invalid and makes the server restore its backup over the file being written
    (jupyter_server's _read_notebook with atomic writing), which loses the save. A read
    while the file is written finds half a notebook: not saved yet, so a copy counts only
    when the file did not change while it was read. Such reads go to ``errors``."""
    try:
        stamp = file.stat().st_mtime
        nb = nbformat.read(file, as_version=4)
    except (OSError, ValueError) as error:  # nbformat's NotJSONError is a ValueError
        errors.append(type(error).__name__)
        return None
    return nb if stamp != before and file.stat().st_mtime == stamp else None


def run_to_the_end(page, lab: Lab, path: str, watch=None) -> nbformat.NotebookNode:
    """Run All, wait until no cell runs or waits and the kernel is idle, save the notebook
    and return it as saved (its outputs as the browser received them). ``watch(page)`` is
    called about twice a second meanwhile."""
    open_and_run_all(page, lab, path)
    idle = page.locator(f"{PANEL} .jp-Notebook-ExecutionIndicator[data-status='idle']")
    start, quiet = time.monotonic(), 0
    while quiet < 3:  # three looks in a row, over a second, with nothing running: the end
        assert time.monotonic() - start < RUN_ALL_TIMEOUT_S, (
            f"{path}: still running after {RUN_ALL_TIMEOUT_S} s (prompts "
            f"{page.evaluate(PROMPTS_JS, PANEL)})")
        if watch is not None:
            watch(page)
        prompts = page.evaluate(PROMPTS_JS, PANEL)
        started = any(re.search(r"\d", p) for p in prompts)
        quiet = quiet + 1 if started and not any("*" in p for p in prompts) and idle.count() else 0
        time.sleep(0.5)  # Run All queues every cell at once ([*]): no gap between them to miss
    print(f"\n{path}: Run All took {time.monotonic() - start:.0f} s in the browser")
    file = lab.root / path
    before = file.stat().st_mtime
    page.locator(f"{PANEL} .jp-NotebookPanel-toolbar [data-command='docmanager:save']").click()
    errors = []
    nb = wait_for(lambda: saved_copy(file, before, errors), 30)
    answers = ", ".join(f"{n} x {e}" for e, n in collections.Counter(errors).items())
    assert nb, (f"{path}: saving it from the toolbar left no readable newer copy on disk in "
                f"30 s (reads: {answers or 'no error'}); JupyterLab's log ends:\n"
                + Path(lab.log.name).read_text()[-3000:])  # fmt: skip
    if any(c.cell_type == "code" and c.source.strip() and c.execution_count is None
           for c in nb.cells):  # fmt: skip
        page.screenshot(path=ARTIFACTS / "browser" / f"{Path(path).stem}_stopped.png")
        log = Path(lab.log.name).read_text()[-3000:]
        print(f"\n{path}: Run All stopped early; JupyterLab's log ends:\n{log}")
    return nb


def assert_ran_cleanly(nb: nbformat.NotebookNode, path: str) -> None:
    """Every code cell ran, and none shows an error."""
    code = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.source.strip()]
    not_run = [f"cell {i}: {c.source.splitlines()[0][:80]}" for i, c in code
               if c.execution_count is None]  # fmt: skip
    errors = [f"cell {i}: {o.get('ename')}: {o.get('evalue', '')[:300]}"
              for i, c in code for o in c.outputs if o.output_type == "error"]  # fmt: skip
    assert not errors, f"{path}: error output in the browser:\n  " + "\n  ".join(errors)
    last = max((i for i, c in code if c.execution_count is not None), default=None)
    shown = "".join(str(o.get("text", "")) for o in nb.cells[last].outputs)[-1500:] if last else ""
    assert not not_run, (f"{path}: cells Run All never ran:\n  " + "\n  ".join(not_run)
                         + f"\nthe last cell that ran ({last}) printed:\n{shown}")  # fmt: skip


def assert_no_news_question(page) -> None:
    toasts = page.locator(".Toastify__toast, .jp-Notification-Toast")
    asked = [t for t in toasts.all_inner_texts() if NEWS.search(t)]
    assert not asked, f"JupyterLab asked about Jupyter news: {asked}"


def finish(page, lab: Lab, path: str, shots: Path, nb: nbformat.NotebookNode,
           run_dir: Path) -> dict:
    """Screenshot the end of the notebook; check the news toast, what its cells showed (as
    papermill's runs are checked: lengths, figures) and the results file. Keep what it
    wrote in ``run_dir``: a notebook's own test takes this run (conftest's BROWSER_RUNS)."""
    page.locator(f"{PANEL} .jp-Cell").last.scroll_into_view_if_needed()
    page.screenshot(path=shots / f"{Path(path).stem}.png")
    assert_no_news_question(page)
    notebook = lab.root / path
    assert_output_sizes(notebook, nb)
    assert_figures_checked(notebook, nb, lab.figure_log)
    written = lab.root / "build" / "results"
    results = json.loads((written / f"{notebook.stem}.json").read_text())
    assert_claims_contract(results)
    for entry in written.glob(f"{notebook.name[:3]}*"):  # 06_dp_....json, 06_plots/, ...
        copy = shutil.copytree if entry.is_dir() else shutil.copy2
        copy(entry, run_dir / entry.name)
    BROWSER_RUNS[notebook.name[:2]] = BrowserRun(run_dir, kernel_environment(notebook, lab.env))
    return results


@pytest.mark.parametrize("notebook", [nb for nb in NOTEBOOKS if not nb.name.startswith(OWN_TEST)],
                         ids=lambda p: p.stem)  # fmt: skip
def test_every_notebook_runs_to_the_end_in_the_browser(lab, page, shots, notebook, tmp_path):
    path = f"notebooks/{notebook.name}"
    nb = run_to_the_end(page, lab, path)
    assert_ran_cleanly(nb, path)
    finish(page, lab, path, shots, nb, tmp_path)


def test_notebook_00_says_ready_in_the_browser(lab, page, shots, tmp_path):
    path = "notebooks/00_environment_check.ipynb"
    nb = run_to_the_end(page, lab, path)
    assert_ran_cleanly(nb, path)
    ready = re.compile(r"READY: the course will run on the \S+ tier")
    verdict = outputs(page).filter(has_text=ready)
    verdict.first.scroll_into_view_if_needed()
    page.screenshot(path=shots / "00_verdict.png")
    assert "NOT READY" not in outputs(page).all_inner_texts()[-1]
    finish(page, lab, path, shots, nb, tmp_path)


def test_a_launcher_run_shows_live_lines_and_progress_while_it_runs(lab, page, shots):
    """The output area grows while the cell still runs: lines and the bar arrive live."""
    open_and_run_all(page, lab, "fixtures/fixture_live_launcher.ipynb")
    cell = page.locator(f"{PANEL} .jp-CodeCell").first
    samples = []  # (seconds, cell still running, step lines shown, bar width in %)
    start = time.monotonic()
    while time.monotonic() - start < 120:
        running = "[*]" in cell.locator(".jp-InputPrompt").inner_text()
        text = cell.locator(".jp-OutputArea").inner_text()
        bars = cell.locator(".widget-hprogress .progress-bar")
        width = bars.first.evaluate("e => parseFloat(e.style.width)") if bars.count() else None
        steps = len(re.findall(r"\[rank0\] step \d+/12", text))
        samples.append((time.monotonic() - start, running, steps, width))
        if running and steps == 6:
            page.screenshot(path=shots / "live_run_midway.png")
        if "LIVE RUN DONE" in text:
            break
        time.sleep(0.2)
    page.screenshot(path=shots / "live_run_done.png")
    assert "LIVE RUN DONE" in text, f"the run did not finish in the page: {samples[-3:]}"
    midway = [s for s in samples if s[1] and 0 < s[2] < 12]
    assert len({s[2] for s in midway}) >= 3, f"lines did not arrive live: {samples}"
    assert "hello from rank 1 of 2" in text and "[rank1]" in text  # every rank's lines
    widths = [s[3] for s in midway if s[3] is not None]
    assert widths and 0 < min(widths) < 100, f"no progress bar moved during the run: {samples}"
    assert samples[-1][3] == 100


@pytest.mark.parametrize("path", ["notebooks/01_why_is_my_second_gpu_idle.ipynb"])
def test_moving_the_calculator_slider_changes_its_output(lab, page, shots, path, tmp_path):
    nb = run_to_the_end(page, lab, path)
    assert_ran_cleanly(nb, path)
    finish(page, lab, path, shots, nb, tmp_path)
    panel = page.locator(PANEL)
    calculator = panel.locator(".widget-interact").first
    handle = calculator.locator(".noUi-handle").first
    handle.wait_for(timeout=30_000)
    readout = calculator.locator(".widget-readout").first
    shown = calculator.locator(".widget-output").first

    def output_signature() -> str:  # the text and the pictures the widget shows
        images = shown.locator("img").evaluate_all("imgs => imgs.map(i => i.src).join()")
        return shown.inner_text() + images

    page.wait_for_function("e => e.innerText.trim().length > 0 || e.querySelector('img')",
                           arg=shown.element_handle())  # fmt: skip
    before, value_before = output_signature(), readout.inner_text()
    calculator.scroll_into_view_if_needed()
    stem = Path(path).stem
    page.screenshot(path=shots / f"{stem}_calculator_before.png")
    handle.click()  # focus the slider's handle, then move it with the keyboard
    for _ in range(5):
        page.keyboard.press("ArrowRight")
    deadline = time.monotonic() + 30
    while output_signature() == before and time.monotonic() < deadline:
        time.sleep(0.2)
    page.screenshot(path=shots / f"{stem}_calculator_after.png")
    assert readout.inner_text() != value_before, "the slider did not move"
    assert output_signature() != before, "the widget's output did not change"


@pytest.mark.parametrize("notebook", [nb for nb in NOTEBOOKS if nb.name.startswith("01_")],
                         ids=lambda p: p.stem)  # fmt: skip
def test_notebook_01_has_the_memory_calculator(notebook):
    """Notebook 01 (once merged) carries the slider calculator the browser test moves."""
    assert notebook in calculator_notebooks(), "notebook 01 has no ipywidgets slider"


def tensorboard_url(nb: nbformat.NotebookNode) -> str:
    """The address of the TensorBoard notebook 04 started: the URL its cell printed, else
    the port in TensorBoard's own info file (tensorboard/manager.py writes
    <tempdir>/.tensorboard-info/pid-N.info for `%tensorboard`; the kernel has our TMPDIR)."""
    cell = next(c for c in nb.cells if re.search(r"^OPEN_TENSORBOARD = True", c.source, re.M))
    shown = " ".join(str(o.get("text", "")) + json.dumps(o.get("data", {})) for o in cell.outputs)
    m = re.search(r"https?://(?:localhost|127\.0\.0\.1):\d+", shown)
    if m:
        return m.group(0)
    infos = list((Path(tempfile.gettempdir()) / ".tensorboard-info").glob("pid-*.info"))
    assert infos, f"notebook 04 started no TensorBoard; its cell showed: {shown[:1500]}"
    return f"http://localhost:{json.loads(infos[-1].read_text())['port']}"


def loss_tags(base: str) -> list:
    """(run, tag) of the loss scalars TensorBoard serves (its HTTP API), [] until loaded."""
    try:
        with urllib.request.urlopen(f"{base}/data/plugin/scalars/tags", timeout=10) as response:
            tags = json.loads(response.read())  # {run: {tag: {...}}}
    except OSError:
        return []  # not listening yet
    return [(run, tag) for run, run_tags in tags.items() for tag in run_tags if "loss" in tag]


def test_notebook_04_shows_live_progress_and_its_tensorboard(lab, page, shots, tmp_path):
    """A progress bar widget while a launch runs; the TensorBoard the notebook starts serves
    the run's scalars, and its page shows the loss curve."""
    path = "notebooks/04_a_real_ddp_training_loop.ipynb"
    seen = []

    def watch(page):
        if not seen and page.evaluate(RUNNING_BAR_JS, PANEL):
            seen.append(time.monotonic())
            page.locator(f"{PANEL} .widget-hprogress").last.scroll_into_view_if_needed()
            page.screenshot(path=shots / "04_live_progress.png")

    nb = run_to_the_end(page, lab, path, watch=watch)
    assert_ran_cleanly(nb, path)
    finish(page, lab, path, shots, nb, tmp_path)

    base = tensorboard_url(nb)
    losses = wait_for(lambda: loss_tags(base), timeout=90, interval=2)
    assert losses, f"the TensorBoard at {base} serves no loss scalars within 90 s"
    board = page.context.new_page()
    board.goto(f"{base}/#timeseries")
    board.get_by_text(losses[0][1]).first.wait_for(timeout=60_000)
    time.sleep(5)  # the chart draws its lines after the card appears
    board.screenshot(path=shots / "04_tensorboard_loss.png")
    board.close()
    assert seen, "no progress bar widget showed in a running cell of notebook 04"


def test_the_stop_button_interrupts_a_launch_and_leaves_nothing(lab, page, shots):
    path = "fixtures/fixture_interrupt.ipynb"
    open_and_run_all(page, lab, path)
    cell = page.locator(f"{PANEL} .jp-CodeCell").first
    cell.locator(".widget-hprogress, .jp-OutputArea-output").first.wait_for(timeout=120_000)
    bar = cell.locator(".widget-hprogress .progress-bar")
    assert wait_for(lambda: bar.count() and bar.first.evaluate("e => parseFloat(e.style.width)"),
                    120), "the launch's progress bar never moved"  # fmt: skip
    assert any("steps_live.py" in " ".join(p.info["cmdline"] or []) for p in lab.course_processes())
    page.screenshot(path=shots / "interrupt_before.png")
    toolbar = page.locator(f"{PANEL} .jp-NotebookPanel-toolbar")
    toolbar.locator("[data-command='notebook:interrupt-kernel']").click()
    idle = page.locator(f"{PANEL} .jp-Notebook-ExecutionIndicator[data-status='idle']")
    assert wait_for(lambda: "*" not in cell.locator(".jp-InputPrompt").inner_text()
                    and idle.count(), 60), "the cell still runs 60 s after the stop button"
    page.screenshot(path=shots / "interrupt_after.png")
    text = cell.locator(".jp-OutputArea").inner_text()
    assert "KeyboardInterrupt" in text, text[-2000:]
    assert not re.search(r"^THE LONG RUN WAS NOT INTERRUPTED$", text, re.M), text[-2000:]
    (kernel,) = lab.api("kernels")
    assert kernel["execution_state"] == "idle", kernel  # the same kernel, back and idle
    left = [] if wait_for(lambda: not lab.course_processes(), 15) else lab.course_processes()
    assert not left, f"left after the stop button: {[p.info['cmdline'] for p in left]}"


def test_live_ranks_come_back_after_a_hang_and_after_the_stop_button(lab, page, shots):
    """A skipped collective ends by the group's timeout, each rank's place shown; a cell that
    never returns ends with the stop button within 5 s; the pool then works, and it goes with
    the kernel (the autouse fixture checks that nothing outlives it)."""
    open_and_run_all(page, lab, "fixtures/fixture_live_ranks.ipynb")
    cells = page.locator(f"{PANEL} .jp-CodeCell")
    hang, endless, works = cells.nth(1), cells.nth(2), cells.nth(3)
    hang.locator(".jp-OutputArea-output").filter(has_text="Timed out").first.wait_for(
        timeout=180_000)  # the pool's start, then the group's 3 s timeout
    text = hang.locator(".jp-OutputArea").inner_text()
    assert "at line 3: dist.all_reduce(x)" in text and "past the collective 1" in text, text
    assert wait_for(lambda: "*" in endless.locator(".jp-InputPrompt").inner_text(), 30)
    time.sleep(1)  # the endless cell runs on both ranks
    page.screenshot(path=shots / "live_ranks_running.png")
    page.locator(f"{PANEL} .jp-NotebookPanel-toolbar [data-command='notebook:interrupt-kernel']"
                 ).click()  # fmt: skip
    stopped = time.monotonic()
    assert wait_for(lambda: "*" not in endless.locator(".jp-InputPrompt").inner_text(), 30)
    took = time.monotonic() - stopped
    text = endless.locator(".jp-OutputArea").inner_text()
    assert took < 5, f"the stop button took {took:.1f} s"
    assert "KeyboardInterrupt" in text and "rank 1" in text, text
    works.click()
    page.keyboard.press("Shift+Enter")
    works.locator(".jp-OutputArea-output").filter(has_text="THE POOL WORKS 2.0").first.wait_for(
        timeout=30_000)
    page.screenshot(path=shots / "live_ranks_after_stop.png")
