"""Notebook 06, DP vs DDP measured: its claims and results record."""

from __future__ import annotations

from statistics import median as med

import numpy as np

from ..claims import spread
from ..results import save_results
from . import closing

STEM = "06_dp_vs_ddp_measured"
TIE = "{what}: no measurable difference ({ratio_low:.2f}x to {ratio_high:.2f}x over the rounds)"


def ddp_name(n: int) -> str:
    return f"DDP {n} rank{'s' * (n > 1)}"


def claim_ddp_vs_dp(claims, *, secs: dict, speedup: dict, bench: dict, n: int, dp_name: str,
                    solo: str, all_threads: list, wire_ms: float) -> dict:  # fmt: skip
    """DDP against DP on both models, and one process on every core against DDP (CPU);
    returns {model: its DDP vs DP claim}."""
    N, DDP_N = n, ddp_name(n)  # the notebook's names
    py, mm = secs["python"], secs["matmul"]
    ddp_vs_dp = {"python": claims.compare(
        "On the Python-heavy model DDP's {n} ranks stepped {ratio:.2f}x faster than DP's {n} "
        "threads", less=py[DDP_N], more=py[dp_name], tie=TIE,
        what="DDP vs DP, Python-heavy model", n=N,
        dp_x=speedup["python"][dp_name], ddp_x=speedup["python"][DDP_N],
        load=bench["load_average"][0], cpus=bench["cpus"],
        otherwise="On the Python-heavy model DP stepped faster than DDP in every round (DDP at "
        "{ratio:.2f}x DP's speed; DP {dp_x:.2f}x, DDP {ddp_x:.2f}x one process; load average "
        "{load:.1f} on {cpus} CPUs)")}  # fmt: skip
    gap_ms = (med(mm[DDP_N]) - med(mm[solo]) / N) * 1e3  # DDP's step above 1/N of one process's
    on_cpu = bool(all_threads)  # CPU cores: DP's threads and DDP's ranks share them
    matmul = {"tie": TIE, "n": N, "dp_x": speedup["matmul"][dp_name], "gap_ms": gap_ms,
              "wire_ms": wire_ms, "share": wire_ms / max(gap_ms, 1e-3),
              "ddp_over_dp": med(mm[dp_name]) / med(mm[DDP_N])}  # fmt: skip
    if on_cpu:  # the CPU tier's expectation: DDP does not beat DP's threads on matmuls
        ddp_vs_dp["matmul"] = claims.compare(
            "On a CPU the matmul model's DP ({n} threads) stepped {ratio:.2f}x faster than DDP's "
            "{n} ranks", less=mm[dp_name], more=mm[DDP_N], what="DP vs DDP, matmul model",
            otherwise="On this CPU DDP's {n} ranks stepped faster than DP's {n} threads on the "
            "matmul model in every round ({ratio:.2f}x DP's step time); DDP's step was "
            "{gap_ms:.1f} ms above 1/{n} of one process's, the alpha-beta wire time {wire_ms:.1f} "
            "ms ({share:.0%} of that)", **matmul)  # fmt: skip
    else:
        ddp_vs_dp["matmul"] = claims.compare(
            "On the matmul model DDP's {n} ranks stepped {ratio:.2f}x faster than DP's {n} threads",
            less=mm[DDP_N], more=mm[dp_name], what="DDP vs DP, matmul model",
            otherwise="On the matmul model DP stepped faster than DDP in every round (DDP at "
            "{ratio:.2f}x DP's speed, DP {dp_x:.2f}x one process); DDP's step was {gap_ms:.1f} ms "
            "above 1/{n} of one process's, the alpha-beta wire time {wire_ms:.1f} ms ({share:.0%} "
            "of that)", **matmul)  # fmt: skip
    one_vs_ddp = ("On the matmul model one process with {k} threads ({thr_x:.2f}x one thread) "
                  "stepped {ratio:.2f}x faster than DDP's {n} ranks")  # fmt: skip
    if all_threads:  # CPU cores: one process can use them all
        th = bench["scaling"]["matmul"]["threads"]  # timed apart from the rest: unpaired
        claims.compare(
            one_vs_ddp, less=th[all_threads[0]], more=mm[DDP_N],
            paired=False, tie=TIE, what="one process vs DDP, matmul model", n=N,
            k=bench["threads_per_rank"] * N, thr_x=med(th[solo]) / med(th[all_threads[0]]),
            otherwise="On the matmul model DDP's {n} ranks stepped faster than one process with "
            "{k} threads (DDP's step {ratio:.2f}x its; its threads ran {thr_x:.2f}x one thread)")
    else:
        claims.skip(one_vs_ddp, n=N, expect="one process on every CPU core as threads would be "
                    "timed against DDP's {n} ranks",
                    why="one process drives one GPU here: no thread count to compare")  # fmt: skip
    return ddp_vs_dp


def memory(bench: dict, n: int, width: int) -> dict:
    """Notebook 01's calculator (launchers/common/memory.py) on section 2's MLP, with plain SGD
    as the benchmark steps it (no optimizer state): bytes per device of one process, DP and
    DDP, DDP's bucket copy, and a DDP rank's state alone (no activations or outputs)."""
    from common.memory import ddp_memory, dp_memory  # launchers/: importable after configure

    sc = bench["scaling"]["matmul"]
    params, batch = sc["params"], sc["global_batch"]
    kw = dict(activation_bytes_per_sample=sc["activation_bytes_per_sample"], output_size=10,
              input_size=width, label_bytes_per_sample=8, optimizer="sgd")  # fmt: skip
    ddp = ddp_memory(params, batch, n, **kw)
    return {"one": dp_memory(params, batch, 1, **kw)[0], "dp": dp_memory(params, batch, n, **kw),
            "ddp": ddp, "bucket_copy": ddp[0] - ddp_memory(params, batch, n, bucket_view=True,
                                                           **kw)[0],
            "state": ddp_memory(params, batch, n, **{**kw, "activation_bytes_per_sample": 0,
                                                     "output_size": 0})[0],
            "global_batch": batch}  # fmt: skip


def plot_memory(mem: dict, measured: list | None, n: int):
    """DP's and DDP's bytes per device by the calculator, and what DDP's ranks measured."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 2.8))
    xs = np.arange(n)
    ax.bar(xs - 0.27, np.array(mem["dp"]) / 2**20, 0.27, label="DataParallel (calculator)",
           color="tab:orange")
    ax.bar(xs, np.array(mem["ddp"]) / 2**20, 0.27, label="DDP (calculator)", color="tab:blue")
    if measured:
        ax.bar(xs + 0.27, np.array(measured) / 2**20, 0.27, label="DDP (measured)",
               color="tab:cyan")
    ax.set_xticks(xs, [f"device {k}" for k in xs])
    ax.set(xlabel="device", ylabel="MiB",
           title=f"Memory per device with SGD: the MLP, global batch {mem['global_batch']}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))  # outside the axes: covers no bar
    return fig


def claim_memory(claims, *, mem: dict, bench: dict, n: int) -> tuple[float, float]:
    """DP's device 0 against its last device, DDP's ranks against each other (calculator), then
    the calculator against what the run measured of a DDP rank; returns (DP's ratio, DDP's)."""
    dp_ratio, ddp_balance = mem["dp"][0] / max(mem["dp"][-1], 1), max(mem["ddp"]) / min(mem["ddp"])
    claims.check(
        "With SGD, as the benchmark steps, DP's device 0 needs {dp_ratio:.2f}x its last device's "
        "memory (calculator); DDP's ranks need the same ({ddp_balance:.2f}x), {bucket_mib:.1f} "
        "MiB of it the bucket copy", "dp_ratio > 1 and ddp_balance == 1", dp_ratio=dp_ratio,
        ddp_balance=ddp_balance, bucket_mib=mem["bucket_copy"] / 2**20, otherwise="With SGD the "
        "calculator puts DP's device 0 at {dp_ratio:.3f}x its last device, DDP's ranks at "
        "{ddp_balance:.2f}x each other")  # fmt: skip
    calc, state = mem["ddp"][0], mem["state"]
    figures = {"calc_mib": calc / 2**20, "floor_mib": state / 2**20,
               "ceil_mib": (2 * calc - state) / 2**20, "n": n}  # fmt: skip
    template = ("The calculator puts a DDP rank of the MLP at {calc_mib:.1f} MiB; the {n} ranks "
                "measured {low_mib:.1f} to {high_mib:.1f} MiB, between its state alone "
                "({floor_mib:.1f}) and its total with the activations counted twice "
                "({ceil_mib:.1f}: backward's buffers)")  # fmt: skip
    measured = [r["footprint_bytes"].get(f"matmul: {ddp_name(n)}") for r in bench["ranks"]]
    if all(measured):
        claims.check(template, "floor_mib <= low_mib and high_mib <= ceil_mib",
                     low_mib=min(measured) / 2**20, high_mib=max(measured) / 2**20,
                     otherwise="The calculator puts a DDP rank of the MLP at {calc_mib:.1f} MiB; "
                     "the {n} ranks measured {low_mib:.1f} to {high_mib:.1f} MiB, outside "
                     "{floor_mib:.1f} to {ceil_mib:.1f}", **figures)  # fmt: skip
    else:
        rss = ", ".join(f"{r['peak_bytes'] / 2**20:.0f}" for r in bench["ranks"])
        claims.skip(template, expect="a DDP rank's measured bytes would lie between the "
                    "calculator's state alone ({floor_mib:.1f} MiB) and its total with the "
                    "activations counted twice ({ceil_mib:.1f} MiB)", why="a CPU's run measures "
                    f"each rank's peak resident memory ({rss} MiB), which holds the interpreter, "
                    "torch and every variant: not what DDP added", **figures)  # fmt: skip
    return dp_ratio, ddp_balance


def claim_sweep(claims, *, sweep: list, n: int, bench: dict, batch: int, ddp_rounds: list,
                alpha: float, beta: float) -> tuple[int, dict, float]:  # fmt: skip
    """The two ends of the batch sweep, the alpha-beta line against the measured spread, and
    section 2's DDP stepped again in the sweep's rounds (``ddp_rounds``: section 2's).
    Returns (the points where the line lies above the spread, the same-rounds spread, the
    ratio minutes apart)."""
    N = n  # the notebook's name
    small, large = sweep[0], sweep[-1]
    above = sum(s["pred"] > max(s["effs"]) for s in sweep)  # the line above the whole spread
    claims.compare(
        "At the compute-bound end (batch {batch} per rank) {n} ranks took {ratio:.2f}x one "
        "process's step: {speedup:.2f}x its samples per second, of {n}x at best",
        less=large["one"], more=large["many"], tie=TIE, n=N, batch=large["batch"],
        what=f"compute-bound end, {N} ranks vs one process", speedup=N * large["eff"],
        otherwise="At the compute-bound end (batch {batch} per rank) {n} ranks stepped faster "
        "than one process in every round ({ratio:.2f}x its step time)")  # fmt: skip
    claims.compare(
        "The communication-bound end (batch {small}, efficiency {less_median:.2f}) scaled worse "
        "than the compute-bound end (batch {large}, {more_median:.2f})", less=small["effs"],
        more=large["effs"], paired=False, tie=TIE, what="efficiency at the two ends of the sweep",
        small=small["batch"], large=large["batch"], otherwise="The communication-bound end "
        "(batch {small}, {less_median:.2f}) scaled better than the compute-bound end "
        "({more_median:.2f})")  # fmt: skip
    explained = ("at batch {small} its wire time is {share:.0%} of what {n} ranks took beyond "
                 "one process")  # fmt: skip
    figures = {"above": above, "points": len(sweep), "small": small["batch"],
               "share": small["wire_share"], "n": N, "alpha_us": alpha * 1e6,
               "beta_gbps": beta / 1e9}
    if bench["device"].startswith("cpu"):  # the ranks and gloo's threads share the cores
        claims.check(
            "On a CPU the alpha-beta line lies above the measured spread at {above} of {points} "
            "batch sizes: what it leaves out (ranks sharing the cores) costs more than overlap "
            "saves; " + explained, "above > 0.5 * points", otherwise="On this CPU the alpha-beta "
            "line lies above the measured spread at only {above} of {points} batch sizes, with "
            "α = {alpha_us:.0f} µs and β = {beta_gbps:.2f} GB/s fitted in section 0, minutes "
            "before the sweep; " + explained, expect="On a CPU the alpha-beta line lies above "
            "the measured spread at most of the {points} batch sizes: what it leaves out (ranks "
            "sharing the cores) costs more than overlap saves", **figures)
    else:
        claims.check(
            "The alpha-beta line lies above the measured spread at none of the {points} batch "
            "sizes; " + explained, "above == 0", otherwise="The alpha-beta line lies above the "
            "measured spread at {above} of {points} batch sizes; " + explained, **figures)
    at = next(p["seconds"] for p in bench["sweep"] if p["batch_per_rank"] == batch)
    again = at["the scaling part's DDP"]  # section 2's DDP, stepped again in these rounds
    same = spread(at[f"{N} ranks"], again)  # per round, side by side
    apart = med(ddp_rounds) / med(at[f"{N} ranks"])  # section 2's own rounds, minutes before
    claims.check(
        "Section 2's DDP, stepped again in the sweep's rounds at batch {batch} per rank, matches "
        "the sweep's ({ratio_low:.2f}x to {ratio_high:.2f}x); minutes apart they differed by "
        "{apart:.2f}x, load average {load_2:.1f} then {load_3:.1f}",
        "ratio_low <= 1 and ratio_high >= 1",
        batch=batch, apart=apart, load_2=bench["load_average_scaling"],
        load_3=bench["load_average_sweep"], **same, otherwise="Section 2's DDP, stepped again in "
        "the sweep's rounds at batch {batch} per rank, differs from the sweep's ({ratio_low:.2f}x "
        "to {ratio_high:.2f}x); minutes apart {apart:.2f}x, load average {load_2:.1f} then "
        "{load_3:.1f}")  # fmt: skip
    return above, same, apart


TORCH_DEFAULT_CAP_MB = 25.0  # DDP's bucket_cap_mb when None (torch/nn/parallel/distributed.py)


def claim_buckets(claims, *, step_ms: dict, made: dict, caps: dict, best_cap: float,
                  next_cap: float, cap_buckets: dict, tensors: int):  # fmt: skip
    """DDP's buckets against one blocking all-reduce per tensor, the buckets an explicit cap
    makes, and the fastest cap; returns the first claim."""
    DEFAULT = "DDP default buckets"  # the notebook's name
    blocking = claims.compare(
        "DDP's default buckets stepped {ratio:.1f}x faster than one blocking all-reduce per "
        "tensor ({tensors} calls in a row)", less=step_ms[DEFAULT],
        more=step_ms["per-parameter, blocking"], tie=TIE,
        what="default buckets vs blocking per tensor", tensors=tensors,
        otherwise="One blocking all-reduce per tensor stepped faster than DDP's buckets in every "
        "round ({ratio:.2f}x their speed)")  # fmt: skip
    if made.get(DEFAULT) and all(cap_buckets.values()):
        explicit = ("DDP's default made {default} buckets, an explicit bucket_cap_mb=25 made "
                    "{explicit}: an explicit cap also sets the first bucket's")
        if TORCH_DEFAULT_CAP_MB in cap_buckets:
            claims.check(
                explicit, "explicit < default", default=made[DEFAULT],
                explicit=cap_buckets[TORCH_DEFAULT_CAP_MB],
                otherwise="DDP's default and an explicit bucket_cap_mb=25 made the same number of "
                "buckets here ({default})")  # fmt: skip
        else:
            claims.skip(explicit, default=made[DEFAULT], expect="an explicit bucket_cap_mb=25 "
                        "would make fewer buckets than the default's {default}",
                        why="BUCKET_CAPS_MB holds no cap of 25 MiB, DDP's default cap")
        fastest = claims.compare(
            "The fastest cap, {best:g} MiB ({buckets} buckets), stepped {ratio:.2f}x faster than "
            "the next, {next:g} MiB", less=caps[best_cap], more=caps[next_cap], tie=TIE,
            best=best_cap, next=next_cap, buckets=cap_buckets[best_cap],
            what="the two fastest caps",
            otherwise="{next:g} MiB stepped faster than {best:g} MiB in every round")  # fmt: skip
        between = ("The fastest cap, {best:g} MiB ({buckets} buckets), lies between the extremes "
                   "({fewest} and {most} buckets)")  # fmt: skip
        extremes = {"fewest": min(cap_buckets.values()), "most": max(cap_buckets.values())}
        if fastest.outcome == "held":
            claims.check(
                between, "buckets > fewest and buckets < most", best=best_cap,
                buckets=cap_buckets[best_cap], **extremes,
                otherwise="The fastest cap, {best:g} MiB ({buckets} buckets), is an extreme of "
                "{fewest} to {most} buckets")  # fmt: skip
        else:
            claims.skip(
                between, **extremes, expect="the fastest cap would be placed between the "
                "extremes ({fewest} and {most} buckets)", why="no cap was measurably "
                f"fastest: {best_cap:g} and {next_cap:g} MiB tie over the rounds")  # fmt: skip
    return blocking


def claim_bucket_view(claims, *, step_ms: dict):
    """gradient_as_bucket_view=True against the default buckets; returns the claim."""
    return claims.compare(
        "gradient_as_bucket_view=True stepped {ratio:.2f}x faster at the same buckets",
        less=step_ms["DDP default buckets, gradient_as_bucket_view"],
        more=step_ms["DDP default buckets"], tie=TIE, what="gradient_as_bucket_view=True",
        otherwise="gradient_as_bucket_view=True stepped slower in every round ({ratio:.2f}x the "
        "default's speed)")  # fmt: skip


def timeline_rows(events: list) -> dict:
    """Row of the profiler (thread id or CUDA stream) -> what it is: the thread that ran the
    step, autograd's backward thread (a GPU's), gloo's worker threads, the GPU's streams."""
    kinds = {}
    for e in events:
        kinds.setdefault(e["row"], set()).add(e["kind"] if not e["name"].startswith("gloo:")
                                               else "gloo")
    names, gloo = {}, 0
    for row in sorted(kinds, key=lambda r: (r.startswith("cuda"), r)):
        k = kinds[row]
        if row.startswith("cuda"):
            names[row] = f"GPU {row}" + (": NCCL" if "all-reduce" in k else "")
        elif "step" in k:
            names[row] = "main thread: the step" + (", backward" if "backward" in k else "")
        elif "gloo" in k:
            gloo += 1
            names[row] = f"gloo's worker thread {gloo}"
        else:
            names[row] = "autograd's backward thread" if "backward" in k else row
    return names


def plot_timeline(events: list):
    """One DDP step on rank 0: a row per thread (and CUDA stream), named; each bucket's
    all-reduce drawn apart (alternate shades, numbered), the launches as black ticks."""
    import matplotlib.pyplot as plt

    t0 = min(e["start_us"] for e in events)
    rows = timeline_rows(events)
    order = list(rows)
    colors = {"step": "lightgrey", "forward": "tab:green", "backward": "tab:blue",
              "wait": "tab:brown", "optimizer": "tab:purple", "kernel": "tab:olive",
              "all-reduce launch": "black", "all-reduce, one bucket each": "tab:red"}

    def kind(e):  # the launch on the step's thread, or the work (gloo's threads, NCCL's kernels)
        if e["kind"] != "all-reduce":
            return e["kind"]
        launch = e["device"] == "cpu" and e["name"].startswith(("c10d::", "nccl:"))
        return "all-reduce launch" if launch else "all-reduce, one bucket each"

    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.5 * len(order)))
    work = sorted((e for e in events if kind(e) == "all-reduce, one bucket each"),
                  key=lambda e: e["start_us"])
    for e in events:
        k, y = kind(e), order.index(e["row"])
        start, width = (e["start_us"] - t0) / 1e3, (e["end_us"] - e["start_us"]) / 1e3
        if k == "all-reduce launch":  # a tick: the call returns at once
            ax.plot([start, start], [y - 0.45, y + 0.45], color="black", lw=1)
            continue
        color = colors[k]
        if k == "all-reduce, one bucket each":
            i, mine = work.index(e), [w for w in work if w["row"] == e["row"]]
            color = ("tab:red", "salmon")[mine.index(e) % 2]  # neighbours on a row apart
            ax.text(start + width / 2, y + 0.42, str(i + 1), ha="center", va="bottom", fontsize=6)
        h = 0.8 if k != "step" else 0.95
        ax.broken_barh([(start, width)], (y - h / 2, h), color=color, edgecolor="white", lw=0.5)
    ax.set_yticks(range(len(order)), [rows[r] for r in order])
    ax.set(xlabel="ms since the step began", ylabel="thread or CUDA stream",
           title="One DDP step on rank 0: what ran when (numbers: the all-reduces in order)")
    shown = [k for k in colors if any(kind(e) == k for e in events)]  # no GPU kernels on a CPU
    handles = [plt.Line2D([0], [0], color="black") if k == "all-reduce launch" else
               plt.Rectangle((0, 0), 1, 1, color=colors[k]) for k in shown]
    ax.legend(handles=handles, labels=shown, ncol=min(len(shown), 4), loc="upper center",
              bbox_to_anchor=(0.5, -0.3))
    return fig


def claim_overlap(claims, *, profile: dict, device: str) -> None:
    """How much of the all-reduce time lies inside backward (the profiled steps' median). On
    GPUs most of it (NCCL's kernels run beside backward's); on a CPU, some: gloo's threads and
    backward's compute share the same cores, so the share is whatever the scheduler gives."""
    overlap_fraction = profile["overlap_fraction"]  # the median of the profiled steps
    overlap_basis, fractions = profile["overlap_basis"], profile["overlap_fractions"]
    figures = {"fraction": overlap_fraction, "basis": overlap_basis, "k": len(fractions),
               "low": min(fractions), "high": max(fractions)}  # fmt: skip
    if device.startswith("cpu"):
        claims.check(
            "On a CPU {fraction:.0%} of the all-reduce time lies inside backward (median of {k} "
            "profiled steps, {low:.0%} to {high:.0%}; {basis}): DDP starts its buckets while "
            "backward runs", "fraction > 0", otherwise="None of the all-reduce time lies inside "
            "backward (median of {k} profiled steps; {basis}): every bucket waited for backward's "
            "end", **figures)  # fmt: skip
        return
    claims.check(
        "{fraction:.0%} of the all-reduce time lies inside backward (median of {k} profiled "
        "steps, {low:.0%} to {high:.0%}; {basis})", "fraction > 0.5",
        otherwise="Only {fraction:.0%} of the all-reduce time lies inside backward (median of "
        "{k} profiled steps, {low:.0%} to {high:.0%}; {basis}): most of it came after backward",
        **figures)  # fmt: skip


def claim_order(claims, *, one_r: list, dp_r: list, ddp_r: list, device: str):
    """Whether the MLP keeps the order reported for GPUs (DDP, DP, one device), decided over
    two comparisons; returns the claim. A CPU is not expected to keep it
    (DP's threads and DDP's ranks share its cores): there the claim is that it does not."""
    a, b = spread(ddp_r, dp_r), spread(dp_r, one_r)  # DDP < DP, DP < one
    if device.startswith("cpu"):
        return claims.check(
            "On a CPU the MLP does not keep the order reported for GPUs: DDP took {ddp:.2f}, DP "
            "{dp:.2f} of one process's step", "weaker <= 1",
            otherwise="This CPU kept the order reported for GPUs: DDP took {ddp:.2f}, DP {dp:.2f} "
            "of one process's step, each ahead in every round",
            ddp=med(ddp_r) / med(one_r), dp=med(dp_r) / med(one_r),
            weaker=min(a["ratio_low"], b["ratio_low"]))  # fmt: skip
    return claims.check(
        "Here the MLP keeps the reported order: DDP took {ddp:.2f}, DP {dp:.2f} of one process's "
        "step", "ddp_dp_low > 1 and dp_one_low > 1", tie_condition="ddp_dp_high >= 1 and "
        "dp_one_high >= 1", tie="Here the MLP's order is not measurable: DDP took {ddp:.2f}, DP "
        "{dp:.2f} of one process's step, inside the rounds' spread",
        otherwise="Here the MLP does not keep the reported order: DDP took {ddp:.2f}, DP {dp:.2f} "
        "of one process's step, one of the two reversed in every round",
        ddp=med(ddp_r) / med(one_r), dp=med(dp_r) / med(one_r), ddp_dp_low=a["ratio_low"],
        ddp_dp_high=a["ratio_high"], dp_one_low=b["ratio_low"], dp_one_high=b["ratio_high"])


def show_bucket_model(layers: int, width: int, batch: int, caps, profile_cap: float) -> None:
    """Section 4's model and caps, as the notebook's constants set them (the prose names them)."""
    grad_bytes = 4 * layers * (width * width + width)  # float32 weights and biases
    print(f"Section 4's model: {layers} × Linear({width}, {width}), {2 * layers} gradient "
          f"tensors, G = {grad_bytes / 2**20:.2f} MiB, batch {batch} per rank; bucket_cap_mb "
          f"swept: {', '.join(f'{c:g}' for c in caps)} MiB; the profiled step's: "
          f"{profile_cap:g} MiB")


def slug(cap: float) -> str:
    return f"{cap:g}".replace(".", "p")


def backward_ms(events: list) -> float:
    """Backward's span in the profiled DDP step (1 MiB buckets), in ms."""
    spans = [(e["start_us"], e["end_us"]) for e in events if e["kind"] == "backward"]
    return (max(e for _, e in spans) - min(s for s, _ in spans)) / 1e3 if spans else 0.0


def save(setup, claims, tasks, *, bench: dict, alpha: float, beta: float,
         speedup: dict, efficiency: dict, dp_name: str, all_threads: list, tied: dict,
         ddp_vs_dp: dict, dp_device0_ratio: float, ddp_balance: float, sweep: list, above: int,
         same: dict, apart: float, step_ms: dict, made: dict, blocking, view, best_cap: float,
         next_cap: float, cap_buckets: dict, fast: list, trace, ddp_lines: list,
         logs: list, order) -> None:  # fmt: skip
    """The results record (``fast``: the caps no measurably slower than the fastest)."""
    N, DDP_N, ALL = setup.nproc, ddp_name(setup.nproc), all_threads  # the notebook's names
    DEFAULT = "DDP default buckets"  # the notebook's name
    small, large = sweep[0], sweep[-1]
    effs = [s["eff"] for s in sweep]
    profile = bench["profile"]
    r3 = {k: round(v, 3) for k, v in {
        "ddp_over_dp_python": ddp_vs_dp["python"].figures["ratio"],
        "ddp_over_dp_matmul": ddp_vs_dp["matmul"].figures["ddp_over_dp"],
        "python_ddp_speedup": speedup["python"][DDP_N],
        "python_dp_speedup": speedup["python"][dp_name],
        "matmul_dp_speedup": speedup["matmul"][dp_name],
        **({"speedup_all_threads": speedup["matmul"][ALL[0]]} if ALL else {}),
        **{f"efficiency_{n}": e for n, e in efficiency.items()},
        "sweep_best_efficiency": max(effs), "sweep_worst_efficiency": min(effs),
        "sweep_compute_bound_efficiency": large["eff"], "sweep_comm_bound_efficiency": small["eff"],
        "prediction_mae": float(np.mean(np.abs(np.array(effs) - [s["pred"] for s in sweep]))),
        "wire_share_comm_bound": small["wire_share"], "section2_vs_sweep_apart": apart,
        "section2_vs_sweep_same_rounds": same["ratio"],
        "ddp_vs_blocking_ratio": blocking.figures["ratio"],
        "ddp_vs_flat_ratio": med(step_ms["one flat all-reduce"]) / med(step_ms[DEFAULT]),
        "ddp_vs_async_ratio": (med(step_ms["per-parameter, async in backward"])
                               / med(step_ms[DEFAULT])),
        "bucket_view_speedup": view.figures["ratio"],
        "overlap_fraction": profile["overlap_fraction"],
        "dp_device0_memory_ratio": dp_device0_ratio, "ddp_memory_balance": ddp_balance,
        "here_ddp_vs_1_process": order.figures["ddp"], "here_dp_vs_1_process": order.figures["dp"],
    }.items()}  # fmt: skip
    figures = {
        "world_size": N, "backend": bench["backend"], "threads_per_rank": bench["threads_per_rank"],
        "beta_gbps": round(beta / 1e9, 3) if beta < float("inf") else "none: flat times",
        "cpus": bench["cpus"], "load_average_before": bench["load_average"][0],
        "load_average_after": bench["load_average_after"][0], **r3,
        "sweep_best_batch": sweep[int(np.argmax(effs))]["batch"],
        "sweep_worst_batch": sweep[int(np.argmin(effs))]["batch"], "sweep_points": len(sweep),
        "prediction_points_above": above, "alpha_us": round(alpha * 1e6, 1),
        "bucket_cap_best_mb": best_cap, "bucket_cap_next_mb": next_cap,
        # section 4's model and caps, as the run had them (the tests read them here)
        **{f"bucket_{k}": bench["options"][f"bucket_{k}"] for k in ("layers", "width", "batch")},
        "bucket_caps_mb": ", ".join(f"{c:g}" for c in bench["options"]["bucket_caps"]),
        **{f"buckets_cap_{slug(cap)}": n for cap, n in cap_buckets.items() if n},
        **({"buckets_default": made[DEFAULT]} if made.get(DEFAULT) else {}),
        "overlap_basis": profile["overlap_basis"],
        "peak_memory_measured": bench["ranks"][0]["peak_what"],
        "trace_saved": trace.exists(), "ddp_lines": len(ddp_lines), "ddp_log_files": len(logs),
        "backward_ms": backward_ms(profile["events"]), "fastest_matmul": " ≈ ".join(tied["matmul"]),
        "fastest_python": " ≈ ".join(tied["python"]),
        "bucket_caps_not_slower": ", ".join(f"{c:g}" for c in fast),
    }  # fmt: skip
    save_results(STEM, figures, setup, claims=claims, tasks=tasks)


def close(setup, claims) -> None:
    closing(setup, claims, STEM)
