"""Notebook 08, pitfalls and debugging: its claims and results record, and how it judges and
reads its broken runs.

Each ``claim_*`` also records its figures in the notebook's ``results`` (the record ``save``
writes), under the names the tests read. ``PITFALLS`` is the one list of the notebook's pitfalls
(CONTRIBUTING.md: "Adding a pitfall to notebook 08").
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from ..result import LauncherTimeout
from ..results import save_results
from ..runner import fresh_run_dir, run_command, run_launcher
from . import closing

STEM = "08_pitfalls_and_debugging"
# a collective that waited past the process-group timeout: gloo says one of the first two
TIMED_OUT = ("Timed out waiting", "Application timeout caused pair closure",
             "Watchdog caught collective operation timeout")
# what TORCH_DISTRIBUTED_DEBUG=DETAIL says when ranks all-reduce tensors of different shapes
DETAIL_NAMES_IT = ("Detected mismatch between collectives on ranks", "OpType=ALLREDUCE",
                   "Tensor shapes")


@dataclass(frozen=True)
class Pitfall:
    """One row of PITFALLS: a pitfall the notebook shows, by its broken launcher and its fix.
    The judges here, save and the tests read it; tests/test_08_pitfalls_and_debugging.py checks
    it against the notebook (its first table, the cells that run each launcher) and the course
    table (CONTRIBUTING.md, "Adding a pitfall to notebook 08")."""

    section: str  # the notebook's section that shows it: its row of the first cell's table
    broken: str  # launchers/<broken>, wrong on purpose (kind: broken; launcher if its own fix)
    fixed: str | None  # launchers/<fixed>, its fix (kind: launcher); None: no launcher fixes it
    prints: tuple = ()  # every text the broken run's failure prints (a tuple: any one of them)
    nccl_promises_nothing: bool = False  # with NCCL a failure of any kind, or ranks that end
    # with different parameters, is the pitfall: NCCL promises nothing for mismatched collectives
    results: tuple[str, ...] = ()  # its flags in the results record, each True (save asserts)


PITFALLS = {
    "hang": Pitfall("1", "pitfall_hang.py", "pitfall_hang_fixed.py", prints=(TIMED_OUT,),
                    nccl_promises_nothing=True, results=("hang_reproduced", "hang_fixed")),
    "desync": Pitfall("2", "pitfall_desync.py", "pitfall_desync_fixed.py", prints=(TIMED_OUT,),
                      nccl_promises_nothing=True, results=("desync_reproduced", "desync_fixed")),
    # its plain run names nothing; its run under TORCH_DISTRIBUTED_DEBUG=DETAIL prints these
    "mismatch": Pitfall("2", "collective_mismatch.py", None, prints=DETAIL_NAMES_IT,
                        results=("mismatch_detail_reproduced",)),
    # garbles, never fails: the fix is the same launcher, --one-write, torchrun's options
    "printing": Pitfall("3", "print_ranks.py", "print_ranks.py", results=("printing_fixed",)),
    # the learner's task: it hangs until the runner's limit, and the fix is theirs
    "logging": Pitfall("4", "pitfall_logging.py", None),
}  # fmt: skip


def pitfall_of(run) -> Pitfall:
    """The row of PITFALLS whose broken launcher ``run`` ran."""
    (pitfall,) = [p for p in PITFALLS.values() if p.broken == Path(run.script or "").name]
    return pitfall


def fail_runner(setup, timeout_s: float):
    """``fail_run(script, args, **kwargs)``: a run expected to fail, quiet, bounded by
    ``timeout_s``; it never raises for its failure."""
    def fail_run(script, args=(), **kwargs):
        return run_launcher(script, [str(a) for a in args], setup=setup, check=False,
                            timeout_s=timeout_s, echo=False, **kwargs)
    return fail_run


def expect_failure(run, *texts) -> bool:
    """True if the run failed and its output has every text of ``texts`` (a tuple: any one)."""
    missing = [t for t in texts
               if not any(alt in run.output for alt in (t if isinstance(t, tuple) else (t,)))]
    print(run.failure() or f"{run.name} did not fail")
    print("every expected text found" if not missing else f"MISSING: {missing}")
    return not run.ok and not missing


def ended_broken(run, backend: str) -> bool:
    """Did a broken run end as its backend promises (its row of PITFALLS)? Failed, with the
    texts it prints (gloo: the timeout's). Where NCCL promises nothing for mismatched
    collectives: failed (its watchdog aborts at the timeout) or a wrong result (parameters
    differ)."""
    pitfall = pitfall_of(run)
    if backend != "nccl" or not pitfall.nccl_promises_nothing:
        return expect_failure(run, *pitfall.prints)
    wrong = run.ok and len({r["checksum"] for r in run.metrics["ranks"]}) > 1
    print(run.failure() or f"{run.name} finished; the ranks' parameters differ: {wrong}")
    return not run.ok or wrong


def claim_hang_timeout(claims, results: dict, *, hang, hang_ok: bool, pg_timeout: float,
                       limit: float) -> None:  # fmt: skip
    """Whether the process-group timeout ended the hang, in its window."""
    results.update(hang_reproduced=hang_ok, hang_seconds=hang.seconds)
    claims.check(
        "The process-group timeout turned the hang into an error: the run ended after "
        "{seconds:.1f} s (timeout {pg_timeout} s, plus start-up), before the runner's limit of "
        "{limit} s",
        "timed_out == True and seconds > pg_timeout and seconds < limit",
        timed_out=hang_ok and not hang.ok, seconds=hang.seconds, pg_timeout=pg_timeout,
        limit=limit,
        otherwise="the run did not end with the timeout error in that window ({seconds:.1f} s; "
        "timeout error seen: {timed_out}): the runner's limit stopped it, or it failed otherwise "
        "(its output above says how)")


def claim_where(claims, results: dict, where: dict, *, nproc: int, backend: str) -> None:
    """Whether the stack dumps located every rank of the hang: rank 0 in the barrier, the
    others in their next forward (gloo; with NCCL the claim is skipped, saying why)."""
    results.update(hang_ranks_located=len(where))
    text = ("The stack dumps located all {located} ranks: rank 0 in the barrier, the others in "
            "their next forward")
    # NCCL queues a collective on the GPU and returns: only its barrier holds the CPU
    if backend == "nccl":
        claims.skip(text, expect="the stack dumps would locate every rank: rank 0 in the "
                    "barrier, the others in their next forward",
                    why="with NCCL a rank's Python waits where it next synchronizes with its GPU, "
                    "not in the collective")
        return
    claims.check(text, "located == nproc and in_barrier == True and in_forward == True",
                 located=len(where), nproc=nproc, in_barrier="barrier" in where.get(0, ""),
                 in_forward=all("ddp_model(" in where.get(r, "") for r in range(1, nproc)),
                 otherwise="{located} of {nproc} ranks printed a dump with a launcher frame "
                 "(rank 0 in the barrier: {in_barrier}, the others in the forward: {in_forward}): "
                 "a busy machine can delay a dump past the timeout")  # fmt: skip


def claim_hang_fixed(claims, results: dict, *, run) -> None:
    """Whether the fixed run finished with the same parameters on every rank."""
    fixed = run.ok and len({r["checksum"] for r in run.metrics["ranks"]}) == 1
    results.update(hang_fixed=fixed)
    nproc = run.nproc
    claims.check("Fixed: with the barrier outside the `if`, the run finished and all {nproc} ranks "
                 "ended with the same parameters", "fixed == True", fixed=fixed,
                 nproc=nproc, otherwise="the fixed run did not finish with equal "
                 "parameter checksums on every rank (its output above says why)")  # fmt: skip


def checksums_by_step(run) -> dict:
    """rank -> {step: checksum} from the ranks' 'step N  loss L  checksum C' lines (whole)."""
    table = {}
    for rank in range(run.nproc):
        for text in run.rank_lines(rank):
            if m := re.fullmatch(r"step (\d+)  loss \S+  checksum (-?\d+\.\d+)", text):
                table.setdefault(rank, {})[int(m.group(1))] = float(m.group(2))
    return table


def claim_desync(claims, results: dict, *, desync, failed: bool, table: dict, first_divergent,
                 bad_step: int) -> None:  # fmt: skip
    """Whether the skipped batch shifted the ranks by one step, silently until the timeout:
    the last rank (the skipper) shows at step s + 1 the checksum the others show at step s."""
    skipper = desync.nproc - 1
    pairs = [table[skipper][s + 1] == other[s] for r, other in table.items() if r != skipper
             for s in other if s >= bad_step and s + 1 in table.get(skipper, {})]
    results.update(desync_reproduced=failed and first_divergent is not None,
                   desync_first_divergent_step=-1 if first_divergent is None else first_divergent,
                   desync_seconds=desync.seconds)
    claims.check(
        "Nothing failed at the bad batch: the ranks first disagreed at step {first} (where the "
        "skipping rank printed none), and from then on it showed at step s + 1 the checksum the "
        "others showed at step s ({pairs} steps compared): the same updates, one step apart. The "
        "run failed only at its end, at the timeout, after {seconds:.1f} s",
        "timed_out == True and first == bad_step and pairs > 0 and unequal == 0",
        timed_out=failed and not desync.ok,
        first=-1 if first_divergent is None else first_divergent, bad_step=bad_step,
        pairs=len(pairs), unequal=pairs.count(False), seconds=desync.seconds,
        otherwise="the checksums tell another story (first disagreement at step {first}; "
        "{unequal} of {pairs} shifted steps differ; timeout error: {timed_out}): the ranks' lines "
        "above show it")  # fmt: skip


def claim_monitored(claims, results: dict, *, error: str | None, nproc: int) -> None:
    """Whether monitored_barrier named, on rank 0, the ranks that waited in the skipped
    all-reduce (every rank but 0)."""
    named = re.findall(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier", error or "")
    named = sorted(int(r) for r in named[0].split(",")) if named else []
    monitored_ok = named == list(range(1, nproc))
    results.update(monitored_barrier_reproduced=monitored_ok)
    claims.check("monitored_barrier, on rank 0, named rank(s) {named} as missing: the ranks "
                 "waiting in the all-reduce rank 0 skipped, not rank 0, which skipped it",
                 "named_the_waiting == True",
                 named=", ".join(map(str, named)) or "none", named_the_waiting=monitored_ok,
                 otherwise="monitored_barrier named rank(s) {named} here: rank 0's error above "
                 "says what")  # fmt: skip


def show_mismatch(results: dict, plain, detail) -> None:
    """How each rank of the mismatched all-reduce ended, plain and under DETAIL; records whether
    the plain run's output named the mismatch and whether DETAIL's error named the operation
    and the shapes."""
    detail_ok = expect_failure(detail, *pitfall_of(detail).prints)
    for rank in range(plain.nproc):
        tb = plain.traceback(rank)
        side = next((t for t in plain.rank_lines(rank) if t.startswith("all_reduce returned")),
                    tb.exception[-1] if tb and tb.exception else "no result and no traceback")
        print(f"plain, rank {rank}: {side[:150]}")
    said = next((t for _, t in detail.lines if "Detected mismatch" in t), "")
    for rank, op, shape in re.findall(r"Rank (\d+) is running collective: CollectiveFingerPrint"
                                      r"\(SequenceNumber=\d+, OpType=(\w+), "
                                      r"TensorShape=(\[[^\]]*\])", said):
        print(f"DETAIL, rank {rank}: {op}, TensorShape={shape}")
    results.update(mismatch_detail_reproduced=detail_ok, mismatch_detail_seconds=detail.seconds,
                   mismatch_plain_named_it="Detected mismatch" in plain.output)


def claim_detail(claims, results: dict, *, plain, desync_detail, bad_step: int) -> None:
    """What TORCH_DISTRIBUTED_DEBUG=DETAIL said about the mismatch (show_mismatch recorded it),
    and about the desync."""
    plain_said = results["mismatch_plain_named_it"]
    detail_ok = results["mismatch_detail_reproduced"]
    detail_steps = checksums_by_step(desync_detail).get(0, {})  # rank 0's steps under DETAIL
    claims.check("Without DETAIL, the mismatched all-reduce gave no word about shapes (exit code "
                 "{plain_exit})", "plain_named_it == False", plain_named_it=plain_said,
                 plain_exit=plain.returncode, otherwise="the plain run's output named "
                 "the mismatch here (exit code {plain_exit}): this build checks more than the "
                 "lesson's")  # fmt: skip
    claims.check("With TORCH_DISTRIBUTED_DEBUG=DETAIL the error named the operation and both "
                 "shapes", "detail_named_it == True", detail_named_it=detail_ok,
                 otherwise="DETAIL's error lacked an expected text (the MISSING line above)")
    detail_claim = ("Under TORCH_DISTRIBUTED_DEBUG=DETAIL the skipped step raised nothing: rank 0 "
                    "went on to step {last} (the bad batch: step {bad_step})")
    if not detail_steps:  # DDP got to no step under DETAIL: it says nothing about the desync
        why = desync_detail.failure().splitlines()[0].split(": ", 1)[-1]
        if crashed_at := desync_detail.where_ranks_stood().get(0):  # PYTHONFAULTHANDLER's stack
            why = (why.replace("; no Python traceback", "")
                   + f"; faulthandler: rank 0 at {crashed_at}")
        claims.skip(detail_claim, bad_step=bad_step,
                    expect="rank 0 would be followed past the bad batch (step {bad_step}) under "
                    "DETAIL", why=f"DDP reached no step under DETAIL on this build ({why})")
    else:
        claims.check(detail_claim, "last > bad_step",
                     last=max(detail_steps), bad_step=bad_step,
                     otherwise="DETAIL stopped rank 0 at step {last}, no later than the bad batch")


def claim_desync_fixed(claims, results: dict, *, in_step: bool, ok: bool,
                       bad_step: int) -> None:  # fmt: skip
    results.update(desync_fixed=ok and in_step)
    claims.check("Fixed: every rank skipped step {bad_step}, and the checksums agreed at every "
                 "other step", "in_step == True and ok == True", in_step=in_step, ok=ok,
                 bad_step=bad_step, otherwise="the fixed run did not stay in step (finished: "
                 "{ok}, equal checksums at every step: {in_step})")  # fmt: skip


def run_plain_torchrun(setup, script, args, *, name: str):
    """``torchrun --nproc-per-node N --log-dir DIR script args``, as typed at a shell: every
    rank's output unbuffered, as plain ``python -u`` writes it (not the course runner's whole
    lines), all in one pipe."""
    run_dir = fresh_run_dir(setup, name)
    return run_command([sys.executable, "-m", "torch.distributed.run", "--standalone",
                        "--nproc-per-node", str(setup.nproc), "--log-dir", str(run_dir / "logs"),
                        str(script), *map(str, args), "--out", str(run_dir / "out")],
                       setup=setup, name=name, run_dir=run_dir, echo=False,
                       env={"COURSE_STDOUT": "unbuffered"})  # fmt: skip


LINE = re.compile(r"^rank \d+ line \d+ of \d+$")  # one line of print_ranks.py, whole


def claim_garbled(claims, results: dict, raw, *, nproc: int) -> None:
    """Count the printed lines of the plain run that came out broken; show a few."""
    printed = [t for _, t in raw.lines if "line" in t and "of" in t]
    garbled = [t for t in printed if not LINE.match(t)]
    print(f"{len(printed)} printed lines seen, {len(garbled)} garbled; for example:",
          *(garbled[:5] or printed[:3]), sep="\n")
    results.update(printing_garbled_lines=len(garbled))
    claims.check("{garbled} of {printed} lines came out garbled: {nproc} unbuffered ranks writing "
                 "to one pipe at once interleaved the pieces of their lines", "garbled > 0",
                 garbled=len(garbled), printed=len(printed), nproc=nproc,
                 otherwise="no line broke in this run ({printed} lines from {nproc} ranks): the "
                 "ranks' writes did not overlap this time, though each piece of a line is a "
                 "write of its own")  # fmt: skip


def claim_tidy(claims, results: dict, tidy, *, nproc: int) -> None:
    """What --local-ranks-filter 0 left on the console, and the log files torchrun kept."""
    shown_ranks = sorted({r for r, _ in tidy.lines if r is not None})
    intact = all(LINE.match(t) for r, t in tidy.lines
                 if r is not None and t.startswith("rank ") and " line " in t)
    log_files = sorted(tidy.run_dir.joinpath("logs").rglob("*.log"))
    cpp = [[t for t in p.read_text(errors="replace").splitlines()
            if re.match(r"^\[?[IWE]\d{4} ", t)] for p in log_files]  # C++ logger lines
    print(f"torchrun's log files: {[str(p.relative_to(tidy.run_dir)) for p in log_files]}; "
          f"C++ logger lines: {[len(lines) for lines in cpp]}")
    if shown := next(((p, lines) for p, lines in zip(log_files, cpp, strict=True) if lines), None):
        print(f"the first of local rank {shown[0].parent.name}'s {shown[0].name}:",
              *(t if len(t) <= 120 else t[:117] + "..." for t in shown[1][:4]), sep="\n  ")
    fixed = tidy.ok and intact and shown_ranks == [0]
    results.update(printing_console_ranks=len(shown_ranks), printing_fixed=fixed,
                   printing_log_files=len(log_files))
    claims.check("With --local-ranks-filter 0 the console showed rank 0's lines only, all intact, "
                 "and torchrun kept {files} log files, one stdout and one stderr per rank",
                 "fixed == True and files >= two_per_rank", fixed=fixed,
                 files=len(log_files), two_per_rank=2 * nproc, otherwise="the console or the "
                 "log files were not as expected (console ranks, intact and filtered: {fixed}; "
                 "{files} files)")  # fmt: skip


PLACES = {"ddp_model(": "forward", ".backward()": "backward", "dist.barrier()": "barrier",
          "gather_object": "gather_object", " in log_metrics:": "log_metrics"}  # fmt: skip


def run_to_its_limit(setup, script, args, *, limit_s: float):
    """Run ``script`` until it ends or ``limit_s`` passes (then the runner asks every rank for
    its stack, SIGUSR1, and stops the run); say how it ended."""
    try:
        run = run_launcher(script, [str(a) for a in args], setup=setup, timeout_s=limit_s,
                           check=False, echo=False)
    except LauncherTimeout as stopped:
        run = stopped.result
    print(run.failure() or "it finished: no rank was stuck")
    return run


def where_stuck(run) -> tuple:
    """(rank 0's place, the last rank's place), each named as in the task (PLACES), from the
    stacks the ranks printed; "finished" for a rank that printed none."""
    stood = run.where_ranks_stood()
    return tuple(next((p for text, p in PLACES.items() if text in stood[r]), stood[r])
                 if r in stood else "finished" for r in (0, run.nproc - 1))


def save(setup, claims, tasks, *, results: dict, pg_timeout: float) -> None:
    """The results record: per pitfall, reproduced, fixed and seconds to surface; every
    pitfall must have been reproduced and fixed (each flag of its row of PITFALLS recorded)."""
    save_results(STEM, {**results, "pg_timeout_s": pg_timeout}, setup, claims=claims, tasks=tasks)
    reproduced = {k: v for k, v in results.items() if k.endswith("_reproduced")}
    fixes = {k: v for k, v in results.items() if k.endswith("_fixed")}
    print("reproduced:", reproduced, "\nfixed:", fixes)
    unrecorded = [flag for p in PITFALLS.values() for flag in p.results if flag not in results]
    assert all(reproduced.values()) and all(fixes.values()) and not unrecorded, unrecorded


def close(setup, claims) -> None:
    closing(setup, claims, STEM)


def plot_desync(table: dict, *, skipper: int, bad_step: int) -> None:
    """Each rank's parameter checksum by step: after the skipped batch, the skipper's curve is
    the others' shifted by one step (its step s + 1 shows their step s)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.2))
    for rank, per_step in sorted(table.items()):
        steps = sorted(per_step)
        ax.plot(steps, [per_step[s] for s in steps], marker="o" if rank == skipper else ".",
                linestyle="--" if rank == skipper else "-", alpha=0.85,
                label=f"rank {rank}" + (" (skipped the bad batch)" if rank == skipper else ""))
    ax.axvline(bad_step, color="gray", linestyle=":", linewidth=1)
    ax.annotate(f"bad batch (step {bad_step})", (bad_step, ax.get_ylim()[1]), fontsize=8,
                xytext=(4, -12), textcoords="offset points")  # fmt: skip
    ax.set(xlabel="step (as each rank counts it)", ylabel="parameter checksum",
           title="The desync: one rank's steps run one behind the others'")
    ax.legend(fontsize=8)
    plt.show()
