"""Notebook 08 (hangs and desyncs): every pitfall reproduced (its error text matched), every
fix green, the live ranks' hang, desync and monitored_barrier, the learner's two tasks (where
each rank of pitfall_logging.py waits; its fix, judged by a run, with a catalogue of planted
wrong fixes run in one launch), no process left. The facts both pitfall notebooks (08, 09)
teach are checked against the installed torch here."""

import hashlib
import json
from pathlib import Path

import nbformat
import pytest
from conftest import ROOT, execute_notebook, notebook_path, processes_with
from task_kit import facts_of_each, load_module, planted, solved, task_checks, wrong_answers

from coursekit.course import BROKEN, LAUNCHER, notebook
from coursekit.lessons.nb08 import PITFALLS, TIMED_OUT

STEM = "08_pitfalls_and_debugging"
WRONG = Path(__file__).parent / "solutions_wrong"
# every planted wrong fix of pitfall_logging.py, and the words its NOT YET names it by
CATALOGUE = {
    "only_logging_fixed": ("it hung", "loss.backward()", "gather_object"),
    "only_stop_fixed": ("it hung", "in log_metrics", "ddp_model("),
    "skip_alone": ("it hung", "loss.backward()", "ddp_model("),
    "own_loss_logged": ("it logged rank 0's own loss: no all-reduce",),
    "sum_logged": ("it logged their sum: divide by the world size",),
    "every_rank_prints": ("ranks [0, 1] printed the mean loss",),
    "stop_flag_min": ("NaN parameters",),
}
def assert_every_pitfall(r):
    for name, pitfall in PITFALLS.items():  # each flag of its row: reproduced, fixed
        assert all(r[flag] is True for flag in pitfall.results), (name, pitfall.results)
    # the live ranks: monitored_barrier named the ranks that waited (a held claim, below)
    assert r["monitored_barrier_reproduced"] is True
    assert r["printing_console_ranks"] == 1
    assert r["printing_log_files"] >= 2 * r["nproc"]  # stdout and stderr of every rank
    # the faulthandler dumps located every rank of the hang
    assert r["hang_ranks_located"] == r["nproc"]
    # the desync shows right after the skipped batch, not at its end
    assert r["desync_first_divergent_step"] >= 0
    # a failure bounded by the process-group timeout surfaces in more than that timeout,
    # and well before the runner's own limit would have killed it (it was not killed)
    for name in [name for name, pitfall in PITFALLS.items() if TIMED_OUT in pitfall.prints]:
        assert r[f"{name}_seconds"] > r["pg_timeout_s"], name
    assert r["mismatch_plain_named_it"] is False  # without DETAIL nothing names the shapes
    claims = {c["template"].split(",")[0].split(":")[0]: c for c in r["claims"]}
    # monitored_barrier named the ranks that waited in the skipped all-reduce, not rank 0
    assert claims["monitored_barrier"]["outcome"] == "held", claims["monitored_barrier"]
    # DETAIL cannot see the out-of-phase steps: held, or skipped where DDP cannot run under it
    detail = claims["Under TORCH_DISTRIBUTED_DEBUG=DETAIL the skipped step raised nothing"]
    assert detail["outcome"] in ("held", "skipped"), detail


@pytest.mark.slow
# 3 ranks, the reference answers: the browser test's run of it (conftest.RUN_ONCE_PARAMETERS)
@pytest.mark.parametrize("nproc", [3])
def test_every_pitfall_reproduced_and_fixed(nproc, tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_SOLUTIONS", "1")  # the kernel inherits it (as the browser's)
    r = execute_notebook("08", tmp_path, NPROC=nproc)
    assert_every_pitfall(r)
    # the reference prediction is where the run's ranks stood; the reference fix finished
    assert solved(r) == {"where_stuck": "solved", "logging_fix": "solved"}
    assert processes_with(str(tmp_path)) == [], "a process outlived the notebook"


@pytest.mark.slow
def test_wrong_answers_through_the_whole_notebook(tmp_path, monkeypatch):
    """3 ranks (the browser's run: its launches, which the answers do not change, replay there;
    make verify runs 2 at full size), the wrong answers of solutions_wrong/nb08 (the last rank
    said to wait in the backward) and the catalogue's fix of the stop alone (still hangs in
    log_metrics): both tasks NOT YET, and the notebook runs to its end."""
    wrong = wrong_answers("nb08", tmp_path / "wrong",
                          {"pitfall_logging.py": ("logging_fix", "only_stop_fixed")})  # fmt: skip
    monkeypatch.setenv("COURSE_SOLUTIONS", str(wrong))
    r = execute_notebook("08", tmp_path, attendee_loop=True, NPROC=3)
    assert_every_pitfall(r)
    assert solved(r) == {"where_stuck": "not yet", "logging_fix": "not yet"}
    assert solved(r)["logging_fix"] != "solved" and r["hang_fixed"] is True
    assert processes_with(str(tmp_path)) == [], "a process outlived the notebook"


@pytest.mark.slow
def test_the_logging_fix_check_names_every_planted_mistake(setup, tmp_path):
    """The notebook's own check on every wrong fix of the catalogue and on the reference, their
    facts from ONE torchrun launch that runs each in turn: each wrong fix rejected with the
    mistake it plants (a hang names where each rank waited), each message its own; the
    reference accepted."""
    check = task_checks("08")["check_logging_fix"]
    files = sorted(planted("logging_fix", tmp_path / "planted").values())
    assert {f.stem for f in files} == set(CATALOGUE)
    reference = ROOT / "solutions" / "pitfall_logging.py"
    facts = facts_of_each([reference, *files], setup, tmp_path)
    ok, message = check(reference, setup, facts[0])
    assert ok is True and "rank 0 logged the mean of the 2 ranks' losses" in message, message
    messages = {}
    for path, found in zip(files, facts[1:], strict=True):
        ok, message = check(path, setup, found)
        assert ok is False and all(w in message for w in CATALOGUE[path.stem]), (path.stem, message)
        messages[path.stem] = message
    assert len(set(messages.values())) == len(CATALOGUE)


def test_the_starter_is_known_by_its_hash_and_the_reference_knows_where_ranks_wait():
    """The notebook calls pitfall_logging.py "not tried" while it is byte for byte the shipped
    starter (its sha-256 in the check's cell); the reference prediction follows the launcher's
    collectives (the notebook's runs check it against where the ranks stood)."""
    source = "\n".join(c.source for c in nbformat.read(notebook_path("08"), as_version=4).cells)
    shipped = hashlib.sha256((ROOT / "launchers" / "pitfall_logging.py").read_bytes())
    assert f'== "{shipped.hexdigest()[:12]}"' in source
    stuck = load_module(ROOT / "solutions" / f"{STEM}.py").stuck
    assert stuck(2, 3) == ("log_metrics", "forward")  # the notebook's run
    assert stuck(5, 1) == ("backward", "gather_object")  # the stop comes first
    assert stuck(3, 5) == ("log_metrics", "barrier")  # the log meets the checkpoint barrier
    assert load_module(WRONG / "nb08" / f"{STEM}.py").stuck != stuck(2, 3)


def markdown(*stems: str) -> str:
    cells = [c for stem in stems
             for c in json.loads((ROOT / "notebooks" / f"{stem}.ipynb").read_text())["cells"]]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def test_the_facts_the_notebooks_teach_are_this_torchs():
    """Timeouts, Join's divisor, SyncBatchNorm's collective, static_graph and the flight
    recorder's variables, as notebooks 08 and 09 state them, checked against the installed
    torch."""
    import inspect
    from datetime import timedelta

    import torch
    from torch.distributed import constants
    from torch.distributed.elastic.agent.server import local_elastic_agent
    from torch.nn.modules import _functions
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.nn.parallel import distributed

    assert constants.default_pg_timeout == timedelta(minutes=30)  # gloo
    if constants.default_pg_nccl_timeout is not None:  # a build with NCCL
        assert constants.default_pg_nccl_timeout == timedelta(minutes=10)
    hook = inspect.getsource(DDP.join_hook)
    assert 'kwargs.get("divide_by_initial_world_size", True)' in hook
    forward = inspect.getsource(_functions.SyncBatchNorm.forward)
    assert "all_gather" in forward and "torch.cat([mean, invstd, count]" in forward
    assert "static_graph" in inspect.signature(DDP.__init__).parameters
    c10d = Path(torch.__file__).parent / "include/torch/csrc/distributed/c10d"
    if c10d.is_dir():  # headers ship with the wheel
        assert '"TORCH_NCCL_DUMP_ON_TIMEOUT"' in (c10d / "ProcessGroupNCCL.hpp").read_text()
        recorder = (c10d / "FlightRecorder.hpp").read_text()
        assert '{"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"}, 2000' in recorder
    # torchrun's agent sets NCCL's async error handling to 1 (tear down); without torchrun
    # the default is 3 (SkipCleanUp: tear down without aborting the communicators)
    agent = inspect.getsource(local_elastic_agent)
    assert '"TORCH_NCCL_ASYNC_ERROR_HANDLING": os.getenv(' in agent
    assert '"TORCH_NCCL_ASYNC_ERROR_HANDLING", str(1)' in agent
    if c10d.is_dir():
        nccl = (c10d / "ProcessGroupNCCL.hpp").read_text()
        assert "the default value (3 - SkipCleanUp)" in nccl and "SkipCleanUp = 3" in nccl
    # monitored_barrier: rank 0 reports the ranks that did not reach it
    barrier = inspect.getsource(torch.distributed.monitored_barrier)
    assert "Rank 0 will block until all send /recv from other ranks are processed" in barrier
    assert "wait_all_ranks" in inspect.signature(torch.distributed.monitored_barrier).parameters
    # ... on gloo only, and nothing makes an NCCL job a gloo group for it: the program does
    assert "monitored_barrier is only implemented for GLOO backend." in barrier
    assert 'dist.new_group(backend="gloo")' in markdown("08_pitfalls_and_debugging")
    # DETAIL wraps every gloo/NCCL group in a ProcessGroupWrapper (its checks, in C++: a
    # monitored barrier, then the fingerprints: sequence number, op, shapes, dtypes, devices)
    c10d_py = inspect.getsource(torch.distributed.distributed_c10d)
    assert "if get_debug_level() == DebugLevel.DETAIL:" in c10d_py
    assert "wrapped_pg = _ProcessGroupWrapper(wrapped_pg, helper_pg)" in c10d_py
    # DDP leaves parameters that need no gradient out of its buckets (a frozen branch never
    # raises the unused-parameter error), and its join hook mirrors find_unused_parameters'
    # all-reduce of the used-parameter map
    assert "if param.requires_grad" in inspect.getsource(DDP._build_params_for_reducer)
    main_hook = inspect.getsource(distributed._DDPJoinHook.main_hook)
    assert "if ddp.find_unused_parameters:" in main_hook
    assert "ddp._match_unused_params_allreduce()" in main_hook
    # and the notebooks say so, not the old "10 minutes (the default)"
    for stem in ("08_pitfalls_and_debugging", "09_pitfalls_in_real_training"):
        assert "30 minutes with gloo and 10 with NCCL" in markdown(stem), stem
    real = markdown("09_pitfalls_in_real_training")
    assert "divide_by_initial_world_size=True" in real and "all-gathers" in real
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE" in real and "static_graph=True" in real
    assert "all_reduce_local_used_map" in real and "never raises the error" in real
    both = markdown("08_pitfalls_and_debugging", "09_pitfalls_in_real_training")
    assert "10 minutes (the default" not in both
    assert "segfault" not in both  # what DDP does under DETAIL is a claim of notebook 08's run
    debugging = markdown("08_pitfalls_and_debugging")
    assert "PYTHONUNBUFFERED=1" in debugging and "8 KiB" in debugging


def notebook_cell(stem_prefix, text):
    """The source of the one code cell of the notebook that holds ``text``."""
    (source,) = [c.source for c in nbformat.read(notebook_path(stem_prefix), as_version=4).cells
                 if c.cell_type == "code" and text in c.source]
    return source


def broken_run(ok, output="", checksums=(1.0, 1.0), script=None):
    """A finished (ok) or failed run of ``script`` as the notebooks' judgement reads it (a fake
    RunResult)."""
    from types import SimpleNamespace
    return SimpleNamespace(ok=ok, output=output, name="broken", script=script,
                           failure=lambda: "" if ok else "broken failed (exit code 1)",
                           metrics={"ranks": [{"checksum": c} for c in checksums]})


def judged_by(stem_prefix, backend):
    """The notebook's own ended_broken, with the backend its tier would give its runs: a cell
    that defines it, else its lesson module's ``ended_broken(run, backend)``."""
    import importlib
    from types import SimpleNamespace
    cells = nbformat.read(notebook_path(stem_prefix), as_version=4).cells
    if not any("def ended_broken(" in c.source for c in cells if c.cell_type == "code"):
        lesson = importlib.import_module(f"coursekit.lessons.nb{stem_prefix}")
        return lambda run: lesson.ended_broken(run, backend)
    namespace = {"setup": SimpleNamespace(backend=backend)}
    exec(notebook_cell(stem_prefix, "def ended_broken("), namespace)
    return namespace["ended_broken"]


# 08's broken launchers that NCCL promises nothing for (nb08.PITFALLS), and 09's cell's judge
TIMED_OUT_JUDGES = [*[("08", p.broken) for p in PITFALLS.values() if p.nccl_promises_nothing],
                    ("09", None)]  # fmt: skip


@pytest.mark.parametrize("stem_prefix, launcher", TIMED_OUT_JUDGES)
def test_broken_runs_are_judged_by_what_their_backend_promises(stem_prefix, launcher):
    """Issue 29 N5: gloo's checks stay as strict (a failure with its timeout text); on NCCL,
    which promises nothing for mismatched collectives, a failure of any kind (the watchdog's
    abort at the timeout: 'collective operations will be aborted asynchronously and the
    process will crash', torch/distributed/distributed_c10d.py) or a finished run whose ranks
    ended with different parameters (a wrong result) is the pitfall reproduced."""
    from functools import partial
    gloo, nccl = judged_by(stem_prefix, "gloo"), judged_by(stem_prefix, "nccl")
    run = partial(broken_run, script=launcher and f"../launchers/{launcher}")
    timed_out = "RuntimeError: [../third_party/gloo/...] Timed out waiting 5000ms for recv"
    assert gloo(run(False, timed_out)) is True
    assert gloo(run(False, "Signal 6 (SIGABRT) received")) is False  # no timeout text
    assert gloo(run(True, checksums=(1.0, 2.0))) is False
    assert nccl(run(False, "Signal 6 (SIGABRT) received")) is True  # the watchdog's
    assert nccl(run(True, checksums=(1.0, 2.0))) is True  # garbage, no error
    assert nccl(run(True, checksums=(1.0, 1.0))) is False  # a run that went right


@pytest.mark.parametrize("name", [name for name, p in PITFALLS.items() if p.prints])
def test_each_broken_run_is_judged_by_what_its_row_says_it_prints(name):
    """nb08.ended_broken reads the run's row of PITFALLS (by its launcher): a failure that
    prints every text of the row (one of each tuple) is the pitfall reproduced; a failure
    without them, or a finished run, is not, on every backend that promises the texts."""
    from functools import partial

    from coursekit.lessons.nb08 import ended_broken
    pitfall = PITFALLS[name]
    said = "\n".join(t if isinstance(t, str) else t[-1] for t in pitfall.prints)
    run = partial(broken_run, script=f"../launchers/{pitfall.broken}")
    for backend in ("gloo",) if pitfall.nccl_promises_nothing else ("gloo", "nccl"):
        assert ended_broken(run(False, said), backend) is True, backend
        assert ended_broken(run(False, "Signal 6 (SIGABRT) received"), backend) is False
        assert ended_broken(run(True, said), backend) is False


def test_the_pitfalls_table_agrees_with_the_course_and_the_notebook():
    """nb08.PITFALLS, the notebook's one list of its pitfalls, and what restates it: 08's row of
    the course table holds exactly the pitfalls' launchers (each broken one of kind broken,
    unless it is its own fix: it garbles, it does not fail; each fix of kind launcher); the
    notebook's first table has a row per pitfall, in its section, naming its launchers; and a
    code cell runs each launcher."""
    row = notebook("08")
    named = {n for p in PITFALLS.values() for n in (p.broken, p.fixed) if n}
    assert set(row.files) == named, "a launcher of 08 with no row in nb08.PITFALLS, or the reverse"
    cells = nbformat.read(notebook_path("08"), as_version=4).cells
    table = [line for line in cells[0].source.splitlines() if line.startswith("| ")]
    runs = "\n".join(c.source for c in cells
                     if c.cell_type == "code" and not c.source.startswith("%%writefile"))
    for name, p in PITFALLS.items():
        launchers = sorted({p.broken, p.fixed} - {None})
        assert row.files[p.broken] == (LAUNCHER if p.broken == p.fixed else BROKEN), name
        assert p.fixed is None or row.files[p.fixed] == LAUNCHER, name
        assert any(line.startswith(f"| {p.section} |") and all(f"`{n}`" in line for n in launchers)
                   for line in table), f"{name}: no row of section {p.section} names {launchers}"
        assert all(f'"../launchers/{n}"' in runs for n in launchers), f"{name}: no cell runs it"


def test_where_the_hung_ranks_stood_is_gloos_story():
    """With NCCL the ranks' Python does not wait inside a collective (only the barrier holds
    the CPU): notebook 08 skips its stack-dump claim there, saying why, and keeps it on gloo."""
    from types import SimpleNamespace

    import coursekit
    from coursekit.lessons import nb08
    for backend, outcome in (("nccl", "skipped"), ("gloo", "held")):
        claims, results = coursekit.Claims(), {}
        hang = SimpleNamespace(nproc=2, where_ranks_stood=lambda: {
            0: "pitfall_hang.py:157 in main: dist.barrier()",
            1: "pitfall_hang.py:148 in main: loss = F.cross_entropy(ddp_model(x), y)"})
        exec(notebook_cell("08", "hang_where = hang.where_ranks_stood()"),
             {"hang": hang, "claims": claims, "results": results, "lesson": nb08,
              "setup": SimpleNamespace(backend=backend)})
        (made,) = claims
        assert made.outcome == outcome and "{" not in made.text, made
        assert results == {"hang_ranks_located": 2}
