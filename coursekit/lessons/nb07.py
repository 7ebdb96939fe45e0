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
        "{share:.0%} of the all-reduce time of the profiled {shown} step lay inside backward",
        "share > 0", share=share, shown=shown,
        otherwise="its first bucket did not start before backward ended")
    claims.check(
        "in the profiled steps DDP overlapped less of its all-reduce time ({ddp_share:.0%}) "
        "than {shown} ({share:.0%})", "ddp_share < share", ddp_share=ddp_share,
        share=share, shown=shown, otherwise="in the profiled steps DDP overlapped at least as "
        "much ({ddp_share:.0%}) as {shown} ({share:.0%})")  # fmt: skip


def save(setup, claims, tasks, *, race: dict, ms: dict, whose: str, naive_passed: bool,
         overlapped_passed: bool, bucketed_passed: bool, all_passed: bool) -> None:  # fmt: skip
    """The results record: the three tasks, the race's step times, calls and overlap shares."""
    best, shown, naive, ddp = race["best_bucketed"], race["profiled"], ms["naive"], ms["torch DDP"]
    save_results(STEM, {
        "world_size": race["world_size"], "backend": race["backend"],
        "naive_passed": naive_passed, "overlapped_passed": overlapped_passed,
        "bucketed_passed": bucketed_passed,
        "exercise_passed": all_passed, "raced": whose, "tensors": race["tensors"],
        "best_bucket": best,
        **{f"step_ms_{_key(k)}": v for k, v in ms.items()},
        "bucketed_vs_ddp": ms[best] / ddp, "naive_vs_ddp": naive / ddp, "profiled_bucket": shown,
        "overlap_bucketed": race["overlap"][shown],
        "overlap_ddp": race["overlap"]["torch DDP"], "overlap_basis": race["overlap_basis"],
        "ddp_buckets": len(race["ddp_bucket_bytes"] or []),
        **{f"all_reduce_calls_{_key(k)}": v
           for k, v in race["all_reduce_calls"].items() if v is not None},
    }, setup, claims=claims, tasks=tasks)  # fmt: skip


def close(setup, claims) -> None:
    closing(setup, claims, STEM)


def what_carried(race: dict) -> None:
    """The race in a paragraph, from its rounds: the step from the naive version to the
    overlapped one changes only when the all-reduces start (the same calls); the step from the
    overlapped one to the fastest bucketed one changes only how many calls there are (both
    overlap). Which of the two gained more is said only where the rounds' spread says it."""
    from IPython.display import Markdown, display

    rounds, calls, best = race["seconds"], race["all_reduce_calls"], race["best_bucketed"]
    overlap = [n / o for n, o in zip(rounds["naive"], rounds["overlapped"], strict=True)]
    fewer = [o / b for o, b in zip(rounds["overlapped"], rounds[best], strict=True)]
    gained = spread(overlap, fewer)  # per round: fewer calls' gain over overlap's
    said = ("fewer calls carried more of the speed-up than overlap" if gained["ratio_low"] > 1
            else "overlap carried more of the speed-up than fewer calls"
            if gained["ratio_high"] < 1 else
            "neither step gained measurably more than the other")  # fmt: skip
    display(Markdown(
        f"**What the race says, on this machine.** Starting the same {calls['overlapped']} "
        f"all-reduces during backward (naive to overlapped) made the step "
        f"{median(overlap):.2f}x faster (per round {min(overlap):.2f}x to {max(overlap):.2f}x); "
        f"making {calls[best]} calls of them instead, both overlapped (overlapped to {best}), "
        f"{median(fewer):.2f}x ({min(fewer):.2f}x to {max(fewer):.2f}x). Here {said}."))
