"""A real Slurm: scripts/local_slurm.py starts a two-node cluster on this machine (installing
Debian's packages when missing), the course's sbatch script runs on it, and the cluster is
stopped again with no daemon left behind. Skipped only where Slurm cannot be installed."""

import json
import re
import subprocess
import sys
import time

import pytest
from conftest import ROOT, local_slurm, slurm_daemons

SBATCH = ROOT / "launchers" / "slurm" / "multinode_train.sbatch"


ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
         "DEADLINE", "PREEMPTED")  # fmt: skip


def submit_and_wait(args: list[str], env: dict, timeout_s: float = 600) -> tuple[str, str]:
    """sbatch, then `scontrol show job` every 0.5 s until the job ended: (state, what it
    showed). Not `sbatch --wait`, which asks after 2, 10, 42, 74 s (Slurm's sbatch.c,
    _job_wait, with the cluster's MinJobAge=3600): a 12 s job took 42 s."""
    submit = subprocess.run(["sbatch", "--parsable", *args], env=env, capture_output=True,
                            text=True, timeout=60)  # fmt: skip
    assert submit.returncode == 0, submit.stderr
    job_id = submit.stdout.strip().split(";")[0]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        show = subprocess.run(["scontrol", "show", "job", job_id], env=env, capture_output=True,
                              text=True, timeout=30).stdout  # fmt: skip
        state = re.search(r"JobState=(\w+)", show)
        if state and state.group(1) in ENDED:
            return state.group(1), show
        time.sleep(0.5)
    subprocess.run(["scancel", job_id], env=env, timeout=30)
    raise AssertionError(f"job {job_id} still not ended after {timeout_s} s:\n{show}")


@pytest.fixture
def cluster(slurm_cluster):
    if slurm_cluster.unavailable:
        print(f"\nSKIPPED the Slurm tests: {slurm_cluster.unavailable}")
        pytest.skip(f"Slurm cannot be installed here: {slurm_cluster.unavailable}")
    return slurm_cluster.state, slurm_cluster.env


def test_start_is_idempotent(cluster):
    state, _ = cluster
    pids = json.loads((state / "pids.json").read_text())
    again = local_slurm("start", state)
    assert again.returncode == 0 and "already running" in again.stdout
    assert json.loads((state / "pids.json").read_text()) == pids
    assert set(pids) == {"munged", "slurmctld", "slurmd-node1", "slurmd-node2"}
    assert len(slurm_daemons(state)) == 4


def test_sbatch_two_nodes_two_ranks_each(cluster, tmp_path):
    state, env = cluster
    out = tmp_path / "out"
    # 2 ranks per node: 2 CPUs for the node's task; NODE_GPUS (pretend nodes on one host)
    # hands each node its own entry as CUDA_VISIBLE_DEVICES (ignored by CPU ranks)
    state, show = submit_and_wait(
        [f"--chdir={ROOT}", f"--output={tmp_path}/job-%j.out", "--cpus-per-task=2",
         f"--export=ALL,PYTHON={sys.executable},OUT={out},STEPS=6,NPROC_PER_NODE=2,DEVICE=cpu",
         str(SBATCH)], env={**env, "NODE_GPUS": "7 9"})  # fmt: skip
    batch_log = "".join(p.read_text() for p in tmp_path.glob("job-*.out"))
    assert state == "COMPLETED", show + batch_log
    assert re.search(r"NumNodes=2\b", show), show
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["world_size"] == 4
    assert sorted(int(r["RANK"]) for r in metrics["ranks"]) == [0, 1, 2, 3]
    assert sorted(int(r["GROUP_RANK"]) for r in metrics["ranks"]) == [0, 0, 1, 1]
    assert sorted(int(r["LOCAL_RANK"]) for r in metrics["ranks"]) == [0, 0, 1, 1]
    losses = metrics["losses_this_attempt"]
    assert len(losses) == 6 and losses[-1] < losses[0]
    # one output file per node's agent, one log per rank, the two logical nodes used
    agents = sorted(p.name for p in out.glob("agent-node*.out"))
    assert agents == ["agent-node0.out", "agent-node1.out"]
    tasks = " ".join(p.read_text() for p in out.glob("agent-node*.out"))
    assert "node=node1" in tasks and "node=node2" in tasks
    assert "CUDA_VISIBLE_DEVICES=7" in (out / "agent-node0.out").read_text()
    assert "CUDA_VISIBLE_DEVICES=9" in (out / "agent-node1.out").read_text()
    assert len(list(out.glob("logs/node*/*/attempt_0/*/stdout.log"))) == 4
    assert "rendezvous at node1 = 127.0.0.1:" in batch_log


def test_fewer_cpus_than_ranks_is_refused(cluster, tmp_path):
    """--cpus-per-task is the CPUs of all the node's ranks: fewer CPUs than ranks is an error
    at once, not a job of ranks crowded onto one core."""
    state, env = cluster
    state, show = submit_and_wait(
        [f"--chdir={ROOT}", f"--output={tmp_path}/job-%j.out", "--cpus-per-task=1",
         f"--export=ALL,PYTHON={sys.executable},OUT={tmp_path / 'out'},STEPS=2,NPROC_PER_NODE=2",
         str(SBATCH)], env=env, timeout_s=300)  # fmt: skip
    batch_log = "".join(p.read_text() for p in tmp_path.glob("job-*.out"))
    assert state == "FAILED", show
    assert "2 ranks per node on 1 CPU(s)" in batch_log, batch_log
    assert not (tmp_path / "out" / "metrics.json").exists()
