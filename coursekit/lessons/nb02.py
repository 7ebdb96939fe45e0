"""Notebook 02, processes, ranks and collectives: its claims, ring picture and results record."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from ..results import save_results
from . import closing

STEM = "02_processes_ranks_and_collectives"

RING_CLAIMS = ("at {small} bytes your ring ({steps} send/recv steps from Python) took {ratio:.1f}x "
               "the library's time", "your ring's gap to the library narrowed from {at_small:.1f}x "
               "at {small} bytes to {at_large:.2f}x at {large:,}, as the model expects where "
               "bandwidth dominates")  # fmt: skip


def claim_collectives(claims, *, matches: dict, ops: list, ranks: int) -> None:
    """Whether every collective left every live rank with what the table says."""
    claims.check(
        "all {ops} calls left every one of the {ranks} ranks with what the table says",
        "matching == ops", ops=len(ops), matching=sum(matches.values()), ranks=ranks,
        different=", ".join(op for op in ops if not matches[op]),
        otherwise="only {matching} of the {ops} calls did (not: {different}): this backend "
                  "or build does not run them as documented")


def plot_ring(frames: list, p: int) -> None:
    """The ring all-reduce on paper, one panel per step of ``frames`` (ring_schedule's)."""
    fig, axes = plt.subplots(1, len(frames), figsize=(2.0 * len(frames), 2.6))
    for ax, (title, state, sends) in zip(axes, frames, strict=True):
        ax.imshow([[len(s) / p for s in row] for row in state], cmap="Greens", vmin=0, vmax=1)
        for r in range(p):
            for c in range(p):
                ax.text(c, r, "+".join(map(str, sorted(state[r][c]))), ha="center", va="center",
                        fontsize=7)
        for r, c in enumerate(sends):  # what rank r sends to the right at the next step
            ax.add_patch(plt.Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, lw=2))
        ax.set_xticks(range(p), [f"c{c}" for c in range(p)], fontsize=7)
        ax.set_yticks(range(p), [f"rank {r}" for r in range(p)], fontsize=7)
        ax.set_title(title, fontsize=8)
    fig.suptitle(f"ring all-reduce, {p} ranks: chunk c of rank r holds the sum of the ranks "
                 "written in it (border: what rank r sends to rank r+1 at the next step)",
                 fontsize=9)
    fig.supxlabel("chunk of the tensor", fontsize=8)
    fig.supylabel("rank", fontsize=8)
    fig.tight_layout()
    plt.show()


def claim_latency(claims, *, sizes, seconds) -> None:
    """Small messages: the time per call hardly grows with the size (latency)."""
    small = sizes <= 4096
    claims.check(
        "a message {fold:,.0f}x larger ({small_max:,} bytes against {small_min}) cost only "
        "{growth:.1f}x the time: at these sizes the time is mostly latency", "growth < 10",
        fold=sizes[small][-1] / sizes[0], small_max=int(sizes[small][-1]),
        small_min=int(sizes[0]), growth=seconds[small][-1] / seconds[0],
        otherwise="the time grew {growth:.1f}x for {fold:,.0f}x the bytes: no flat latency "
                  "floor up to {small_max:,} bytes here")


def claim_ring_race(claims, *, passed: bool, rows: list, sizes, world: int, load: str,
                    at_small=None, at_large=None) -> None:  # fmt: skip
    """Your ring against the library, smallest and largest message; skipped until it passed."""
    if not passed:
        for text in RING_CLAIMS:  # not false: not tried (finish section 3 to race your ring)
            claims.skip(text, expect="your ring would be raced against dist.all_reduce, from the "
                                     "smallest message to the largest",
                        why="the ring exercise of section 3 has not passed yet")  # fmt: skip
        return
    tie = "no measurable difference: quartiles {ratio_low:.2f}x to {ratio_high:.2f}x (load {load})"
    # dozens of rounds: compared by their quartiles (paired=False), not by their extremes
    race = dict(small=int(sizes[0]), large=int(sizes[-1]), at_small=at_small, load=load,
                at_large=at_large, steps=2 * (world - 1))
    claims.compare(RING_CLAIMS[0], less=rows[0]["rounds"], more=rows[0]["ring_rounds"], **race,
                   paired=False, tie=tie, otherwise="at {small} bytes your ring was the faster")
    gap = [np.array(row["ring_rounds"]) / np.array(row["rounds"]) for row in (rows[-1], rows[0])]
    claims.compare(RING_CLAIMS[1], less=gap[0], more=gap[1], **race, paired=False, tie=tie,
                   otherwise="the gap widened: {at_large:.2f}x at {large:,} bytes, {at_small:.2f}x "
                             "at {small}")  # fmt: skip


def claim_bucket(claims, *, bench: dict, lo: int, hi: int, predicted_bucket: float,
                 measured_bucket: float, bucket_error: float, swept: float, fit_error: float,
                 load: str, predicted_per_tensor: float, measured_per_tensor: float) -> None:
    """The line's prediction of the one-bucket all-reduce, and one bucket against one call per
    tensor."""
    claims.check(
        "the line, fitted on {lo:,} to {hi:,} bytes, predicted the one-bucket all-reduce "
        "within {error:.0%}: {predicted:.2f} ms predicted, {measured:.2f} ms measured",
        "error <= 0.3", lo=lo, hi=hi, predicted=predicted_bucket * 1e3,
        measured=measured_bucket * 1e3, error=bucket_error, swept=swept * 1e3,
        residual=abs(predicted_bucket - swept) / swept, fit_error=fit_error, load=load,
        otherwise="the line missed the bucket ({measured:.2f} ms) by {error:.0%}; at this size "
                  "it misses the sweep's own time ({swept:.2f} ms) by {residual:.0%}, "
                  "{fit_error:.0%} rms over {lo:,} to {hi:,} bytes; load average {load}")
    claims.compare(
        "one call per tensor ({calls} calls) took {ratio:.2f}x one bucket's time (the sweep "
        "predicted {predicted:.2f} ms, {measured:.2f} ms measured)",
        less=bench["grad"]["bucket_rounds"], more=bench["grad"]["per_tensor_rounds"],
        paired=False, calls=len(bench["grad"]["tensor_bytes"]),
        predicted=predicted_per_tensor * 1e3, load=load,
        measured=measured_per_tensor * 1e3, otherwise="one bucket took longer",
        tie="no measurable difference: quartiles {ratio_low:.2f}x to {ratio_high:.2f}x "
            "(load {load})")


def save(setup, claims, tasks, *, bench: dict, cores: int, ranks_distinct: bool,
         collectives_as_expected: bool, exercise_passed: bool, ring_ranks: int, alpha, beta,
         fit_error, alpha_all, beta_all, err_all, sizes, near, seconds, algbw, busbw, peak: int,
         ring_vs_library, ring_vs_library_smallest, predicted_bucket, measured_bucket,
         bucket_error, predicted_per_tensor, measured_per_tensor, swept, load) -> None:  # fmt: skip
    """The results record: the live collectives, the sweep and its fits, the gradient all-reduce."""
    grad_tensor_bytes = bench["grad"]["tensor_bytes"]
    save_results(STEM, {
        "world_size": bench["world_size"], "cores": cores, "backend": bench["backend"],
        "ranks_distinct": ranks_distinct, "collectives_as_expected": collectives_as_expected,
        "exercise_passed": exercise_passed, "ring_ranks": ring_ranks,
        # the alpha-beta fits: near the gradient size, and over all sizes
        "alpha_us": alpha * 1e6,
        "beta_GBps": beta / 1e9 if np.isfinite(beta) else "none: flat times",
        "fit_rms_rel_error": fit_error,
        "fit_min_bytes": int(sizes[near][0]), "fit_max_bytes": int(sizes[near][-1]),
        "alpha_all_sizes_us": alpha_all * 1e6,
        "beta_all_sizes_GBps": beta_all / 1e9 if np.isfinite(beta_all) else "none: flat times",
        "fit_all_sizes_rms_rel_error": err_all,
        # the sweep
        "bench_min_bytes": int(sizes[0]), "bench_max_bytes": int(sizes[-1]),
        "bench_iters": bench["iters"],
        "peak_busbw_GBps": busbw[peak] / 1e9, "peak_busbw_algbw_GBps": algbw[peak] / 1e9,
        "peak_busbw_bytes": int(sizes[peak]), "copy_bandwidth_GBps": bench["copy_bandwidth"] / 1e9,
        "ring_vs_library_ratio": ring_vs_library,
        "ring_vs_library_ratio_smallest": ring_vs_library_smallest,
        # section 5: the gradient all-reduce, predicted and measured
        "grad_bytes": sum(grad_tensor_bytes), "grad_tensors": len(grad_tensor_bytes),
        "grad_predicted_ms": predicted_bucket * 1e3,
        "grad_measured_ms": measured_bucket * 1e3, "grad_prediction_rel_error": bucket_error,
        "grad_per_tensor_predicted_ms": predicted_per_tensor * 1e3,
        "grad_per_tensor_measured_ms": measured_per_tensor * 1e3,
        "grad_swept_ms": swept * 1e3, "smallest_call_us": seconds[0] * 1e6, "load_average": load,
    }, setup, claims=claims, tasks=tasks)  # fmt: skip


def close(setup, claims) -> None:
    closing(setup, claims, STEM)
