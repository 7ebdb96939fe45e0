"""A real Slurm: scripts/local_slurm.py starts a two-node cluster on this machine (installing
Debian's packages when missing), the course's sbatch script runs on it, and the cluster is
stopped again with no daemon left behind. Skipped only where Slurm cannot be installed."""

import json
import re
import subprocess
import sys

import pytest
from conftest import ROOT, local_slurm, slurm_daemons

SBATCH = ROOT / "launchers" / "slurm" / "multinode_train.sbatch"


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
    submit = subprocess.run(
        ["sbatch", "--wait", "--parsable", f"--chdir={ROOT}", f"--output={tmp_path}/job-%j.out",
         "--cpus-per-task=2",
         f"--export=ALL,PYTHON={sys.executable},OUT={out},STEPS=6,NPROC_PER_NODE=2,DEVICE=cpu",
         str(SBATCH)], env={**env, "NODE_GPUS": "7 9"}, capture_output=True, text=True,
        timeout=600)  # fmt: skip
    job_id = submit.stdout.strip().split(";")[0]
    show = subprocess.run(["scontrol", "show", "job", job_id], env=env, capture_output=True,
                          text=True).stdout
    batch_log = "".join(p.read_text() for p in tmp_path.glob("job-*.out"))
    assert submit.returncode == 0, submit.stderr + batch_log
    assert re.search(r"JobState=COMPLETED", show), show
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
    submit = subprocess.run(
        ["sbatch", "--wait", "--parsable", f"--chdir={ROOT}", f"--output={tmp_path}/job-%j.out",
         "--cpus-per-task=1",
         f"--export=ALL,PYTHON={sys.executable},OUT={tmp_path / 'out'},STEPS=2,NPROC_PER_NODE=2",
         str(SBATCH)], env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    batch_log = "".join(p.read_text() for p in tmp_path.glob("job-*.out"))
    assert submit.returncode != 0
    assert "2 ranks per node on 1 CPU(s)" in batch_log, batch_log
    assert not (tmp_path / "out" / "metrics.json").exists()
