"""Notebook 02, processes, ranks and collectives: its claims, pictures and results record."""

from __future__ import annotations

import logging
import os

import matplotlib.pyplot as plt
import numpy as np

from ..results import save_results
from . import closing

STEM = "02_processes_ranks_and_collectives"

RING_CLAIMS = ("at {small} bytes your ring ({steps} send/recv steps from Python) took {ratio:.1f}x "
               "the library's time", "your ring's gap to the library narrowed from {at_small:.1f}x "
               "at {small} bytes to {at_large:.2f}x at {large:,}, as the model expects where "
               "bandwidth dominates")  # fmt: skip


OPS = ["broadcast", "all_reduce_sum", "all_reduce_avg", "all_gather", "reduce_scatter", "send_recv"]


def expected_collectives(p: int) -> dict:
    """What each call of the notebook's %%ranks cell leaves on p ranks (one row per rank),
    from the tagged tensors alone: rank r starts from 10r, 10r+1, ... (4 elements, 4p for the
    reduce-scatter's input)."""
    before = {op: np.array([np.arange(4 * p if op == "reduce_scatter" else 4) + 10 * r
                            for r in range(p)]) for op in OPS}  # fmt: skip
    return {
        "broadcast": np.tile(before["broadcast"][0], (p, 1)),
        "all_reduce_sum": np.tile(before["all_reduce_sum"].sum(0), (p, 1)),
        "all_reduce_avg": np.tile(before["all_reduce_avg"].mean(0), (p, 1)),
        "all_gather": np.tile(before["all_gather"].reshape(-1), (p, 1)),
        "reduce_scatter": before["reduce_scatter"].sum(0).reshape(p, -1),
        "send_recv": np.roll(before["send_recv"], 1, axis=0),  # rank r holds rank r-1's tensor
    }


def claim_collectives(claims, *, held: list, ranks: int) -> bool:
    """Whether every collective left every live rank with what the table says (``held``: each
    rank's {op: values}, rank 0 first); True when all did."""
    expected = expected_collectives(ranks)
    matches = {op: bool(np.allclose(np.array([h[op] for h in held]), expected[op])) for op in OPS}
    claims.check(
        "all {ops} calls left every one of the {ranks} ranks with what the table says",
        "matching == ops", ops=len(OPS), matching=sum(matches.values()), ranks=ranks,
        different=", ".join(op for op in OPS if not matches[op]),
        otherwise="only {matching} of the {ops} calls did (not: {different}): this backend "
                  "or build does not run them as documented")
    return all(matches.values())


def stop_ranks(ranks) -> None:
    """Stop the live ranks, quietly: ipyparallel logs each engine's output as it stops."""
    logging.disable(logging.WARNING)
    try:
        ranks.stop()
    finally:
        logging.disable(logging.NOTSET)


def ring_schedule(p: int) -> list:
    """The ring on paper: (title, which ranks are summed into each rank's copy of each chunk,
    what each rank sends at the next step). The first step of a phase sends the rank's own
    chunk (reduce-scatter) or the one it completed (all-gather); then each passes on what it
    got."""
    state, title, frames = [[{r} for _ in range(p)] for r in range(p)], "start", []
    sends = list(range(p))  # reduce-scatter, step 1: rank r sends its own chunk r
    for phase in ("reduce-scatter", "all-gather"):
        for step in range(p - 1):
            frames.append((title, state, sends))
            new = [row[:] for row in state]
            for r, c in enumerate(sends):  # rank r's chunk c goes to rank r + 1
                right = (r + 1) % p
                new[right][c] = state[r][c] | (state[right][c] if phase == "reduce-scatter"
                                               else set())  # fmt: skip
            state, title = new, f"{phase} {step + 1}"
            sends = [sends[(r - 1) % p] for r in range(p)]  # pass on what you just received
        sends = [next(c for c in range(p) if len(state[r][c]) == p) for r in range(p)]
    return frames + [(title, state, [])]


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


def sweep(bench: dict) -> tuple:
    """The benchmark's rows as arrays: sizes (bytes), seconds (median per call), algbw, busbw."""
    return tuple(np.array([row[key] for row in bench["sizes"]], dtype=float)
                 for key in ("bytes", "seconds", "algbw", "busbw"))  # fmt: skip


def load_average(bench: dict) -> str:
    """The 1-minute load average as the sweep began, on this machine's cores, or n/a."""
    if bench.get("load_average") is None:
        return "n/a"
    return f"{bench['load_average']:.1f} on {os.cpu_count()} cores"


def plot_bandwidth(bench: dict) -> None:
    """Time per call, and algbw and busbw against the single-process copy, over message size."""
    sizes, seconds, algbw, busbw = sweep(bench)
    world = bench["world_size"]
    fig, (ax_t, ax_bw) = plt.subplots(1, 2, figsize=(11, 3.8))
    ax_t.loglog(sizes, seconds * 1e6, "o-", label="library all_reduce")
    ax_t.set(xlabel="message size n (bytes)", ylabel="time per call (µs, median)",
             title=f"{bench['backend']}, {world} ranks: time per call")
    ax_bw.loglog(sizes, algbw / 1e9, "o-", label="algbw")
    if world > 1:
        ax_bw.loglog(sizes, busbw / 1e9, "s-", label="busbw = algbw · 2(p-1)/p")
    ax_bw.axhline(bench["copy_bandwidth"] / 1e9, color="k", ls="--",
                  label="single-process copy (ceiling)")
    ax_bw.set(xlabel="message size n (bytes)", ylabel="GB/s (log scale)",
              title="bandwidth against size")
    ax_bw.legend(fontsize=8)
    fig.tight_layout()
    plt.show()


def plot_fit(bench: dict, near, fit_all: tuple, fit: tuple, grad_bytes: int) -> None:
    """The measured times with both lines t = alpha + n / beta: over all sizes, and over the
    sizes ``near`` the gradients (each fit: alpha, beta, rms relative error)."""
    sizes, seconds, _, _ = sweep(bench)
    (alpha_all, beta_all, err_all), (alpha, beta, fit_error) = fit_all, fit
    fig, ax = plt.subplots(figsize=(7, 3.8))
    ax.loglog(sizes, seconds * 1e6, "o", label="measured (median)")
    ax.loglog(sizes, (alpha_all + sizes / beta_all) * 1e6, "-",
              label=f"fit, all sizes: α {alpha_all * 1e6:.0f} µs, β {beta_all / 1e9:.2f} GB/s "
                    f"(error {err_all:.0%})")  # fmt: skip
    ax.loglog(sizes[near], (alpha + sizes[near] / beta) * 1e6, "-", lw=3, alpha=0.6,
              label=f"fit near the gradients: α {alpha * 1e6:.0f} µs, β {beta / 1e9:.2f} GB/s "
                    f"(error {fit_error:.0%})")  # fmt: skip
    ax.axvline(grad_bytes, color="gray", ls=":", label="section 5: the model's gradients")
    ax.set(xlabel="message size (bytes)", ylabel="time per call (µs)",
           title=f"t = alpha + n / beta, {bench['backend']}, {bench['world_size']} ranks")
    ax.legend(fontsize=8)
    plt.show()


def claim_fit(claims, *, sizes, alpha: float, beta: float, fit_error: float,
              smallest: tuple) -> tuple[int, int]:  # fmt: skip
    """Whether the line fitted on ``sizes`` (the sizes near the gradients) fits their times;
    skipped where nothing grew with the size (beta inf). ``smallest``: the sweep's smallest
    message (bytes, seconds), whose time is the per-call latency; the line's alpha is its
    intercept. (lo, hi): the range it covers."""
    lo, hi = int(sizes[0]), int(sizes[-1])
    fit_claim = ("the line t = α + n/β (α = {alpha_us:.0f} µs, β = {beta:.2f} GB/s) fits the "
                 "times from {lo:,} to {hi:,} bytes with an rms error of {err:.0%}; its α is "
                 "the line's intercept, not the per-call latency: the {small}-byte call took "
                 "{small_us:.0f} µs")
    small = dict(small=int(smallest[0]), small_us=smallest[1] * 1e6)
    if not np.isfinite(beta):  # the fit does not apply: nothing grew with the size
        claims.skip(fit_claim, lo=lo, hi=hi, **small,
                    expect="the line t = α + n/β would be fitted to the times from {lo:,} to "
                           "{hi:,} bytes",
                    why=f"from {lo:,} to {hi:,} bytes the time did not grow with the size: "
                        f"α = {alpha * 1e6:.0f} µs alone, no β")  # fmt: skip
    else:
        claims.check(fit_claim, "err < 0.3 and alpha_us > 0", **small,
                     alpha_us=alpha * 1e6, beta=beta / 1e9, lo=lo, hi=hi, err=fit_error,
                     otherwise="the best line over {lo:,} to {hi:,} bytes (α = {alpha_us:.0f} µs, "
                               "β = {beta:.2f} GB/s) misses by {err:.0%} rms or has no positive "
                               "α: not a latency plus a bandwidth here")  # fmt: skip
    return lo, hi


def plot_ring_race(bench: dict, *, passed: bool):
    """Your ring against the library over message size, where the ring passed its check:
    (ratio at the largest size, ratio at the smallest), or a sentence twice where it did not."""
    if not passed:
        return ("not measured: the ring exercise has not passed yet",) * 2
    sizes, seconds, _, _ = sweep(bench)
    ring_seconds = np.array([row["ring_seconds"] for row in bench["sizes"]])
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.loglog(sizes, seconds * 1e6, "o-", label="library all_reduce")
    ax.loglog(sizes, ring_seconds * 1e6, "s-", label="your ring (send/recv)")
    ax.set(xlabel="message size n (bytes)", ylabel="time per call (µs, median)",
           title=f"ring by hand vs library, {bench['world_size']} ranks")
    ax.legend()
    plt.show()
    return float(ring_seconds[-1] / seconds[-1]), float(ring_seconds[0] / seconds[0])


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


def crossover(sizes, seconds, alpha: float, beta: float) -> tuple[float, float, float]:
    """The size n* (bytes) where a call spends as long on its bytes as on its fixed cost, as
    the task judges it: (the sweep's n*, low, high). The sweep's: where the time first reached
    twice the smallest message's, on log scales between the two sizes around it (inf where it
    never did); the line's: n/beta = alpha, alpha * beta (inf where beta is). low to high:
    both, 2 % wider for a guess typed from alpha and beta as the notebook prints them."""
    n_line, twice = alpha * beta, np.nonzero(seconds >= 2 * seconds[0])[0]
    n_sweep = np.inf
    if len(twice):
        i = twice[0]  # i >= 1: seconds[0] < 2 * seconds[0]
        (n0, n1), (t0, t1) = np.log(sizes[i - 1 : i + 1]), np.log(seconds[i - 1 : i + 1])
        n_sweep = np.exp(n0 + (np.log(2 * seconds[0]) - t0) * (n1 - n0) / (t1 - t0))
    return float(n_sweep), 0.98 * min(n_line, n_sweep), 1.02 * max(n_line, n_sweep)


# crossover_bytes: answers a learner could reach by a plausible mistake, and what it is
CROSSOVER_MISTAKES = (
    (lambda a, b, g: a / b, "alpha / beta is seconds per (bytes/s), not bytes: n/beta = alpha"),
    (lambda a, b, g: b / a, "beta / alpha is bytes per second squared, not bytes"),
    (lambda a, b, g: a * 1e6 * b, "alpha is printed in seconds, not µs"),
    (lambda a, b, g: a * b / 1e9, "beta is printed in bytes/s, not GB/s"),
    (lambda a, b, g: a * 1e3 * b, "alpha is printed in seconds, not ms"),
    (lambda a, b, g: g, "that is the gradients' size: n* depends on alpha and beta alone"),
)


def crossover_why(guess, alpha: float, beta: float, grad_bytes: int) -> str:
    """Why a crossover_bytes guess (a number, or the answer's function of alpha and beta) is
    off: the plausible mistake it matches (within 2 %), else what decides the answer."""
    guess = guess(alpha, beta) if callable(guess) else guess
    if isinstance(guess, int | float) and not isinstance(guess, bool):
        for mistake, name in CROSSOVER_MISTAKES:
            value = mistake(alpha, beta, grad_bytes)
            if np.isfinite(value) and abs(guess - value) <= 0.02 * abs(value):
                return name
    return ("a call costs alpha + n/beta: n* is where n/beta equals alpha; the sweep's n* is "
            "where its time reached twice the smallest message's")


def plot_bucket(bench: dict, *, predicted: tuple, measured: tuple) -> None:
    """The gradients' all-reduce, predicted and measured (seconds): one bucket, one call per
    tensor; the measured bars are medians, with the rounds' quartiles (thick) and range (thin)."""
    grad_bytes = sum(bench["grad"]["tensor_bytes"])
    rounds = [np.array(bench["grad"][key]) * 1e3 for key in ("bucket_rounds", "per_tensor_rounds")]
    fig, ax = plt.subplots(figsize=(6, 3))
    x = np.arange(2)
    ax.bar(x - 0.2, [t * 1e3 for t in predicted], 0.4, label="predicted (line; sweep)")
    ax.bar(x + 0.2, [t * 1e3 for t in measured], 0.4, label="measured (median)")
    for q, lw, label in (((0, 100), 1, "range of the rounds"), ((25, 75), 4, "quartiles")):
        low, high = (np.array([np.percentile(r, q[i]) for r in rounds]) for i in (0, 1))
        mid = np.array(measured) * 1e3
        ax.errorbar(x + 0.2, mid, yerr=[mid - low, high - mid], fmt="none", ecolor="k",
                    elinewidth=lw, capsize=4 if lw == 1 else 0, label=label)
    ax.set_xticks(x, ["one bucket", "one call per tensor"])
    ax.set(xlabel="how the gradients are sent", ylabel="ms per gradient all-reduce",
           title=f"{grad_bytes / 2**20:.1f} MiB of gradients, {bench['world_size']} ranks, "
                 f"{bench['backend']}, {len(rounds[0])} rounds")
    ax.legend(fontsize=8)
    plt.show()


def save(setup, claims, tasks, *, bench: dict, ranks_distinct: bool,
         collectives_as_expected: bool, exercise_passed: bool, ring_ranks: int, fit: tuple,
         fit_all: tuple, lo: int, hi: int, ring_vs_library, ring_vs_library_smallest,
         predicted_bucket, measured_bucket, bucket_error, predicted_per_tensor,
         measured_per_tensor, swept) -> None:  # fmt: skip
    """The results record: the live collectives, the sweep and its fits (each: alpha, beta, rms
    relative error; ``lo``, ``hi``: the sizes the line near the gradients covers), the gradient
    all-reduce."""
    grad_tensor_bytes = bench["grad"]["tensor_bytes"]
    sizes, seconds, algbw, busbw = sweep(bench)
    peak = int(np.argmax(busbw))
    (alpha, beta, fit_error), (alpha_all, beta_all, err_all) = fit, fit_all
    save_results(STEM, {
        "world_size": bench["world_size"], "cores": os.cpu_count(), "backend": bench["backend"],
        "ranks_distinct": ranks_distinct, "collectives_as_expected": collectives_as_expected,
        "exercise_passed": exercise_passed, "ring_ranks": ring_ranks,
        # the alpha-beta fits: near the gradient size, and over all sizes
        "alpha_us": alpha * 1e6,
        "beta_GBps": beta / 1e9 if np.isfinite(beta) else "none: flat times",
        "fit_rms_rel_error": fit_error,
        "fit_min_bytes": lo, "fit_max_bytes": hi,
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
        "grad_swept_ms": swept * 1e3, "smallest_call_us": seconds[0] * 1e6,
        "load_average": load_average(bench),
    }, setup, claims=claims, tasks=tasks)  # fmt: skip


def close(setup, claims) -> None:
    closing(setup, claims, STEM)
