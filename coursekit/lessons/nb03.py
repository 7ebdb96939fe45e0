"""Notebook 03, your first DDP run: its claims and results record."""

from __future__ import annotations

from ..results import save_results
from . import closing

STEM = "03_your_first_ddp_run"


def claim_replicas(claims, *, first: dict, worst: float, differing: int, steps: int,
                   before: list, after_wrap: list, spawn_checksums: dict, checksums: list) -> None:
    """The loss fell on every rank, the replicas stayed rank 0's, DDP(model) broadcast them
    (with 2 ranks or more), and the mp.spawn form matched the torchrun form (where it ran)."""
    n = len(first["ranks"])
    claims.check(
        "The loss fell on every one of the {n} ranks: the worst ended at {worst:.2f}x its first "
        "loss",
        "worst < 0.5", n=n, worst=worst,
        otherwise="the worst rank's loss ended at {worst:.2f}x its first: {steps} steps at this "
                  "learning rate were too few to halve it", steps=steps)
    claims.check(
        "Every rank ended with rank 0's parameters, bit for bit: torch.equal held for all "
        "{tensors} parameter tensors on each of the {n} ranks",
        "differing == 0", n=n, tensors=first["ranks"][0]["tensors"], differing=differing,
        otherwise="{differing} parameter tensor(s), counted over the ranks, differ from rank 0's: "
                  "the replicas drifted apart (likely, not measured here: a rank stepped without "
                  "the all-reduce, or changed its parameters outside DDP)")
    if first["world_size"] > 1:
        claims.check(
            "Built from {n} seeds, {before} parameter tensors (over the ranks) differed from rank "
            "0's; right after DDP(model), {after}: DDP broadcast rank 0's when it was built",
            "after == 0 and before > 0",
            n=first["world_size"], before=sum(before), after=sum(after_wrap),
            otherwise="{before} tensors differed from rank 0's before DDP(model), {after} right "
                      "after it")
    if spawn_checksums:
        claims.check(
            "The mp.spawn form and the torchrun form ended with the same parameter checksum "
            "(float64 sum of every parameter): {spawn:.12f} and {torchrun:.12f}, the same program "
            "under two launchers",
            "difference == 0", spawn=spawn_checksums[0], torchrun=checksums[0],
            difference=abs(spawn_checksums[0] - checksums[0]),
            otherwise="the two forms' checksums differ by {difference:.1e}: the same program "
                      "rounded differently (likely, not measured here: other thread counts or "
                      "kernels in the two launches)")


def save(setup, claims, tasks, *, first: dict, run, steps: int, losses: list, worst: float,
         fell_everywhere: bool, differing: int, identical: bool, before: list, after_wrap: list,
         classic_form: str, spawn_checksums: dict, checksums: list) -> None:
    """The results record: the torchrun run's losses and replicas, and the mp.spawn form's."""
    save_results(STEM, {
        "world_size": first["world_size"],
        "backend": first["backend"],
        "steps": steps,
        "first_loss_rank0": losses[0][0],
        "last_loss_rank0": losses[0][-1],
        "worst_last_to_first_ratio": worst,
        "loss_fell_on_every_rank": fell_everywhere,
        "differing_tensors": differing,
        "differing_before_ddp": sum(before),
        "differing_after_wrap": sum(after_wrap),
        "replicas_identical": identical,
        "run_seconds": run.seconds,
        "classic_form": classic_form,
        "spawn_ranks": len(spawn_checksums),
        "spawn_checksum_difference": abs(spawn_checksums[0] - checksums[0]) if spawn_checksums
                                     else -1.0,
    }, setup, claims=claims, tasks=tasks)  # fmt: skip


def close(setup, claims) -> None:
    closing(setup, claims, STEM)


def plot_replicas(first: dict) -> None:
    """Left: each rank's loss, on its own batches (they differ). Right: how many parameter
    tensors of each rank differ from rank 0's, built from its own seed, right after DDP(model),
    and at the end (torch.equal): the replicas stay equal while their data differ."""
    import matplotlib.pyplot as plt
    import numpy as np

    ranks = first["ranks"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.3), width_ratios=[3, 2])
    for rank, record in enumerate(ranks):
        left.plot(record["losses"], label=f"rank {rank}", alpha=0.85)
    left.set(yscale="log", xlabel="step", ylabel="MSE loss (log scale)",
             title="each rank's loss, on its own batches")
    left.legend(fontsize=8)
    moments = [("built (own seed)", "differing_before_ddp"), ("after DDP(model)",
               "differing_after_wrap"), ("after training", "differing_tensors")]  # fmt: skip
    xs, width = np.arange(len(moments)), 0.8 / len(ranks)
    for rank, record in enumerate(ranks):
        right.bar(xs + (rank - (len(ranks) - 1) / 2) * width, [record[k] for _, k in moments],
                  width, label=f"rank {rank}")
    right.set_xticks(xs, [name for name, _ in moments], fontsize=8)
    right.set(ylim=(0, ranks[0]["tensors"] + 0.5), xlabel="when",
              ylabel=f"tensors unlike rank 0's (of {ranks[0]['tensors']})",
              title="the replicas: equal from DDP(model) on")
    right.legend(fontsize=8)
    fig.suptitle(f"DDP over {first['world_size']} rank(s), backend {first['backend']}")
    plt.show()
