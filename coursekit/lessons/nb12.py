"""Notebook 12, beyond data parallelism: its claims, plots, tallies and results record."""

from __future__ import annotations

import contextlib
import io
from collections import Counter

import matplotlib.pyplot as plt
import numpy as np

from ..results import save_results
from . import closing

STEM = "12_beyond_data_parallelism"
MiB = 2**20
KINDS = {"parameters": "param_bytes", "gradients": "grad_bytes", "optimizer": "optimizer_bytes",
         "activations": "activation_bytes"}  # the calculator's names -> a rank's record


def allreduce_calls(runs: dict, impls) -> dict:
    """Rank 0's all-reduces in one step of each tensor-parallel run: {impl: {phase: (how many,
    the set of their sizes in bytes)}}."""
    calls = {}
    for impl in impls:
        logged = runs[f"tp_{impl}"]["ranks"][0]["collectives"]
        calls[impl] = {}
        for phase in ("forward", "backward"):
            sent = [c["bytes"] for c in logged[phase] if c["op"] in ("allreduce", "all_reduce")]
            calls[impl][phase] = (len(sent), set(sent))
    return calls


def plot_timelines(runs: dict, N: int, m: int) -> None:
    """GPipe's and 1F1B's last step by hand: every stage's forwards (light) and backwards
    (dark), micro-batch numbers inside; the gaps are the bubble."""
    fig, axes = plt.subplots(2, 1, figsize=(11, 1.2 + 0.7 * N * 2), sharex=True)
    for ax, schedule in zip(axes, ("gpipe", "1f1b"), strict=True):
        run = runs[f"pp_hand_{schedule}"]
        for r, held in enumerate(run["ranks"]):
            for kind, i, start, end in held["timelines"][-1]:
                color = plt.cm.tab20(2 * (i % 10) + (kind == "B"))
                ax.barh(r, (end - start) * 1e3, left=start * 1e3, color=color, edgecolor="white")
                ax.text((start + end) / 2 * 1e3, r, f"{kind}{i}", ha="center", va="center",
                        fontsize=7)  # fmt: skip
        ax.set_yticks(range(len(run["ranks"])), [f"stage {r}" for r in range(len(run["ranks"]))])
        ax.invert_yaxis()
        ax.set(xlabel="ms since the step began", ylabel="rank",
               title=f"{schedule.upper()}, {N} stages, {m} micro-batches "
                     "(F: forward, B: backward; gaps: the bubble)")  # fmt: skip
    plt.tight_layout()
    plt.show()


def idle(run: dict) -> np.ndarray:
    """Each stage's idle fraction in each step after the first (which warms up), steps x
    stages: 1 - its compute time / the step's span (the last end of any stage)."""
    steps = [[held["timelines"][s] for held in run["ranks"]]
             for s in range(1, len(run["ranks"][0]["timelines"]))]  # fmt: skip
    return np.array([[1 - sum(end - start for *_, start, end in t)
                      / max(end for u in ts for *_, end in u) for t in ts]
                     for ts in steps])  # fmt: skip


def stage_times(run: dict, m: int) -> list[str]:
    """What a 1F1B run's timelines hold, per stage (medians over the steps after the first):
    its forward and its backward of one micro-batch, each on the stage's own clock, and its
    idle fraction of the step (:func:`idle`)."""
    steps = range(1, len(run["ranks"][0]["timelines"]))
    idle_shares = np.median(idle(run), axis=0)
    lines = [f"1F1B, m = {m}, per stage (medians over the steps after the first):"]
    for r, held in enumerate(run["ranks"]):
        took = {k: np.median([e - b for s in steps for kind, _, b, e in held["timelines"][s]
                              if kind == k]) for k in "FB"}  # fmt: skip
        lines.append(f"  stage {r}: forward {took['F'] * 1e3:.2f} ms, backward "
                     f"{took['B'] * 1e3:.2f} ms per micro-batch; idle {idle_shares[r]:.3f} "
                     "of the step")  # fmt: skip
    return lines


# the 2 x 2 mesh's groups: tensor-parallel pairs (0, 1), (2, 3), data-parallel (0, 2), (1, 3)
MESH_DIMS = {(0, 1): "tp", (2, 3): "tp", (0, 2): "dp", (1, 3): "dp"}


def collectives_by_dim(run: dict) -> Counter:
    """The 2-D run's collectives of one step: (rank, mesh dimension, op) -> how many."""
    return Counter((held["rank"], MESH_DIMS.get(tuple(c["ranks"] or ()), "?"),
                    c["op"].replace("_base", "").replace("allgather", "all_gather"))
                   for held in run["ranks"] for logged in held["collectives"].values()
                   for c in logged)  # fmt: skip


def calculator_rows(runs: dict, layouts: dict, shape: dict) -> list[tuple]:
    """Every rank of every layout: (label, rank, the record, the calculator's stage), where
    ``layouts`` maps a label to (its run's name, transformer_memory's layout arguments)."""
    from common import memory  # launchers/common: importable once coursekit.configure ran

    rows = []
    for label, (run, layout) in layouts.items():
        predicted = memory.transformer_memory(**layout, **shape)
        for held in runs[run]["ranks"]:
            stage = predicted[held["rank"]] if "pp" in layout else predicted[0]
            rows.append((label, held["rank"], held, stage))
    return rows


def one_process_bytes(runs: dict, layouts: dict, shape: dict) -> dict:
    """The calculator's bytes for one process training the whole model on each layout's
    whole batch: {label: bytes}, the reference each layout divides."""
    from common import memory

    return {label: memory.transformer_memory(micro_batch=runs[run]["model"]["batch"],
                                             **shape)[0]["total"]
            for label, (run, _) in layouts.items()}  # fmt: skip


def plot_calculator(rows: list[tuple], one_process: dict) -> None:
    """Each rank's measured bytes (bars, one colour per layout) beside the calculator's (black
    marks), and one process's with the layout's batch (a dashed line over its group)."""
    measured = [sum(held[k] for k in KINDS.values()) for _, _, held, _ in rows]
    labels = list(dict.fromkeys(label for label, *_ in rows))
    x = [i + labels.index(label) for i, (label, *_) in enumerate(rows)]  # a gap between groups
    fig, ax = plt.subplots(figsize=(12, 3.8))
    ax.bar(x, [m / MiB for m in measured], color=[f"C{labels.index(label)}" for label, *_ in rows],
           label="measured (tensor bytes)")  # fmt: skip
    ax.scatter(x, [stage["total"] / MiB for *_, stage in rows], color="k", marker="_", s=200,
               label="calculator", zorder=3)  # fmt: skip
    for n, label in enumerate(labels):
        mine = [xi for xi, (lab, *_) in zip(x, rows, strict=True) if lab == label]
        ax.hlines(one_process[label] / MiB, mine[0] - 0.45, mine[-1] + 0.45, colors="grey",
                  linestyles="--", label="one process, the same batch (calculator)" if n == 0
                  else None)  # fmt: skip
        ax.text((mine[0] + mine[-1]) / 2, -0.1, label, ha="center", va="top", fontsize=8,
                transform=ax.get_xaxis_transform())  # fmt: skip
    ax.set_xticks(x, [f"r{r}" for _, r, *_ in rows], fontsize=7)
    ax.set_xlabel("rank, by layout", labelpad=16)
    ax.set(ylabel="MiB per rank",
           title="parameters + gradients + AdamW + activations, per rank")  # fmt: skip
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    plt.tight_layout()
    plt.show()


def largest_diffs(run):
    """The largest differences from one process over a run's ranks: loss, gradients, parameters."""
    ranks = run["ranks"]
    return (run["loss_max_diff"], max(r["grad_max_diff"] for r in ranks),
            max(r["param_max_diff"] for r in ranks))  # fmt: skip


def claim_tp_trained(claims, *, tp_diffs: dict, tolerance: float) -> None:
    claims.check(
        "Tensor parallelism by hand and with torch trained the one-process model: largest "
        "differences {hand:.1e} and {torch:.1e} (losses, gradients, parameters; float64, below "
        "{tolerance:.1e})",
        "hand <= tolerance and torch <= tolerance", tolerance=tolerance, **tp_diffs,
        otherwise="the differences ({hand:.1e} by hand, {torch:.1e} with torch) are more than "
                  "float64 rounding: the split did not compute the same model here; compare the "
                  "gradients tensor by tensor")  # fmt: skip


def claim_allreduces(claims, *, calls: dict, expected: int, sizes: set, activation_bytes: int,
                     layers: int) -> None:  # fmt: skip
    """Megatron's all-reduces per step, by hand and with torch's plan; the plan of the Linears
    alone against the plan with one shared input."""
    claims.check(
        "Each step ran {hand_f} + {hand_b} all-reduces by hand and {torch_f} + {torch_b} with "
        "torch (forward + backward), each of batch x seq x hidden values ({mb:.3f} MiB): "
        "Megatron's 2 + 2 per block, {layers} blocks",
        "hand_f == expected and hand_b == expected and torch_f == expected and "
        "torch_b == expected and other_sizes == 0",
        hand_f=calls["hand"]["forward"][0], hand_b=calls["hand"]["backward"][0],
        torch_f=calls["torch"]["forward"][0], torch_b=calls["torch"]["backward"][0],
        expected=expected, mb=activation_bytes / MiB, layers=layers,
        other_sizes=len(sizes - {activation_bytes}),
        otherwise="the counts or sizes differ from Megatron's {expected} per phase of {mb:.3f} "
                  "MiB (by hand {hand_f} + {hand_b}, torch {torch_f} + {torch_b}; {other_sizes} "
                  "other sizes): a plan that gathers or reduces more than the split "
                  "needs")  # fmt: skip
    claims.check(
        "The plan for the Linears alone ran {linears} all-reduces in backward, {extra} more than "
        "the plan with one shared input: correct, and more communication",
        "linears > shared", linears=calls["torch-linears"]["backward"][0],
        shared=calls["torch"]["backward"][0],
        extra=calls["torch-linears"]["backward"][0] - calls["torch"]["backward"][0],
        otherwise="both plans ran {shared} all-reduces in backward here: this torch combines the "
                  "inputs' gradients itself")  # fmt: skip


def claim_param_share(claims, *, share: float, N: int, whole: float, predicted: float) -> None:
    claims.check(
        "Each rank held {share:.3f} of the parameter bytes: the split matrices / {N} and the "
        "{whole:.1%} kept whole (embeddings, norms, head, the row-parallel biases), as the "
        "calculator counts ({predicted:.3f})",
        "error < 0.001", share=share, N=N, whole=whole, predicted=predicted,
        error=abs(share - predicted), otherwise="each rank held {share:.3f} of the parameter "
        "bytes, the calculator says {predicted:.3f}: the launcher splits other tensors than the "
        "calculator assumes")  # fmt: skip


def claim_pp_trained(claims, *, pp_diffs: dict, tolerance: float) -> None:
    claims.check(
        "Both schedules, by hand and with torch.distributed.pipelining, trained the one-process "
        "model: largest difference {worst:.1e} (float64, below {tolerance:.1e})",
        "worst <= tolerance", worst=max(pp_diffs.values()), tolerance=tolerance,
        otherwise="a pipeline run differs from one process by {worst:.1e}: more than rounding "
                  "(look at which one)")  # fmt: skip


def plot_bubble(sweep: list, measured_bubble: dict, N: int) -> None:
    """1F1B's measured idle fraction against m, beside (p-1)/(m+p-1) and its 20% band."""
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ms = np.arange(1, max(sweep) + 1)
    ax.plot(ms, (N - 1) / (ms + N - 1), "k--", label="(p-1)/(m+p-1)")
    ax.fill_between(ms, 0.8 * (N - 1) / (ms + N - 1), 1.2 * (N - 1) / (ms + N - 1), color="k",
                    alpha=0.08, label="formula ± 20%")  # fmt: skip
    ax.plot(sweep, [measured_bubble[m] for m in sweep], "o-", label=f"measured, 1F1B, {N} stages")
    ax.set(xlabel="micro-batches m", ylabel="idle fraction per stage", ylim=(0, 1),
           title="the pipeline bubble")  # fmt: skip
    ax.legend()
    plt.show()


def claim_bubble(claims, *, measured: dict, formula: dict, sweep: list) -> None:
    """The measured bubble within 20% of the formula for 3 values of m (all, where fewer ran)."""
    within = [m for m in sweep if abs(measured[m] / formula[m] - 1) <= 0.2]
    needed = min(3, len(sweep))
    claims.check(
        "The measured bubble came within 20% of (p-1)/(m+p-1) for {held} of the {tried} values "
        "of m tried ({values})",
        "held >= needed", held=len(within), needed=needed, tried=len(sweep),
        values=", ".join(map(str, within)) or "none",
        otherwise="the measured bubble came within 20% of the formula for only {held} of {tried} "
                  "values of m ({values}): the formula counts equal stages and instant hand-offs; "
                  "the stage times below are this run's")  # fmt: skip


@contextlib.contextmanager
def judged_by(ok, message: str, *, measured: float, shown, count: float):
    """Around ``tasks.predict("bubble", guess, count, within=0.1)``: the prediction is recorded
    as one (right within 10 % of the schedule's count, as check_bubble judges), and check_bubble's
    words are printed in place of predict's own, which would call the count "the run measured";
    then what the run measured, beside the count."""
    with contextlib.redirect_stdout(io.StringIO()):
        yield
    where = ("within 10 % of" if abs(measured / count - 1) <= 0.1 else
             "above" if measured > count else "below")  # fmt: skip
    prefix = {True: "RIGHT (bubble): ", False: "NOT YET (bubble): ",
              None: "(not tried yet: bubble) "}  # fmt: skip
    print(prefix[ok] + f"{message}. "
          f"The run measured {measured:.3f} (its stages and steps: {np.min(shown):.3f} to "
          f"{np.max(shown):.3f}), {where} the count {count:.3f}: the stage times below")


def claim_1f1b_memory(claims, *, m: int, p: int, peaks: dict) -> None:
    claims.check(
        "With m = {m} > p = {p}, stage 0 under 1F1B kept {ratio:.2f} of what it kept under GPipe "
        "(at most p micro-batches in flight against all m)",
        "one_f_one_b < gpipe", m=m, p=p, one_f_one_b=peaks["1f1b"][0], gpipe=peaks["gpipe"][0],
        ratio=peaks["1f1b"][0] / peaks["gpipe"][0],
        otherwise="stage 0 kept as much under 1F1B as under GPipe here ({ratio:.2f} of it): with "
                  "m <= p both hold every micro-batch")  # fmt: skip


def claim_mesh(claims, *, misplaced: int, total: int, diff: float, tolerance: float) -> None:
    claims.check(
        "On the 2 x 2 mesh every all-reduce ran inside a tensor-parallel pair and every "
        "all-gather and reduce-scatter inside a data-parallel pair ({total} collectives in one "
        "step on 4 ranks); the run trained the one-process model to {diff:.1e} (float64)",
        "misplaced == 0 and diff <= tolerance", misplaced=misplaced, total=total,
        diff=diff, tolerance=tolerance,
        otherwise="{misplaced} collectives ran on another dimension than the forms assign, or the "
                  "run differs from one process by {diff:.1e}: look at the table "
                  "above")  # fmt: skip


def claim_calculator(claims, *, errors: dict, worst: tuple, layouts: int) -> None:
    claims.check(
        "The calculator came within {worst:.2%} of the bytes each rank measured, in all {n} "
        "rank-runs of {layouts} layouts",
        "worst <= 0.1", worst=abs(errors[worst]), n=len(errors), layouts=layouts,
        otherwise="the calculator missed {where} by {worst:.1%}: that layout keeps something the "
                  "formulas leave out",
        where=f"{worst[0]} rank {worst[1]}")  # fmt: skip


def save(setup, claims, tasks, *, N, tp_launch, runs, n_params, calls, expected, param_share,
         sizes, activation_bytes, pp_diffs, m_shown, sweep, measured_bubble, formula,
         bubble_judged, peaks, misplaced, errors, worst, params_counted_exactly,
         f64_tolerance) -> None:  # fmt: skip
    phases = ("forward", "backward")
    save_results(STEM, {
        "world_size": N, "backend": tp_launch.metrics["backend"],
        "mesh_backend": runs["2d"]["backend"], "n_params": n_params,
        **{f"tp_{impl.replace('-', '_')}_max_diff": max(largest_diffs(runs[f"tp_{impl}"]))
           for impl in calls},
        **{f"tp_{impl.replace('-', '_')}_{phase}_allreduces": calls[impl][phase][0]
           for impl in calls for phase in phases},
        "tp_expected_allreduces_per_phase": expected, "tp_param_share_rank0": param_share,
        "tp_allreduce_bytes": max(sizes), "tp_allreduce_sizes": len(sizes),
        "tp_expected_allreduce_bytes": activation_bytes,
        **{f"pp_{name}_max_diff": diff for name, diff in pp_diffs.items()},
        "pipeline_microbatches_shown": m_shown,
        **{f"bubble_m{m}": measured_bubble[m] for m in sweep},
        **{f"bubble_formula_m{m}": formula[m] for m in sweep},
        **{f"bubble_judged_{k}": v for k, v in bubble_judged.items()},
        **{f"{s}_peak_activation_bytes_stage{r}": peak for s in peaks
           for r, peak in enumerate(peaks[s])},
        "fsdp_tp_max_diff": max(largest_diffs(runs["2d"])),
        "fsdp_tp_misplaced_collectives": misplaced,
        "calculator_worst_error": abs(errors[worst]), "calculator_rank_runs": len(errors),
        "calculator_params_exact": all(params_counted_exactly), "f64_tolerance": f64_tolerance,
    }, setup, claims=claims, tasks=tasks)  # fmt: skip


def close(setup, claims) -> None:
    closing(setup, claims, STEM)


def plot_megatron_split(world: int = 2) -> None:
    """Megatron's MLP over ``world`` ranks: fc's weight cut by columns (output features), proj's
    by rows (input features), one colour per rank, and where f and g sit."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, Rectangle

    colors = plt.get_cmap("tab10").colors
    fig, ax = plt.subplots(figsize=(9, 3.4))
    # x (h) -> f -> fc: h x 4h, by columns -> GELU -> proj: 4h x h, by rows -> g -> y (h)
    ax.add_patch(Rectangle((0, 1), 0.5, 2, color="lightgrey"))
    ax.text(0.25, 0.75, "x\nb x s x h", ha="center", va="top", fontsize=8)
    for r in range(world):  # fc's weight, h rows x 4h columns: rank r keeps columns block r
        ax.add_patch(Rectangle((2 + 4 * r / world, 1), 4 / world, 2, color=colors[r], alpha=0.8))
        ax.text(2 + 4 * (r + 0.5) / world, 2, f"rank {r}", ha="center", va="center", fontsize=8)
    ax.text(4, 0.75, "fc: h x 4h, cut by columns\n(each rank: 4h/N output features)",
            ha="center", va="top", fontsize=8)
    for r in range(world):  # proj's weight, 4h rows x h columns: rank r keeps rows block r
        top = 3.5 - 3 * r / world
        ax.add_patch(Rectangle((8, top - 3 / world), 1.5, 3 / world, color=colors[r], alpha=0.8))
        ax.text(8.75, top - 1.5 / world, f"rank {r}", ha="center", va="center", fontsize=8)
    ax.text(8.75, 0.35, "proj: 4h x h, cut by rows\n(each rank: a partial sum)",
            ha="center", va="top", fontsize=8)
    ax.add_patch(Rectangle((11.5, 1), 0.5, 2, color="lightgrey"))
    ax.text(11.75, 0.75, "y\nb x s x h", ha="center", va="top", fontsize=8)
    for (x0, x1), label in [((0.5, 2), "f"), ((6, 8), "GELU"), ((9.5, 11.5), "g")]:
        ax.add_patch(FancyArrowPatch((x0, 2), (x1, 2), arrowstyle="->", mutation_scale=12))
        ax.text((x0 + x1) / 2, 2.15, label, ha="center", va="bottom", fontsize=10,
                fontweight="bold" if label != "GELU" else "normal")
    ax.text(1.25, 3.6, "f: forward identity,\nbackward all-reduce", ha="center", fontsize=8)
    ax.text(10.5, 3.6, "g: forward all-reduce,\nbackward identity", ha="center", fontsize=8)
    ax.set(xlim=(-0.3, 12.3), ylim=(-0.6, 4.4), xticks=[], yticks=[],
           xlabel="the block's data flow, left to right (no gather between fc and proj)",
           ylabel="weights and activations",
           title=f"Megatron's MLP over {world} ranks: 1 all-reduce forward (g), 1 backward (f)")
    plt.show()


def plot_mesh(dp: int = 2, tp: int = 2) -> None:
    """The (dp, tp) device mesh: rank = dp_rank * tp + tp_rank; each row a tensor-parallel group
    (the same samples, a share of every matrix), each column a data-parallel group."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for d in range(dp):
        ax.add_patch(FancyBboxPatch((-0.45, d - 0.35), tp - 0.1, 0.7, boxstyle="round,pad=0.05",
                                    color="tab:blue", alpha=0.15))  # fmt: skip
        ax.text(tp - 0.4, d, f"tp group {d}: all-reduces\n(samples half {d})", va="center",
                fontsize=8, color="tab:blue")  # fmt: skip
    for t in range(tp):
        ax.plot([t, t], [-0.3, dp - 0.7], color="tab:orange", linewidth=6, alpha=0.35,
                solid_capstyle="round")  # fmt: skip
        ax.text(t, dp - 0.45, f"dp group {t}:\nall-gather,\nreduce-scatter", ha="center",
                va="top", fontsize=8, color="tab:orange")  # fmt: skip
    for d in range(dp):
        for t in range(tp):
            ax.scatter([t], [d], s=900, color="white", edgecolor="black", zorder=3)
            ax.text(t, d, f"rank\n{d * tp + t}", ha="center", va="center", fontsize=8, zorder=4)
    ax.set(xlim=(-0.8, tp + 1.2), ylim=(dp + 0.5, -0.7), xticks=range(tp), yticks=range(dp),
           xlabel="tp rank (mesh dimension 'tp': a share of every matrix)",
           ylabel="dp rank (mesh dimension 'dp')",
           title=f"The {dp} x {tp} mesh: rows split the matrices, columns the data")
    plt.show()
