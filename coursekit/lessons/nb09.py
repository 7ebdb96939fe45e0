"""Notebook 09, pitfalls in real training: its claims and results record."""

from __future__ import annotations

from ..results import save_results
from . import closing

STEM = "09_pitfalls_in_real_training"


def fail_run(setup, script, args=(), **kwargs):
    """A run expected to fail: quiet, never raises for its failure, bounded by the tier's
    timeout or 90 s, whichever is shorter."""
    import coursekit

    return coursekit.run_launcher(script, [str(a) for a in args], setup=setup, check=False,
                                  timeout_s=min(setup.timeout_s, 90), echo=False, **kwargs)


def where_waited(run) -> None:
    """Where each rank but rank 0 (those with batches left) waited: its last frames."""
    for rank in range(1, run.nproc):
        tb = run.traceback(rank)
        print(f"rank {rank} waited in:", " -> ".join(f[2] for f in tb.frames[-6:]) if tb else "?")


def claim_unused(claims, *, reproduced: bool) -> None:
    claims.check("DDP refused the step after the one that left the auxiliary head without "
                 "gradients: 'Expected to have finished reduction in the prior iteration'",
                 "reproduced == True", reproduced=reproduced,
                 otherwise="the run did not fail with DDP's unused-parameter error (the MISSING "
                 "line above); its output says what happened instead")  # fmt: skip


def claim_fixes(claims, *, calls: dict, buckets: dict, broadcasts: int, rounds: dict):
    """The two fixes compared: collectives per step, then time per round; returns the timing
    claim (its ratio goes into the results)."""
    fu, au = calls["find_unused"][-1], calls["always_used"][-1]  # the last step's
    claims.check("find_unused_parameters=True made {fu} collectives per step against {au} "
                 "without it: both broadcast rank 0's BatchNorm buffers at the forward "
                 "({broadcasts}: float32 and int64 apart) and all-reduce {fu_buckets} gradient "
                 "bucket(s); the one more is the all-reduce of the used-parameter map",
                 "extra == 1 and fu_buckets == au_buckets and au == named",
                 fu=fu, au=au, extra=fu - au, fu_buckets=buckets["find_unused"],
                 au_buckets=buckets["always_used"], broadcasts=broadcasts,
                 named=broadcasts + buckets["always_used"],
                 otherwise="the last step made {fu} collectives with the search and {au} "
                 "without, for {broadcasts} buffer broadcast(s) and {fu_buckets} and "
                 "{au_buckets} gradient bucket(s)")  # fmt: skip
    return claims.compare(
        "find_unused_parameters=True cost time: {ratio:.2f}x the time of the model whose "
        "parameters all take part (per round {ratio_low:.2f}x to {ratio_high:.2f}x)",
        less=rounds["always_used"], more=rounds["find_unused"],
        tie="no measurable difference between the two fixes: per round {ratio_low:.2f}x to "
        "{ratio_high:.2f}x", otherwise="find_unused_parameters=True was faster in every round "
        "({ratio:.2f}x the other's time): likely, not measured here, because the always-used "
        "model also runs the auxiliary head on odd steps")  # fmt: skip


BUFFERS = {"float32": "running mean, var", "int64": "num_batches_tracked"}  # BatchNorm's


def fixes(claims, metrics: dict):
    """The fixed run of §1 as a table: per fix, the collectives of its last step (each named,
    as DDP's source makes them; their sum against the run's count) and its time per round (a
    round: an odd step, without the auxiliary head in fix (a), and the even step after it; not
    step 0); then the claims of :func:`claim_fixes`; returns the timing claim."""
    import statistics

    from common.pitfall_harness import NetWithAux  # launchers/common: importable after configure

    names = list(metrics["step_s"])
    rounds = {n: [a + b for a, b in zip(t[1::2], t[2::2], strict=False)]
              for n, t in metrics["step_s"].items()}  # fmt: skip
    calls, buckets = metrics["collectives_per_step"], metrics["buckets"]
    dtypes = sorted({str(b.dtype).removeprefix("torch.") for b in NetWithAux().buffers()})
    rows = [(f"forward: broadcast of rank 0's {d} buffers: {BUFFERS.get(d, d)}",
             [1 for _ in names]) for d in dtypes]  # fmt: skip
    rows += [("backward: all-reduce of the gradient buckets", [buckets[n] for n in names]),
             ("backward: all-reduce of the used-parameter map",
              [int(n == "find_unused") for n in names])]
    total = [sum(values[i] for _, values in rows) for i in range(len(names))]
    rows += [("sum of the above", total),
             ("collectives counted in the last step", [calls[n][-1] for n in names]),
             ("ms per round: median", [f"{1000 * statistics.median(rounds[n]):.1f}"
                                       for n in names]),
             ("ms per round: fastest to slowest", [f"{1000 * min(rounds[n]):.1f} to "
                                                   f"{1000 * max(rounds[n]):.1f}" for n in names])]
    width = max(len(label) for label, _ in rows)
    print(f"{'':{width}}" + "".join(f"{n:>16}" for n in names))
    for label, values in rows:
        print(f"{label:{width}}" + "".join(f"{v!s:>16}" for v in values))
    return claim_fixes(claims, calls=calls, buckets=buckets, broadcasts=len(dtypes),
                       rounds=rounds)


def claim_batchnorm(claims, *, synced: float, floor: float, over_floor: float, synced64: float,
                    floor64: float, over_floor64: float, ch0: str, single: float, rel: float,
                    floor_mean: float, ratio: float):  # fmt: skip
    """The hand-synced statistics against the noise floor, and each rank's own against it;
    returns the first claim (whether the fix held)."""
    fix = claims.check(
        "The hand-synced statistics are the whole batch's: they differ from one process's by "
        "{synced:.1e} in fp32, within the noise floor of one process adding the same sums in "
        "another order ({floor:.1e}); in float64, {synced64:.1e} against a floor of {floor64:.1e}",
        "over_floor <= 1 and over_floor64 <= 1", synced=synced,
        floor=floor, over_floor=over_floor, synced64=synced64,
        floor64=floor64, over_floor64=over_floor64,
        otherwise="the synced statistics came out {over_floor:.1f}x the fp32 floor "
        "({synced:.1e} against {floor:.1e}; float64: {over_floor64:.1f}x): the all-reduce added "
        "the partial sums in an order the floor did not try (more than 5 ranks, or a backend "
        "that sums otherwise); float64 says whether the statistics themselves differ")
    claims.check(
        "Each rank normalised with its own slice's statistics: channel 0's mean came out {ch0} "
        "on the ranks against {single:.1e} over the whole batch, up to {rel:.0%} off, while "
        "rounding moves a mean by {floor:.1e} at most: other samples, not rounding", "ratio > 100",
        ch0=ch0, single=single, rel=rel, floor=floor_mean, ratio=ratio,
        otherwise="the ranks' own statistics came out only {ratio:.0f}x the noise floor: the "
        "slices of this global batch happen to have nearly the batch's statistics")
    return fix


def batchnorm(claims, bn: dict):
    """The BatchNorm run's claims from its ranks' figures (the largest over the ranks, of the
    mean and the variance); returns (the fix's claim, the figures for the results record)."""
    ranks = bn["ranks"]

    def worst(name, suffix=""):
        return max(r[f"{name}_{stat}{suffix}"] for r in ranks for stat in ("mean", "var"))

    def over_floor(suffix=""):
        """The largest synced difference as a multiple of its noise floor (<= 1: within it)."""
        tiny = 1e-300  # a floor of exactly 0 leaves any difference above it
        return max(r[f"synced_{stat}_diff{suffix}"] / max(r[f"floor_{stat}{suffix}"], tiny)
                   for r in ranks for stat in ("mean", "var"))  # fmt: skip

    local = max(r["local_mean_diff"] for r in ranks)
    floor = max(r["floor_mean"] for r in ranks)
    ratio = local / max(floor, 1e-300)
    single = ranks[0]["single_mean_ch0"]  # channel 0 over the whole batch; each rank's own:
    rel = max(abs(r["local_mean_ch0"] - single) for r in ranks) / max(abs(single), 1e-300)
    fix = claim_batchnorm(
        claims, synced=worst("synced", "_diff"), floor=worst("floor"), over_floor=over_floor(),
        synced64=worst("synced", "_diff_fp64"), floor64=worst("floor", "_fp64"),
        over_floor64=over_floor("_fp64"), ch0=" and ".join(f"{r['local_mean_ch0']:.1e}"
                                                           for r in ranks),
        single=single, rel=rel, floor_mean=floor, ratio=ratio)
    return fix, {
        "batchnorm_reproduced": ratio > 100, "batchnorm_fixed": fix.held,
        "batchnorm_local_mean_diff": local, "batchnorm_own_ch0_relative_error": rel,
        "batchnorm_synced_mean_diff": max(r["synced_mean_diff"] for r in ranks),
        "batchnorm_floor_mean": floor, "batchnorm_synced_over_floor": over_floor(),
        "batchnorm_synced_over_floor_fp64": over_floor("_fp64"),
        "batchnorm_syncbn": bn["syncbn"] if bn["syncbn"] == "ran" else "refused: " + bn["syncbn"]}


def plot_batchnorm(bn: dict) -> None:
    """Per rank: its own slice's statistics, the hand-synced ones, and the noise floor, each as
    the largest difference from one process's batch mean."""
    import matplotlib.pyplot as plt

    ranks = bn["ranks"]
    fig, ax = plt.subplots(figsize=(7, 2.8))
    xs = range(len(ranks))
    for shift, key, label in [(-0.27, "local_mean_diff", "own slice (plain BatchNorm)"),
                              (0, "synced_mean_diff", "synced by hand (all-reduce)"),
                              (0.27, "floor_mean", "noise floor (one process, other orders)")]:
        ax.bar([x + shift for x in xs], [max(r[key], 1e-12) for r in ranks], width=0.27,
               label=label)  # fmt: skip
    ax.set_yscale("log")
    ax.set_xticks(list(xs), [f"rank {r}" for r in xs])
    ax.set_xlabel("rank (its slice of the global batch)")
    ax.set_ylabel("max |batch mean - one-process mean|")
    ax.set_title(f"first BatchNorm layer, global batch {bn['global_batch']} over "
                 f"{bn['world_size']} ranks", fontsize=9)  # fmt: skip
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    plt.show()
    print("SyncBatchNorm on this tier:", bn["syncbn"])
    if bn["syncbn"] == "ran":
        print("SyncBatchNorm's running mean vs one process:",
              max(r["syncbn_running_mean_diff"] for r in ranks))


def same_every_epoch(metrics: dict) -> bool:
    """Did every rank get the same order in every epoch?"""
    return all(len({tuple(e) for e in r["epochs"]}) == 1 for r in metrics["ranks"])


def claim_sampler(claims, *, forgot: dict, fixed: dict, size: int) -> dict:
    """set_epoch's reshuffle, and the padded evaluation against range(rank, size, world): a line
    per run, the claims; returns the figures for the results record."""
    forgot_repeats, fixed_repeats = same_every_epoch(forgot), same_every_epoch(fixed)
    for name, metrics, repeats in [("without set_epoch:", forgot, forgot_repeats),
                                   ("fixed:", fixed, fixed_repeats)]:
        print(f"{name:18} every epoch the same order: {repeats}; evaluation counted "
              f"{metrics['evaluated_count']} samples, {metrics['evaluated_distinct']} distinct, "
              f"of {size}")  # fmt: skip
    claims.check("Without set_epoch every epoch repeated the first epoch's order, on every rank; "
                 "with it, the order changed", "forgot_repeats == True and fixed_repeats == False",
                 forgot_repeats=forgot_repeats, fixed_repeats=fixed_repeats,
                 otherwise="the orders did not behave so here (repeats without set_epoch: "
                 "{forgot_repeats}, with it: {fixed_repeats}): the per-epoch lists above show "
                 "them")  # fmt: skip
    claims.check("Padded by the sampler, the evaluation counted {count} samples for a dataset of "
                 "{size} ({distinct} distinct) over {world} ranks; range(rank, size, world) "
                 "counted each sample once ({fixed_count})",
                 "count > size and fixed_count == size and fixed_distinct == size",
                 count=forgot["evaluated_count"], distinct=forgot["evaluated_distinct"], size=size,
                 world=forgot["world_size"], fixed_count=fixed["evaluated_count"],
                 fixed_distinct=fixed["evaluated_distinct"],
                 otherwise="{world} ranks divide {size} samples, or the fix miscounted (padded: "
                 "{count}, fixed: {fixed_count} counted, {fixed_distinct} distinct): with a size "
                 "that divides, the sampler pads nothing")  # fmt: skip
    pads = size % forgot["world_size"] != 0
    return {"set_epoch_reproduced": forgot_repeats, "set_epoch_fixed": not fixed_repeats,
            "uneven_size_reproduced": forgot["evaluated_count"] > size if pads else True,
            "uneven_size_fixed": fixed["evaluated_count"] == fixed["evaluated_distinct"] == size,
            "padded_evaluation_count": forgot["evaluated_count"]}


def claim_uneven(claims, *, uneven, uneven_ok: bool, pg_timeout: float) -> None:
    claims.check("The ranks with more batches waited for the one that had left the loop, until "
                 "the timeout ended the run after {seconds:.1f} s",
                 "timed_out == True and seconds > pg_timeout",
                 timed_out=uneven_ok and not uneven.ok, seconds=uneven.seconds,
                 pg_timeout=pg_timeout,
                 otherwise="the run did not end at the timeout ({seconds:.1f} s, timeout error: "
                 "{timed_out}): its output above says how it ended")  # fmt: skip


def claim_join(claims, metrics: dict) -> bool:
    """The run with Join: every rank's batches, and whether all ended with the same parameters
    (returned)."""
    batches = [r["batches"] for r in metrics["ranks"]]
    joined_equal = len({r["checksum"] for r in metrics["ranks"]}) == 1
    claims.check("With Join the ranks ran {batches} batches and all ended with the same "
                 "parameters", "equal == True", batches=" / ".join(map(str, batches)),
                 equal=joined_equal,
                 otherwise="with Join the ranks ran {batches} batches but their parameter "
                 "checksums differ at the end")  # fmt: skip
    return joined_equal


def save(setup, claims, tasks, *, results: dict, pg_timeout: float, ok) -> None:
    """The results record: per pitfall, reproduced, fixed and seconds to surface; the exercise.
    Then which pitfalls were reproduced and fixed, and an error unless all of them were."""
    save_results(STEM, {
        **results, "pg_timeout_s": pg_timeout, "exercise_passed": ok is True}, setup, claims=claims,
        tasks=tasks)  # fmt: skip
    reproduced = {k: v for k, v in results.items() if k.endswith("_reproduced")}
    fixes = {k: v for k, v in results.items() if k.endswith("_fixed")}
    print("reproduced:", reproduced, "\nfixed:", fixes)
    assert all(reproduced.values()) and all(fixes.values())


def close(setup, claims) -> None:
    closing(setup, claims, STEM)
