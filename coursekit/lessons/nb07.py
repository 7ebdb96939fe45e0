"""Notebook 07, DDP built by hand: the race's claims and the results record."""

from __future__ import annotations

from statistics import median

from ..claims import spread
from ..results import save_results
from . import closing

STEM = "07_build_ddp_yourself"


def _key(name: str) -> str:
    """A variant's name as a results key: "bucketed 0.5 MiB" -> "bucketed_0p5_MiB"."""
    return name.replace(" ", "_").replace(".", "p")


WHY_BUCKET_CALLS = ("a bucket closes once it holds 2 MiB of gradients, so the gradient bytes over "
                    "2 MiB, rounded up, make the calls: one per bucket, not one per tensor or per "
                    "layer")


def racers(passed: dict[str, bool], files: list) -> dict:
    """step -> the file that races: the learner's (``files``, in the order of ``passed``) where
    its check passed, else the reference; says which."""
    from ..exercises import DEFAULT_SOLUTIONS

    chosen = {step: file if ok else DEFAULT_SOLUTIONS / f"ddp_{step}.py"
              for (step, ok), file in zip(passed.items(), files, strict=True)}  # fmt: skip
    print("The race runs", ", ".join(f"{'your' if ok else 'the reference'} {step}"
                                     for step, ok in passed.items()))  # fmt: skip
    return chosen


def claim_race(claims, *, race: dict, ms: dict, whose: str) -> None:
    """The race's timing comparisons (each side by side, per round) and the overlap shares."""
    best, shown = race["best_bucketed"], race["profiled"]
    naive, overlapped = ms["naive"], ms["overlapped"]
    share, ddp_share = race["overlap"][shown], race["overlap"]["torch DDP"]
    rounds = race["seconds"]  # rounds: side by side
    tie = "no measurable difference: per round {ratio_low:.2f}x to {ratio_high:.2f}x"
    claims.compare(
        "{whose} {best} version took {ratio:.2f}x the step time of torch's DDP", tie=tie,
        less=rounds["torch DDP"], more=rounds[best], whose=whose, best=best,
        otherwise="{whose} {best} version beat DDP in every round ({ratio:.2f}x its time)")
    claims.compare(
        "one blocking all-reduce per tensor ({tensors} calls) took {ratio:.2f}x the step "
        "of the {best} version", less=rounds[best], more=rounds["naive"], tie=tie,
        tensors=race["tensors"], best=best,
        otherwise="the naive version beat the {best} one in every round")
    claims.compare(
        "starting each all-reduce during backward cut the step from {naive:.1f} to "
        "{overlapped:.1f} ms", less=rounds["overlapped"], more=rounds["naive"], tie=tie,
        naive=naive, overlapped=overlapped,
        otherwise="the hooks made the step slower in every round ({ratio:.2f}x)")
    claims.check(
        "{share:.0%} of the all-reduce time of the profiled {shown} step lay inside backward, "
        "{ddp_share:.0%} of torch DDP's: both start buckets while backward runs",
        "share > 0 and ddp_share > 0", share=share, ddp_share=ddp_share, shown=shown,
        otherwise="In the profiled steps {share:.0%} of {shown}'s all-reduce time lay inside "
        "backward, {ddp_share:.0%} of torch DDP's: one of them started no bucket before "
        "backward ended")  # fmt: skip


def save(setup, claims, tasks, *, race: dict, ms: dict, whose: str,
         passed: dict[str, bool]) -> None:  # fmt: skip
    """The results record: the three tasks (``passed``: step -> its check passed), the race's
    step times, calls and overlap shares."""
    best, shown, naive, ddp = race["best_bucketed"], race["profiled"], ms["naive"], ms["torch DDP"]
    save_results(STEM, {
        "world_size": race["world_size"], "backend": race["backend"],
        **{f"{step}_passed": ok for step, ok in passed.items()},
        "exercise_passed": all(passed.values()), "raced": whose,
        "raced_yours": ",".join(step for step, ok in passed.items() if ok),
        "tensors": race["tensors"], "grad_mb": race["grad_mb"],
        "best_bucket": best,
        **{f"step_ms_{_key(k)}": v for k, v in ms.items()},
        "bucketed_vs_ddp": ms[best] / ddp, "naive_vs_ddp": naive / ddp, "profiled_bucket": shown,
        "overlap_bucketed": race["overlap"][shown],
        "overlap_ddp": race["overlap"]["torch DDP"], "overlap_basis": race["overlap_basis"],
        "ddp_buckets": len(race["ddp_bucket_bytes"] or []),
        **{f"all_reduce_calls_{_key(k)}": v
           for k, v in race["all_reduce_calls"].items() if v is not None},
    }, setup, claims=claims, tasks=tasks)  # fmt: skip


def show_race_model(layers: int, width: int, batch: int) -> None:
    """The race's model, as the notebook's constants set it (the markdown names them)."""
    grad_bytes = 4 * layers * (width * width + width)  # float32 weights and biases
    print(f"The race's model (section 4): {layers} × Linear({width}, {width}), {2 * layers} fp32 "
          f"gradient tensors, {grad_bytes / 2**20:.2f} MiB of gradients, batch {batch} per rank")


def plot_race(race: dict, ms: dict, whose: str) -> None:
    """Each variant's step time (median of the rounds, whiskers min to max), its all-reduce
    calls per step in its label."""
    import matplotlib.pyplot as plt

    names, calls = list(ms), race["all_reduce_calls"]
    labels = [k if calls[k] is None else f"{k} ({calls[k]} all-reduce{'s' * (calls[k] != 1)})"
              for k in names]  # fmt: skip
    colors = ["tab:red", "tab:orange"] + ["tab:blue"] * (len(names) - 3) + ["tab:green"]
    rounds = {k: [s * 1e3 for s in race["seconds"][k]] for k in names}
    spread_ms = [[ms[k] - min(rounds[k]) for k in names], [max(rounds[k]) - ms[k] for k in names]]
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(names) + 1.2))
    ax.barh(labels, [ms[k] for k in names], xerr=spread_ms, capsize=3, color=colors)
    ax.invert_yaxis()  # the first variant on top
    ax.set(xlabel=f"step time (ms; median of {len(rounds[names[0]])} rounds, whiskers min-max)",
           ylabel="variant", title=f"DDPs by hand ({whose} buckets) against torch's, "
           f"{race['world_size']} ranks, {race['tensors']} tensors ({race['grad_mb']:.1f} MiB of "
           "gradients)")  # fmt: skip
    plt.show()


TIMELINE_COLORS = {"step": "lightgrey", "forward": "tab:green", "backward": "tab:blue",
                   "all-reduce": "tab:red", "wait": "tab:brown", "optimizer": "tab:purple",
                   "kernel": "tab:olive"}  # fmt: skip


def plot_timeline(race: dict, whose: str) -> None:
    """One profiled step of the bucketed version on rank 0: the main thread's forward,
    backward, wait and optimizer, the backend's threads (or CUDA streams) below it."""
    import matplotlib.pyplot as plt

    events, colors = race["timeline"], TIMELINE_COLORS
    t0 = min(e["start_us"] for e in events)
    main = next(e["row"] for e in events if e["kind"] == "step")  # the thread that ran the step
    rows = [main] + sorted({e["row"] for e in events} - {main})  # backend threads, CUDA streams
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.5 * len(rows)))
    for e in events:
        height = 0.95 if e["kind"] == "step" else 0.7
        ax.broken_barh([((e["start_us"] - t0) / 1e3, (e["end_us"] - e["start_us"]) / 1e3)],
                       (rows.index(e["row"]) - height / 2, height), color=colors[e["kind"]])
    ax.set_yticks(range(len(rows)), [r if r.startswith("cuda") else
                                     f"{r} ({'main' if r == main else 'backend'})" for r in rows])
    kinds = sorted({e["kind"] for e in events}, key=list(colors).index)
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=colors[k]) for k in kinds], labels=kinds,
              ncol=len(kinds), loc="upper center", bbox_to_anchor=(0.5, -0.3))
    ax.set(xlabel="ms since the step began", ylabel="CPU thread or CUDA stream",
           title=f"One step of {whose} BucketedDDP ({race['profiled']}) on rank 0")
    plt.show()


def close(setup, claims) -> None:
    closing(setup, claims, STEM)


def what_carried(race: dict) -> None:
    """The race in a paragraph, from its rounds: the step from the naive version to the
    overlapped one keeps the calls and changes how they start (asynchronous, from hooks during
    backward: two changes the race does not separate); the step from the
    overlapped one to the fastest bucketed one changes only how many calls there are (both
    overlap). Which of the two gained more is said only where the rounds' spread says it."""
    from IPython.display import Markdown, display

    rounds, calls, best = race["seconds"], race["all_reduce_calls"], race["best_bucketed"]
    overlap = [n / o for n, o in zip(rounds["naive"], rounds["overlapped"], strict=True)]
    fewer = [o / b for o, b in zip(rounds["overlapped"], rounds[best], strict=True)]
    gained = spread(overlap, fewer)  # per round: fewer calls' gain over overlap's
    said = ("fewer calls carried more of the speed-up than the hook-started ones"
            if gained["ratio_low"] > 1 else
            "the hook-started calls carried more of the speed-up than fewer calls"
            if gained["ratio_high"] < 1 else
            "neither step gained measurably more than the other")  # fmt: skip
    display(Markdown(
        f"**What the race says, on this machine.** Starting the same {calls['overlapped']} "
        f"all-reduces asynchronously from hooks during backward (naive to overlapped: both "
        f"changes at once) made the step "
        f"{median(overlap):.2f}x faster (per round {min(overlap):.2f}x to {max(overlap):.2f}x); "
        f"making {calls[best]} calls of them instead, both overlapped (overlapped to {best}), "
        f"{median(fewer):.2f}x ({min(fewer):.2f}x to {max(fewer):.2f}x). Here {said}."))
