import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

# nbformat's schema checks import rfc3987_syntax (1.7 s) when installed; see coursekit.verify
sys.modules.setdefault("rfc3987_syntax", None)

import nbformat  # noqa: E402
import time_table  # noqa: E402

import coursekit  # noqa: E402
from coursekit import replay  # noqa: E402
from coursekit.cells import MAX_OUTPUT_LINES, committed_cells, output_lines  # noqa: E402
from coursekit.claims_doc import CLAIMS_DOC, documented_templates  # noqa: E402
from coursekit.course import COURSE  # noqa: E402
from coursekit.echo import HEADLESS_ENV  # noqa: E402
from coursekit.verify import execute, start_kernel, stop_kernel  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT / "launchers"))  # launchers/common: `from common import memory`
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
BEHAVE = Path(__file__).parent / "launchers" / "behave.py"


def notebook_path(stem_prefix: str) -> Path:
    """The notebook whose file name starts with ``stem_prefix`` (``"03"``)."""
    (path,) = [nb for nb in NOTEBOOKS if nb.name.startswith(stem_prefix)]
    return path


NOTEBOOK_TIMEOUT_S = 900  # a notebook at SMOKE sizes, every cell
FIGURE_HOOK = Path(__file__).parent / "ipython_startup" / "figure_check.py"


def figure_check_profile(folder: Path) -> Path:
    """A private IPython folder (IPYTHONDIR) whose startup file is the figure check (see
    FIGURE_HOOK)."""
    ipython_dir = folder / "ipython"
    startup = ipython_dir / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    shutil.copy(FIGURE_HOOK, startup / "00-figure_check.py")
    return ipython_dir


def run_in_kernel(km, code: str, timeout_s: float = 300) -> str:
    """Run ``code`` as a cell in the live kernel of ``km`` (as an attendee runs a cell again):
    its printed text; an error in it fails the test with the kernel's traceback."""
    from jupyter_client import BlockingKernelClient

    kc = BlockingKernelClient()
    kc.load_connection_info(km.get_connection_info())
    kc.start_channels()
    printed, errors = [], []

    def keep(msg):
        content = msg["content"]
        if msg["msg_type"] == "stream":
            printed.append(content["text"])
        elif msg["msg_type"] == "error":
            errors.append("\n".join(content["traceback"]))

    try:
        kc.wait_for_ready(timeout=60)
        kc.execute_interactive(code, output_hook=keep, timeout=timeout_s)
    finally:
        kc.stop_channels()
    assert not errors, f"the cell raised, run again in the same kernel:\n{code}\n{errors[0]}"
    return "".join(printed)


def drive_attendee_loop(notebook: Path, km) -> None:
    """After a run with wrong answers, in the same kernel, as an attendee goes on: every hint
    the texts name (a fresh Tasks: hints need no check to have run), then every cell that
    checks a task run again with the right answer (the reference solutions): each prints RIGHT,
    none raises, and the notebook's tasks all end solved."""
    cells = nbformat.read(notebook, as_version=4).cells
    named = sorted({n for c in cells for n in re.findall(r'tasks\.hint\("(\w+)"', c.source)})
    for name in named:
        shown = run_in_kernel(km, f"coursekit.Tasks().hint({name!r})")
        assert shown.startswith("hint 1 of "), shown
    checks = [c.source for c in cells if c.cell_type == "code"
              and re.search(r"tasks\.(check|predict)\(", c.source)]  # fmt: skip
    run_in_kernel(km, 'import os; os.environ["COURSE_SOLUTIONS"] = "1"  # the fix')
    for source in checks:
        shown = run_in_kernel(km, source)
        assert "RIGHT (" in shown, f"run again with the right answer, it said:\n{shown[-1500:]}"
    records = json.loads(run_in_kernel(km, "import json; print(json.dumps(tasks.records))"))
    assert records and {r["outcome"] for r in records} == {"solved"}, records


def run_papermill(notebook: Path, tmp_path: Path, parameters: dict,
                  attendee_loop: bool = False) -> nbformat.NotebookNode:  # fmt: skip
    """Execute ``notebook`` with papermill as the tests do, and return the executed copy,
    after checking what a learner would see: no code cell printed more than
    MAX_OUTPUT_LINES lines, and every figure had a title and axis labels (the figure hook,
    an IPython startup file inside the kernel, recorded those that did not). With
    ``attendee_loop``, the tasks are then solved in the same kernel (drive_attendee_loop)."""
    executed_path = tmp_path / notebook.name
    figure_log = tmp_path / "figure-check.jsonl"
    figure_log.unlink(missing_ok=True)
    env = {HEADLESS_ENV: "1", "COURSEKIT_FIGURE_LOG": str(figure_log),
           "IPYTHONDIR": str(figure_check_profile(tmp_path)), **LAUNCH_REPLAY}  # fmt: skip
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the kernel inherits this process's environment
    km = start_kernel(notebook, Path(tempfile.mkdtemp(prefix="k")))  # a short socket path
    try:
        # the course's one papermill executor (verify's); a notebook that hangs fails its test
        # (interrupted: the runner kills what it started) instead of holding the suite
        execute(notebook, executed_path, parameters, NOTEBOOK_TIMEOUT_S, km)
        if attendee_loop:
            drive_attendee_loop(notebook, km)
    finally:
        stop_kernel(km)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    executed = nbformat.read(executed_path, as_version=4)
    assert_output_sizes(notebook, executed)
    assert_no_blanks(notebook, executed)
    assert_figures_checked(notebook, executed, figure_log)
    return executed


def assert_no_blanks(notebook: Path, executed: nbformat.NotebookNode) -> None:
    """No printed line reads as a template with its figures left out ("took …x the time"):
    a claim that did not hold or could not run says so in plain sentences."""
    blank = []
    for i, cell in committed_cells(executed):
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if "application/vnd.jupyter.widget-view+json" in data:
                continue  # a widget's text/plain is its truncated repr, never shown
            text = out.get("text") or data.get("text/markdown") or data.get("text/plain", "")
            text = "".join(text) if isinstance(text, list) else text
            blank += [f"cell {i}: {line.strip()[:120]}" for line in text.splitlines()
                      if "…" in line]  # fmt: skip
    assert not blank, f"{notebook.name}: output with blanks:\n  " + "\n  ".join(blank)


def assert_output_sizes(notebook: Path, executed: nbformat.NotebookNode) -> None:
    counted = [(i, c, output_lines(c)) for i, c in committed_cells(executed)]
    too_long = [f"cell {i} ({n} lines): {_first_line(c.source)}"
                for i, c, n in counted if n > MAX_OUTPUT_LINES]  # fmt: skip
    assert not too_long, (
        f"{notebook.name}: cells print more than {MAX_OUTPUT_LINES} lines (index as "
        "committed; stream + text/plain):\n  " + "\n  ".join(too_long))


def assert_figures_checked(notebook: Path, executed: nbformat.NotebookNode, log: Path) -> None:
    records = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    assert records and "armed" in records[0], (
        f"{notebook.name}: the figure check never ran in the kernel (no 'armed' line in {log})")
    index = {}
    for i, c in committed_cells(executed):
        index.setdefault(hashlib.sha1(c.source.encode()).hexdigest(), i)
    bad = []
    # a live ranks pool's engines are IPython kernels too: each arms its own check (no figure)
    for r in (r for r in records[1:] if "armed" not in r):
        where = f"cell {index.get(r['source_sha1'], '?')} ({r['first_line']})"
        if "error" in r:
            bad.append(f"{where}: {r['error']}")
        else:
            bad.append(f"{where}: {r['figure']}, axes {r['axes']} lacks {', '.join(r['lacks'])}")
    assert not bad, (f"{notebook.name}: figures without a title or axis labels (index as "
                     "committed):\n  " + "\n  ".join(bad))  # fmt: skip


def _first_line(source: str) -> str:
    lines = [line for line in source.splitlines() if line.strip()]
    return lines[0][:100] if lines else ""


# Every notebook runs once in JupyterLab in the suite (tests/test_browser.py), with the
# parameters of its row in the course table (coursekit/course.py: SMOKE sizes but for 00) and
# the reference solutions of its exercises, checked there as papermill's runs are; the
# notebook's own test takes that run for the same parameters and environment. Its other
# ranks: its own test and make verify (which also runs the exercises unsolved).
RUN_ONCE_PARAMETERS = {nb.number: {k: v for k, v in nb.browser.items() if k != "SMOKE"}
                       for nb in COURSE if nb.browser.get("SMOKE", True)}  # fmt: skip
# what a kernel inherits that changes what a notebook does, besides its parameters; the
# course's own variables only where a notebook uses them (its text holds the marker)
KERNEL_ENVIRONMENT = ("ATEN_", "OMP_", "CUDA_", "TORCH")
COURSE_VARIABLES = {"COURSE_SOLUTIONS": "coursekit.answer",  # its tasks' answers (answer_file)
                    "COURSE_SLURM_DIR": "COURSE_SLURM_DIR"}  # notebook 10's Slurm  # fmt: skip


@dataclass
class BrowserRun:
    results_dir: Path  # what the notebook wrote into its RESULTS_DIR
    environment: dict  # kernel_environment() of the kernel that ran it


BROWSER_RUNS: dict[str, BrowserRun] = {}  # stem prefix -> its run (filled by test_browser)


def kernel_environment(notebook: Path, env=os.environ) -> dict:
    """What of ``env`` changes what ``notebook`` does (KERNEL_ENVIRONMENT, COURSE_VARIABLES)."""
    text = notebook.read_text()
    return {k: v for k, v in env.items() if k.startswith(KERNEL_ENVIRONMENT)
            or COURSE_VARIABLES.get(k, "\0") in text}  # fmt: skip


def execute_notebook(stem_prefix: str, tmp_path: Path, attendee_loop: bool = False,
                     **parameters) -> dict:  # fmt: skip
    """Run a notebook with papermill (SMOKE sizes unless told otherwise) as the course's
    verify command does, check what it shows (:func:`run_papermill`) and the results
    contract, and return its results file. A notebook the browser test already ran with
    these parameters and this environment is not run again: its results are that run's."""
    notebook = notebook_path(stem_prefix)
    results_dir = tmp_path / "results"
    shared = BROWSER_RUNS.get(stem_prefix)
    if (shared and not attendee_loop and parameters == RUN_ONCE_PARAMETERS.get(stem_prefix)
            and shared.environment == kernel_environment(notebook)):  # fmt: skip
        shutil.copytree(shared.results_dir, results_dir)
        print(f"{notebook.name}: the results of the browser test's run ({shared.results_dir})")
    else:
        run_papermill(notebook, tmp_path, {"SMOKE": True, "RESULTS_DIR": str(results_dir),
                                           **parameters}, attendee_loop)  # fmt: skip
    results = json.loads((results_dir / f"{notebook.stem}.json").read_text())
    assert results["notebook"] == notebook.stem
    assert results["tier"] in {"cpu", "single-gpu", "multi-gpu"}
    assert results["smoke"] is parameters.get("SMOKE", True)
    if "NPROC" in parameters:
        assert results["nproc"] == parameters["NPROC"]
    assert_claims_contract(results)
    return results


def claim_with(results, condition):
    """The one claim of the results file made on ``condition``."""
    found = [c for c in results["claims"] if c["condition"] == condition]
    assert len(found) == 1, f"claims on {condition!r}: {found}"
    return found[0]


def comparison_starting(results, prefix):
    """The one comparison claim (``Claims.compare``) of the results file whose sentence
    starts with ``prefix``: its figures carry the measured spread."""
    found = [c for c in results["claims"]
             if c["tie_condition"] and c["text"].startswith(prefix)]  # fmt: skip
    assert len(found) == 1, f"comparisons starting {prefix!r}: {found}"
    return found[0]


def assert_claims_contract(results: dict) -> None:
    """Every notebook states measured outcomes only as claims: each one's outcome follows from
    its own recorded figures, and each outcome has its sentence (a skipped claim: why, and no
    figures, since nothing was measured), and docs/claims.md lists each one's sentence."""
    claims = results["claims"]
    assert claims, f"{results['notebook']}: its results file carries no claims"
    for c in claims:
        name = f"{results['notebook']}: claim {c['text']!r}"
        assert c["text"], f"{results['notebook']}: {c} lacks a sentence"
        if c["outcome"] == "skipped":
            assert c["why_skipped"] and not c["figures"], f"{name}: skipped without why: {c}"
            continue
        assert c["otherwise"], f"{name}: no sentence for when it does not hold"
        assert bool(c["tie"]) == bool(c["tie_condition"]), f"{name}: a tie needs both: {c}"
        assert coursekit.outcome_of(c) == c["outcome"], (
            f"{name} is recorded as {c['outcome']}, but its figures say otherwise: {c['figures']}")
        assert c["held"] is (c["outcome"] == "held"), f"{name}: held and outcome disagree"
    listed = documented_claims().get(results["notebook"], set())
    missing = sorted({c.get("template") or c["text"] for c in claims} - listed)
    assert not missing, (
        f"{results['notebook']}: claims that {CLAIMS_DOC.relative_to(ROOT)} does not list (`make "
        f"claims` writes it from the source in seconds; commit what it wrote): {missing}")


@functools.cache
def documented_claims() -> dict[str, set[str]]:
    """Notebook -> the claim sentences docs/claims.md lists: the course's audit of what it
    asserts, read from its source (tests/test_claims_doc.py checks the page is current), which
    every run's claims must be in."""
    return documented_templates(CLAIMS_DOC.read_text())


def processes_with(token: str) -> list[psutil.Process]:
    """Live processes whose command line mentions ``token`` (zombies are dead: not counted)."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            cmdline = " ".join(p.info["cmdline"] or [])
            if p.info["status"] != psutil.STATUS_ZOMBIE and token in cmdline:
                found.append(p)
        except psutil.Error:
            pass
    return found


# Everything the tests start (kernels, torchrun, workers) inherits this private temp dir, so
# the check below sees only what the course's own runs leave, not other programs' files.
SCRATCH = Path(tempfile.mkdtemp(prefix="course-tests-"))
os.environ["TMPDIR"] = str(SCRATCH)
# the notebooks' kernels (papermill's and JupyterLab's) make each launch once per session: a
# launch identical to one an earlier kernel made replays its record (coursekit/replay.py)
LAUNCH_REPLAY = {replay.REPLAY_ENV: str(SCRATCH / "launch-replay")}
(SCRATCH / "launch-replay").mkdir()
tempfile.tempdir = None  # re-read TMPDIR
SESSION_ENVIRONMENT = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}


def torchelastic_dirs() -> set[str]:
    return {d for d in os.listdir(SCRATCH) if d.startswith("torchelastic_")}


def pytest_configure(config):
    time_table.register(config)  # make test ends with where its time went


def pytest_collection_modifyitems(config, items):
    """The browser's runs go first: the notebooks' own tests (test_00_*.py ..., which sort
    before test_browser.py) then take their results instead of running them again."""
    items.sort(key=lambda item: item.path.name != "test_browser.py")  # stable: order kept


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(SCRATCH, ignore_errors=True)


COURSE_IMAGE_BUILT = pytest.StashKey[str]()  # tests/test_container.py: what its build took


def pytest_terminal_summary(terminalreporter, config):
    if COURSE_IMAGE_BUILT in config.stash:
        terminalreporter.write_sep("-", "course image (tests/test_container.py)")
        terminalreporter.write_line(config.stash[COURSE_IMAGE_BUILT])


@pytest.fixture
def token():
    return f"tok-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def setup(tmp_path):
    return coursekit.configure(
        DEVICE="cpu", RESULTS_DIR=tmp_path / "results", TIMEOUT_S=180, quiet=True
    )


@pytest.fixture(autouse=True)
def environment_restored():
    """Each test ends with the environment the session started with: importing a launcher
    as a module (its module-level os.environ.setdefault, such as ddp_bench's
    OMP_WAIT_POLICY, in a module-scoped fixture that runs before any test's own snapshot)
    must not reach the kernels and runs of the tests after it, nor make a browser run's
    environment look different from the test that would take it (BROWSER_RUNS)."""
    yield
    current_test = os.environ.get("PYTEST_CURRENT_TEST")  # pytest's own; it pops it later
    os.environ.clear()
    os.environ.update(SESSION_ENVIRONMENT)
    if current_test is not None:
        os.environ["PYTEST_CURRENT_TEST"] = current_test


@pytest.fixture(autouse=True)
def leaves_no_torchelastic_dirs():
    before = torchelastic_dirs()
    yield
    assert torchelastic_dirs() - before == set(), "torchrun left scratch files in the temp dir"


SLURM_SCRIPT = ROOT / "scripts" / "local_slurm.py"
SLURM_DAEMONS = ("slurmctld", "slurmd", "munged")


def local_slurm(action: str, state: Path, timeout: float = 1200) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SLURM_SCRIPT), action], capture_output=True,
                          text=True, env={**os.environ, "COURSE_SLURM_DIR": str(state)},
                          timeout=timeout)  # fmt: skip


def slurm_daemons(state: Path) -> list[psutil.Process]:
    """Live Slurm/munge daemons whose command line names our cluster's folder."""
    found = []
    for p in processes_with(str(state)):
        try:
            if p.name() in SLURM_DAEMONS:
                found.append(p)
        except psutil.Error:
            pass  # it ended meanwhile
    return found


@dataclass
class SlurmCluster:
    state: Path  # COURSE_SLURM_DIR of the cluster
    env: dict  # the environment its commands need (SLURM_CONF)
    unavailable: str | None  # why Slurm cannot be installed here, or None


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A real two-node Slurm on this machine (scripts/local_slurm.py), started once for every
    test that submits jobs, and stopped with no daemon left behind."""
    state = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "SLURM_CONF": str(state / "slurm.conf")}
    started = local_slurm("start", state)
    if started.returncode == 2:  # the script's code for "Slurm cannot be installed here"
        yield SlurmCluster(state, env, started.stderr.strip())
        return
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        yield SlurmCluster(state, env, None)
    finally:
        stopped = local_slurm("stop", state)
        assert stopped.returncode == 0, stopped.stderr
        assert slurm_daemons(state) == [], "a Slurm daemon outlived the tests"
