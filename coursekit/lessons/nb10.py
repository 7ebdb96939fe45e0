"""Notebook 10, beyond one machine: its claims, plots, Slurm plumbing and results record."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import matplotlib.pyplot as plt

from ..nodes import node_devices
from ..results import save_results
from . import closing

STEM = "10_beyond_one_machine"


def plot_two_node_loss(curve, *, per_node: int, device: str, backend: str, world: int) -> None:
    """Rank 0's loss per step of the two-node job."""
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.plot([s for s, _, _ in curve], [loss for _, loss, _ in curve], marker=".")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (rank 0, log scale)")
    ax.set_title(f"two nodes x {per_node} rank(s) on {device} ({backend}): world size {world}")
    plt.show()


def claim_two_nodes(claims, *, ids: list, curve: list, world: int, group_ranks: list,
                    nodes: int, per_node: int, device: str, backend: str) -> bool:  # fmt: skip
    """Whether the two agents formed one job that trained; claimed with its figures."""
    ok = (world == nodes * per_node and group_ranks == list(range(nodes))
          and len(ids) == nodes * per_node and curve[-1][1] < curve[0][1])  # fmt: skip
    claims.check(
        "Two agents formed one job: world size {world} = {nodes} nodes x {per_node} rank(s) on "
        "{device} ({backend}), node ranks 0 to {last_node}, every rank reported once, and the "
        "loss fell from {first_loss:.3g} to {last_loss:.3g}", "ok == True", ok=ok,
        world=world, nodes=nodes, per_node=per_node, device=device,
        backend=backend, last_node=nodes - 1, first_loss=curve[0][1], last_loss=curve[-1][1],
        otherwise="the two-node job was not as expected (world size {world}, loss {first_loss:.3g} "
        "-> {last_loss:.3g}): the identity table above shows who reported")  # fmt: skip
    return ok


RULES = {"first": "the agent started first", "pid": "the agent with the lower process id",
         "address": "the agents sorted by address as text, then by process id"}


def node_facts(lines, names: list) -> dict:
    """Per node of the two-node run (`lines`: its (node, rank, text)): the address its agent
    was given (`names`), its agent's process id and its GROUP_RANK, printed; and the rules of
    RULES that this run's numbering fits (`rule`: the one torch's sort makes, if it fits)."""
    nodes = {}
    for node, _, text in lines:
        if text.startswith("identity"):
            fields = dict(f.split("=", 1) for f in text.split()[1:])
            nodes[node] = {"address": names[node], "agent": int(fields["agent"]),
                           "group_rank": int(fields["GROUP_RANK"])}
    for node, n in sorted(nodes.items()):
        print(f"node {node}: --local-addr={n['address']}, agent pid {n['agent']}, "
              f"GROUP_RANK {n['group_rank']}")
    first = min(nodes, key=lambda i: nodes[i]["group_rank"])  # the node numbered 0
    picks = {"first": min(nodes),  # run_nodes starts node 0's agent first
             "pid": min(nodes, key=lambda i: nodes[i]["agent"]),
             "address": min(nodes, key=lambda i: (nodes[i]["address"], nodes[i]["agent"]))}
    fits = [rule for rule, node in picks.items() if node == first]
    rule = "address" if "address" in fits else (fits or ["none of these"])[0]
    return {"nodes": nodes, "first": first, "picks": picks, "fits": fits, "rule": rule}


def why_not(guess, facts: dict) -> str:
    """Why the rule ``guess`` is not the one the run followed: the mistake, named by the run."""
    nodes, first, picks = facts["nodes"], facts["first"], facts["picks"]
    got = f"node {first} ({nodes[first]['address']}) got GROUP_RANK 0"
    if guess == "first":
        return (f"run_nodes started node 0's agent first, yet {got}: the rendezvous does not "
                "number the agents by arrival, it sorts them once all have joined")
    if guess == "pid":
        lower = picks["pid"]
        return (f"node {lower}'s agent had the lower process id ({nodes[lower]['agent']}), yet "
                f"{got}: the process id only breaks ties between agents of the same address")
    if guess == "address":
        return f"{got}: this run did not follow the address order"
    return f"choose one of {', '.join(repr(r) for r in RULES)}; {got}"


def claim_wrong_port(claims, *, error: str, seconds: float, join_timeout: int) -> None:
    claims.check("A node at the wrong port ended in RendezvousTimeoutError after {seconds:.0f} s "
                 "(join_timeout {join_timeout} s, plus start-up)", "timeout_error == True",
                 timeout_error=error.endswith("RendezvousTimeoutError"),
                 seconds=seconds, join_timeout=join_timeout,
                 otherwise="the agents ended otherwise after {seconds:.0f} s: the error lines "
                           "above")  # fmt: skip


def claim_bad_address(claims, *, error: str | None, seconds: float) -> None:
    claims.check("A host name that does not resolve ended in RendezvousConnectionError after "
                 "{seconds:.0f} s", "connection_error == True", seconds=seconds,
                 connection_error="RendezvousConnectionError" in (error or ""),
                 otherwise="the agent ended otherwise after {seconds:.0f} s: the lines "
                           "above")  # fmt: skip


def claim_restart(claims, *, agent_lines: list, restarts: int, resumed: int,
                  last_before: int) -> None:  # fmt: skip
    claims.check(
        "The kill came between checkpoints: the agent saw its worker die of SIGKILL, the group "
        "restarted {restarts} time(s), resumed from the checkpoint of step {resumed} and replayed "
        "the {replayed} step(s) up to step {last_before} that the killed group had done",
        "sigkill_seen == True and restarts >= 1 and replayed > 0",
        sigkill_seen=any("exitcode: -9" in t for t in agent_lines), restarts=restarts,
        resumed=resumed, last_before=int(last_before), replayed=int(last_before - resumed),
        otherwise="the restart went otherwise here (SIGKILL seen by an agent: {sigkill_seen}, "
        "restarts {restarts}, resumed from step {resumed}, last step before the kill "
        "{last_before}): the kill reached rank 1 only after the next checkpoint, so nothing "
        "was replayed, or the group did not restart")  # fmt: skip


def claim_same_parameters(claims, *, max_diff: float, budget: float, steps: int, world: int,
                          scale: float) -> bool:  # fmt: skip
    """Whether the restarted run ended within float64's rounding budget of the uninterrupted."""
    same = claims.check(
        "The restarted run ended with the uninterrupted run's parameters ({how}): the largest "
        "difference, {diff:.1e}, is within float64's rounding budget for {steps} steps over "
        "{world} ranks ({budget:.1e}: steps x ranks x eps x max(1, the largest parameter "
        "{scale:.2g}))",
        "diff <= budget", diff=max_diff, budget=budget, steps=steps, world=world, scale=scale,
        how="bit for bit" if max_diff == 0 else "up to float64 rounding",
        otherwise="the restarted run ended {diff:.1e} from the uninterrupted one, above float64's "
        "rounding budget ({budget:.1e}): more than the order of additions differed (the "
        "checkpoint, a step's data or the ranks' split); the curves above show where they "
        "part")  # fmt: skip
    return same.held


def claim_grew(claims, *, worlds: list, joined: bool, resumed: int) -> None:
    claims.check("The job grew: world sizes {worlds}, resumed at step {resumed} when the second "
                 "node joined", "joined == True", worlds=" -> ".join(map(str, worlds)),
                 joined=joined, resumed=resumed,
                 otherwise="the second node did not join a running job here (world sizes "
                 "{worlds}): the job ended before the second agent's rendezvous "
                 "completed")  # fmt: skip


def plot_elastic(curve: list, per_node: int) -> None:
    """The grown job's world size per step (rank 0's progress, every attempt), cropped to the
    join: from step 0 to as many steps again after the first step of the larger world."""
    fig, ax = plt.subplots(figsize=(7, 2.6))
    ax.step([s for s, _, _ in curve], [w for _, _, w in curve], where="post")
    joined = [s for s, _, w in curve if int(w) > per_node]
    if joined:
        ax.set_xlim(0, 2 * joined[0] + 5)
    ax.set_xlabel("step")
    ax.set_ylabel("world size")
    ax.set_yticks(sorted({int(w) for _, _, w in curve}))
    ax.set_title("--nnodes=1:2: world size per step (the second node starts after step 1)")
    plt.show()


# Slurm: a local cluster (scripts/local_slurm.py) found, a job waited for, its output read


def find_slurm() -> tuple[dict, str | None, int]:
    """The environment Slurm's commands need (the local cluster's configuration), why no Slurm
    can run a job here (None: a controller answers), and the CPUs of each node."""
    slurm_dir = Path(os.environ.get("COURSE_SLURM_DIR", "../build/slurm")).resolve()
    env = {"SLURM_CONF": os.environ.get("SLURM_CONF", str(slurm_dir / "slurm.conf"))}
    start_one = "start one with `python scripts/local_slurm.py start`"
    if not shutil.which("sinfo"):
        return env, "no Slurm installed here (sbatch and sinfo are missing)", 0
    if not Path(env["SLURM_CONF"]).is_file():  # sinfo would retry for a minute
        return env, f"no Slurm configuration at {env['SLURM_CONF']} ({start_one})", 0
    try:  # %c: the CPUs of each node
        answer = subprocess.run(["sinfo", "-h", "-o", "%c"], env={**os.environ, **env},
                                capture_output=True, text=True, timeout=20)  # fmt: skip
        answered = answer.returncode == 0 and answer.stdout.split()[0].isdigit()
    except subprocess.TimeoutExpired:
        answered = False
    if not answered:
        return env, f"no Slurm controller answers here ({start_one})", 0
    return env, None, int(answer.stdout.split()[0])


def slurm_ranks(setup, nodes: int, per_node: int, cpus: int) -> tuple[int, str, str]:
    """Ranks per node, their device and NODE_GPUS, printed: one rank per CPU at most
    (--cpus-per-task = ranks per node here, 1 thread each), and, as in section 2, pretend
    nodes on one host get GPUs of their own, or CPU ranks."""
    per_node = min(per_node, cpus)
    device, node_env, note = node_devices(setup, nodes, per_node)
    node_gpus = " ".join(e.get("CUDA_VISIBLE_DEVICES", "") for e in node_env)
    print(f"{nodes} nodes x {per_node} rank(s) on {device}"
          + (f" (NODE_GPUS={node_gpus!r})" if node_gpus.strip() else "")
          + (f"; note: {note}" if note else ""))  # fmt: skip
    return per_node, device, node_gpus


def fresh_out(setup) -> Path:
    """The job's output folder, emptied: setup.runs_dir/10_slurm/out."""
    out = setup.runs_dir.resolve() / "10_slurm" / "out"
    shutil.rmtree(out.parent, ignore_errors=True)
    out.mkdir(parents=True)
    return out


def wait_for_job(job_id: str, env: dict, timeout_s: float) -> str:
    """Slurm's state of the job once it ended (`scontrol show job` every 0.5 s), cancelled
    after ``timeout_s``."""
    env = {**os.environ, **env}
    deadline, state = time.monotonic() + timeout_s, "PENDING"
    while state in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
        if time.monotonic() > deadline:  # the job itself lives on in Slurm: cancel it
            subprocess.run(["scancel", job_id], env=env, timeout=20)
            break
        time.sleep(0.5)  # `sbatch --wait` would ask after 2, 10, 42, 74 s (sbatch.c, _job_wait)
        show = subprocess.run(["scontrol", "show", "job", job_id], env=env, capture_output=True,
                              text=True, timeout=20).stdout  # fmt: skip
        state = re.search(r"JobState=(\w+)", show).group(1) if "JobState=" in show else "?"
    return state


def job_output(out: Path) -> int:
    """Prints the first line of each of the job's output files; returns its world size."""
    for f in sorted(out.glob("*.out")):  # each file's first line; all: open the file
        print(f"{f.name}: {(f.read_text().splitlines() or [''])[0]}")
    print(f"(the whole output: {out}/*.out; each rank's log: {out}/logs/)")
    if (out / "metrics.json").exists():
        return json.loads((out / "metrics.json").read_text())["world_size"]
    return 0


def claim_slurm(claims, *, why_not: str | None, state: str, world: int, nodes: int,
                per_node: int, device: str) -> None:  # fmt: skip
    slurm_claim = ("Slurm ran the sbatch script on {nodes} nodes x {per_node} rank(s): {state}, "
                   "world size {world}, on {device}")  # fmt: skip
    if why_not is not None:  # nothing was submitted: not false, not tried
        claims.skip(slurm_claim, why=why_not, nodes=nodes, per_node=per_node,
                    expect="Slurm would run the sbatch script on {nodes} nodes x {per_node} "
                           "rank(s) and report its state and world size")  # fmt: skip
    else:
        claims.check(slurm_claim, "completed == True and world == expected",
                     state=state, completed=state == "COMPLETED", world=world,
                     expected=nodes * per_node, nodes=nodes, per_node=per_node,
                     device=device, otherwise="the job did not complete on Slurm here "
                     "({state}): the sbatch script above is what a cluster would run")  # fmt: skip


def claim_manifests(claims, *, manifests: int, typo_rejected: bool) -> None:
    claims.check("All {manifests} documents of the manifests are valid, and the misspelled "
                 "field was rejected", "manifests == 3 and typo_rejected == True",
                 manifests=manifests, typo_rejected=typo_rejected,
                 otherwise="{manifests} documents validated, misspelling rejected: "
                 "{typo_rejected}; the errors above say which field")  # fmt: skip


def save(setup, claims, tasks, *, nodes, per_node, two_nodes, two_node_ok, lonely, lonely_error,
         typo, bad_address_error, kills, restart_count, after, kill_at, save_every, last_before,
         resumed_at, params_close, max_diff, budget, worlds, elastic_joined, slurm_state,
         slurm_world, slurm_per_node, slurm_device, validated, typo_rejected,
         node_rule) -> None:  # fmt: skip
    save_results(STEM, {
        "nodes": nodes, "ranks_per_node": per_node, "group_rank_rule": node_rule,
        "two_node_world_size": two_nodes.metrics["world_size"],
        "two_node_ok": two_node_ok, "two_node_seconds": two_nodes.seconds,
        "two_node_device": two_nodes.device,  # what the ranks ran on
        "two_node_backend": two_nodes.metrics["backend"],
        "two_node_note": two_nodes.note, "missing_node_error": lonely_error,
        "missing_node_seconds": lonely.seconds, "bad_address_error": bad_address_error,
        "bad_address_seconds": typo.seconds, "killed_pid": kills[0] if kills else 0,
        "restart_count": restart_count, "resumed_from_step": after["resumed_from_step"],
        "kill_after_step": kill_at, "save_every": save_every,
        "last_step_before_restart": int(last_before),
        "replayed_steps": int(last_before - resumed_at),
        "params_close_after_restart": params_close, "max_param_diff_after_restart": max_diff,
        "rounding_budget_after_restart": budget,
        "elastic_world_sizes": " -> ".join(map(str, worlds)),
        "elastic_joined": elastic_joined, "slurm_job_state": slurm_state,
        "slurm_world_size": slurm_world,
        "slurm_ranks_per_node": slurm_per_node, "slurm_device": slurm_device,
        "manifests_validated": len(validated), "manifest_typo_rejected": typo_rejected,
    }, setup, claims=claims, tasks=tasks)  # fmt: skip


def close(setup, claims) -> None:
    closing(setup, claims, STEM)
