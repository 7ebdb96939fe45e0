"""Notebook 10: two nodes, rendezvous failures, kill + restart + resume (and the learner's
prediction of the steps replayed), elastic, Slurm, k8s."""

import socket
from pathlib import Path

import pytest
from conftest import BEHAVE, ROOT, execute_notebook, processes_with
from task_kit import load_module

import coursekit

STEM = "10_beyond_one_machine"
WRONG = Path(__file__).parent / "solutions_wrong" / "nb10"


def test_beyond_one_machine(tmp_path, slurm_cluster, monkeypatch):
    """Its one run in the suite (the browser's runs the reference answers): the wrong
    predictions of solutions_wrong/nb10 are NOT YET; the references, fed this run's figures,
    are what the run measured."""
    monkeypatch.setenv("COURSE_SLURM_DIR", str(slurm_cluster.state))  # the notebook's Slurm
    monkeypatch.setenv("COURSE_SOLUTIONS", str(WRONG))  # the kernel inherits it
    results = execute_notebook("10", tmp_path, attendee_loop=True)
    # two nodes (one rank each in SMOKE) form one job
    assert results["nodes"] == 2
    assert results["two_node_world_size"] == 2 * results["ranks_per_node"]
    assert results["two_node_ok"] is True
    # CPU tier: CPU ranks with gloo and no note (a GPU tier with too few GPUs notes why)
    assert results["two_node_device"] == "cpu" and results["two_node_backend"] == "gloo"
    assert results["two_node_note"] == ""
    # the failures end, bounded, with the right errors
    assert results["missing_node_error"].endswith("RendezvousTimeoutError")
    assert results["bad_address_error"].startswith(
        "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError")
    # a real worker got SIGKILL, the group restarted and resumed from a checkpoint
    assert results["killed_pid"] > 0
    assert results["restart_count"] >= 1
    # killed between checkpoints: it resumed from the last one before the kill and replayed
    assert results["resumed_from_step"] % results["save_every"] == 0
    assert 0 < results["resumed_from_step"] < results["kill_after_step"]
    assert results["last_step_before_restart"] >= results["kill_after_step"]
    assert results["replayed_steps"] > 0
    # the learner's prediction: the wrong answer rejected; the reference within the run's range
    # (the kill lands at KILL_AT or a step later: low from KILL_AT, high from the last step)
    assert [(t["name"], t["outcome"]) for t in results["tasks"]] == [
        ("node_rule", "not yet"), ("replayed_steps", "not yet")]
    # the node named 127.0.0.1 was numbered before the one named localhost, started first
    assert results["group_rank_rule"] == "address"
    monkeypatch.setenv("COURSE_SOLUTIONS", "1")  # the reference, as the browser's run picks it
    assert coursekit.answer(None, STEM, "node_rule") == results["group_rank_rule"]
    assert load_module(WRONG / f"{STEM}.py").node_rule != results["group_rank_rule"]
    kill_at, save_every = results["kill_after_step"], results["save_every"]
    reference = coursekit.answer(None, STEM, "replayed")(kill_at, save_every)
    tasks = coursekit.Tasks()
    assert tasks.predict("replayed", reference, results["replayed_steps"],
                         low=kill_at - results["resumed_from_step"],
                         high=results["replayed_steps"]) is True
    wrong = load_module(WRONG / f"{STEM}.py").replayed(kill_at, save_every)
    assert tasks.predict("wrong", wrong, results["replayed_steps"],
                         low=kill_at - results["resumed_from_step"],
                         high=results["replayed_steps"]) is False
    # float64 training: equal up to float64's rounding budget, a bound from eps, not a CPU
    assert results["params_close_after_restart"] is True
    assert results["max_param_diff_after_restart"] <= results["rounding_budget_after_restart"]
    assert results["rounding_budget_after_restart"] < 1e-10  # far below fp32's rounding
    # elastic: the job grew from one node to two (or says honestly that it did not)
    sizes = results["elastic_world_sizes"].split(" -> ")
    assert sizes[0] == str(results["ranks_per_node"])
    assert results["elastic_joined"] is (sizes == ["1", "2"])
    # a real Slurm job where Slurm can be installed; elsewhere the notebook says why not
    slurm = [c for c in results["claims"] if c["template"].startswith("Slurm ran the sbatch")]
    assert len(slurm) == 1, results["claims"]
    if slurm_cluster.unavailable:
        assert results["slurm_job_state"].startswith("not run: "), results["slurm_job_state"]
        # not tried is not false: skipped, with why, and no filled-in figures
        assert slurm[0]["outcome"] == "skipped" and slurm[0]["figures"] == {}
        assert slurm[0]["why_skipped"] == results["slurm_job_state"].removeprefix("not run: ")
    else:
        assert slurm[0]["outcome"] == "held", slurm[0]
        assert results["slurm_job_state"] == "COMPLETED"
        assert results["slurm_world_size"] == 2 * results["slurm_ranks_per_node"]
        assert results["slurm_device"] == results["two_node_device"]
    assert results["manifests_validated"] == 3
    assert results["manifest_typo_rejected"] is True


def test_the_node_ranks_are_sorted_not_by_arrival():
    """What section 2 teaches about GROUP_RANK, as this torch's c10d rendezvous does it."""
    import dataclasses
    import inspect

    from torch.distributed.elastic.rendezvous import dynamic_rendezvous as dr

    assert dataclasses.fields(dr._NodeDesc)[0].name == "addr"  # sorted by host, then pid
    assert dr._NodeDesc.__dataclass_params__.order
    assert "enumerate(sorted(state.participants))" in inspect.getsource(dr)


def test_the_node_rule_task_names_each_mistake(capsys):
    """Task 1 (which rule gives GROUP_RANK 0), judged on the facts of a two-node run as the
    notebook's lesson reads them: "address" is what this torch's sort of node descriptors
    gives, and each wrong rule is rejected with the fact that refutes it."""
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _NodeDesc

    from coursekit.lessons import nb10

    names = ["localhost", "127.0.0.1"]  # as the notebook names its two nodes
    lines = [(0, 0, "identity RANK=1 LOCAL_RANK=0 GROUP_RANK=1 WORLD_SIZE=2 agent=400"),
             (1, 0, "identity RANK=0 LOCAL_RANK=0 GROUP_RANK=0 WORLD_SIZE=2 agent=500")]
    facts = nb10.node_facts(lines, names)
    assert "node 0: --local-addr=localhost, agent pid 400, GROUP_RANK 1" in capsys.readouterr().out
    # torch's own order of the two descriptors is the run's
    ordered = sorted([_NodeDesc(names[0], 400, 0), _NodeDesc(names[1], 500, 0)])
    assert [d.addr for d in ordered] == ["127.0.0.1", "localhost"]
    assert facts["rule"] == "address" and facts["fits"] == ["address"]
    mistakes = {"first": ("started node 0's agent first", "does not number the agents by arrival"),
                "pid": ("lower process id (400)", "only breaks ties")}
    for guess, words in mistakes.items():
        tasks = coursekit.Tasks()
        assert tasks.predict("node_rule", guess, facts["rule"],
                             why=nb10.why_not(guess, facts)) is False
        said = capsys.readouterr().out
        assert all(w in said for w in words), said
    assert coursekit.Tasks().predict("node_rule", "address", facts["rule"]) is True
    assert "choose one of" in nb10.why_not("alphabetical", facts)


def test_the_store_facts_are_this_torchs():
    """What section 4 says about the workers' store, as this torch's c10d rendezvous does it:
    by default a TCPStore server the rank-0 agent starts beside the rendezvous's and keeps
    for every later round (the workers are its clients); with
    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 each round gets a fresh one on a free port. And the
    launcher's checkpoint is synced to disk before the rename, and its folder after."""
    import inspect

    from torch.distributed.elastic.rendezvous import api
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous as dr
    from torch.distributed.rendezvous import _create_c10d_store

    handler = inspect.getsource(dr.DynamicRendezvousHandler.next_rendezvous)
    assert "self._shared_tcp_store_server = self._create_tcp_store_server(" in handler
    assert "self._bootstrap_store_info is None or" in handler  # made once, then reused
    assert 'os.getenv("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "0") == "1"' in handler
    assert "get_free_port()" in inspect.getsource(api.RendezvousStoreInfo.build)
    assert "is_master=False" in inspect.getsource(_create_c10d_store)
    source = (ROOT / "launchers" / "multinode_train.py").read_text()
    order = [source.index(s) for s in ("os.fsync(f.fileno())", "os.replace(tmp, path)",
                                       "os.fsync(folder)")]
    assert order == sorted(order)


@pytest.mark.slow
@pytest.mark.parametrize("capability, threads", [
    ("default", 1), ("avx2", 2)])  # 3 launches each; this machine's kernels: the notebook's run
def test_the_restart_comparison_holds_with_every_cpu_kernel(capability, threads, setup,
                                                            monkeypatch, tmp_path):
    """Section 4's comparison without the kill: a run resumed from the checkpoint of step 10
    against an uninterrupted one, in float64, within the notebook's rounding budget (steps x
    ranks x eps x max(1, the largest parameter)), under torch's default and AVX2 kernels besides
    this CPU's own, and 1 or 2 threads per rank."""
    import torch

    if capability != "native":
        monkeypatch.setenv("ATEN_CPU_CAPABILITY", capability)  # the ranks inherit it
    if threads:
        monkeypatch.setenv("OMP_NUM_THREADS", str(threads))
    script, steps, name = ROOT / "launchers" / "multinode_train.py", 20, f"{capability}_{threads}"

    def run(out, n):
        args = ["--steps", n, "--save-every", 10, "--dtype", "float64", "--out", out]
        return coursekit.run_launcher(script, args, setup=setup, nproc=2, echo=False,
                                      name=f"restart_{name}_{n}").metrics

    whole = run(tmp_path / "whole", steps)
    run(tmp_path / "resumed", steps // 2)  # stops after the checkpoint of step 10
    resumed = run(tmp_path / "resumed", steps)  # starts again from it
    assert resumed["resumed_from_step"] == steps // 2 and whole["resumed_from_step"] == 0
    if capability != "native":
        assert resumed["cpu_capability"] == capability.upper()
    a = torch.load(tmp_path / "whole" / "final.pt")
    b = torch.load(tmp_path / "resumed" / "final.pt")
    diff = max((a[k] - b[k]).abs().max().item() for k in a)
    scale = max(p.abs().max().item() for p in a.values())
    budget = steps * whole["world_size"] * torch.finfo(torch.float64).eps * max(scale, 1.0)
    assert a["0.weight"].dtype == torch.float64 and diff <= budget


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_run_nodes_stops_every_node_at_the_timeout(setup, token):
    """A node waiting for a partner that never starts: bounded, and nothing survives."""
    rdzv = ["--nnodes=2", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{_free_port()}",
            f"--rdzv-id={token}"]
    with pytest.raises(coursekit.LauncherTimeout):
        coursekit.run_nodes(BEHAVE, ["--mode", "hang", "--token", token], setup=setup, nproc=1,
                            rendezvous=[rdzv, rdzv], start_when=[None, "never printed"],
                            timeout_s=6, echo=False, name="nodes_timeout")
    assert processes_with(token) == []


def test_run_nodes_stops_the_partner_of_a_failed_node(setup, token):
    """Node 1 fails at once (a bad rendezvous argument); node 0 is stopped, not left waiting."""
    port = _free_port()
    good = ["--nnodes=2", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
            f"--rdzv-id={token}"]
    bad = ["--nnodes=2", "--rdzv-backend=no-such-backend", f"--rdzv-endpoint=127.0.0.1:{port}",
           f"--rdzv-id={token}"]
    job = coursekit.run_nodes(BEHAVE, ["--mode", "hang", "--token", token], setup=setup,
                              nproc=1, rendezvous=[good, bad], timeout_s=50, check=False,
                              echo=False, name="nodes_partner")
    assert not job.ok and job.seconds < 40
    assert job.nodes[1].returncode not in (0, None)
    assert processes_with(token) == []
    with pytest.raises(ValueError, match="start_when has 1 entries for 2 nodes"):
        coursekit.run_nodes(BEHAVE, [], setup=setup, rendezvous=[good, good], start_when=[None])
