"""Notebook 08, pitfalls and debugging: its claims and results record."""

from __future__ import annotations

from ..results import save_results
from . import closing

STEM = "08_pitfalls_and_debugging"


def claim_hang_timeout(claims, *, hang, hang_ok: bool, pg_timeout: float, limit: float) -> None:
    """Whether the process-group timeout ended the hang, in its window."""
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


def claim_hang_fixed(claims, *, fixed: bool, nproc: int) -> None:
    claims.check("Fixed: with the barrier outside the `if`, the run finished and all {nproc} ranks "
                 "ended with the same parameters", "fixed == True", fixed=fixed,
                 nproc=nproc, otherwise="the fixed run did not finish with equal "
                 "parameter checksums on every rank (its output above says why)")  # fmt: skip


def claim_desync(claims, *, desync, failed: bool, first_divergent, bad_step: int,
                 pairs: list) -> None:  # fmt: skip
    """Whether the skipped batch shifted the ranks by one step, silently until the timeout."""
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


def claim_monitored(claims, *, named: list, monitored_ok: bool) -> None:
    claims.check("monitored_barrier, on rank 0, named rank(s) {named} as missing: the ranks "
                 "waiting in the all-reduce rank 0 skipped, not rank 0, which skipped it",
                 "named_the_waiting == True",
                 named=", ".join(map(str, named)) or "none", named_the_waiting=monitored_ok,
                 otherwise="monitored_barrier named rank(s) {named} here: rank 0's error above "
                 "says what")  # fmt: skip


def claim_detail(claims, *, mismatch_plain, plain_said: bool, detail_ok: bool, desync_detail,
                 detail_steps: dict, bad_step: int) -> None:  # fmt: skip
    """What TORCH_DISTRIBUTED_DEBUG=DETAIL said about the mismatch, and about the desync."""
    claims.check("Without DETAIL, the mismatched all-reduce gave no word about shapes (exit code "
                 "{plain_exit})", "plain_named_it == False", plain_named_it=plain_said,
                 plain_exit=mismatch_plain.returncode, otherwise="the plain run's output named "
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


def claim_desync_fixed(claims, *, in_step: bool, ok: bool, bad_step: int) -> None:
    claims.check("Fixed: every rank skipped step {bad_step}, and the checksums agreed at every "
                 "other step", "in_step == True and ok == True", in_step=in_step, ok=ok,
                 bad_step=bad_step, otherwise="the fixed run did not stay in step (finished: "
                 "{ok}, equal checksums at every step: {in_step})")  # fmt: skip


def claim_garbled(claims, *, garbled: list, printed: list, nproc: int) -> None:
    claims.check("{garbled} of {printed} lines came out garbled: {nproc} unbuffered ranks writing "
                 "to one pipe at once interleaved the pieces of their lines", "garbled > 0",
                 garbled=len(garbled), printed=len(printed), nproc=nproc,
                 otherwise="no line broke in this run ({printed} lines from {nproc} ranks): the "
                 "ranks' writes did not overlap this time, though each piece of a line is a "
                 "write of its own")  # fmt: skip


def claim_tidy(claims, *, fixed: bool, log_files: list, nproc: int) -> None:
    claims.check("With --local-ranks-filter 0 the console showed rank 0's lines only, all intact, "
                 "and torchrun kept {files} log files, one stdout and one stderr per rank",
                 "fixed == True and files >= two_per_rank", fixed=fixed,
                 files=len(log_files), two_per_rank=2 * nproc, otherwise="the console or the "
                 "log files were not as expected (console ranks, intact and filtered: {fixed}; "
                 "{files} files)")  # fmt: skip


def save(setup, claims, tasks, *, results: dict, pg_timeout: float) -> None:
    """The results record: per pitfall, reproduced, fixed and seconds to surface."""
    save_results(STEM, {**results, "pg_timeout_s": pg_timeout}, setup, claims=claims, tasks=tasks)


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
