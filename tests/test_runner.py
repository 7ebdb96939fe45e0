"""The launcher runner: live lines, root-cause errors, timeouts and interrupts kill everything."""

import collections
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from conftest import BEHAVE, processes_with
from jupyter_client import KernelManager

import coursekit
from coursekit import echo, replay, runner
from coursekit import result as run_result


def wait_for(predicate, timeout_s=30.0, what="condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.2)
    raise AssertionError(f"gave up waiting for {what}")


def start_kernel(tmp_path):
    km = KernelManager(kernel_name="python3", transport="ipc", ip=str(tmp_path / "kernel"))
    km.start_kernel(cwd=str(tmp_path))
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=60)
    return km, kc


def hang_in_kernel(kc, token, tmp_path):
    """Start a never-ending launcher from the kernel, as a notebook cell would."""
    return kc.execute(textwrap.dedent(f"""
        import coursekit
        setup = coursekit.configure(DEVICE="cpu", RESULTS_DIR={str(tmp_path / "results")!r})
        args = ["--mode", "hang", "--token", {token!r}]
        coursekit.run_launcher({str(BEHAVE)!r}, args, setup=setup)
    """))  # fmt: skip


def test_lines_stream_live(setup, capsys):
    arrivals = {}
    run = coursekit.run_launcher(
        BEHAVE, ["--mode", "slow"], setup=setup, echo="all",
        on_line=lambda rank, text: arrivals.setdefault(text, time.monotonic()),
    )  # fmt: skip
    assert run.rank_lines(0) == ["first line", "second line"]
    # the first line reached us while rank 0 was still sleeping, not at the end of the run
    assert arrivals["second line"] - arrivals["first line"] > 2.0
    printed = capsys.readouterr().out.splitlines()
    assert "[rank0] first line" in printed  # echo="all": every line, labelled by rank
    assert printed[-1].startswith("behave: 2 ranks, ")
    assert ".log() of the returned run" in printed[-1]


def test_lines_are_whole_and_marked_by_rank(setup):
    run = coursekit.run_launcher(BEHAVE, ["--mode", "chatty"], setup=setup, nproc=3, echo=False)
    for rank in range(3):
        expected = [f"line {i:03d} from rank {rank}: " + f"r{rank}" * 200 for i in range(200)]
        assert run.rank_lines(rank) == expected
    assert run.log(2).splitlines() == expected
    assert (run.run_dir / "output.log").read_text() == run.log() + "\n"


def test_failure_shows_the_failing_ranks_exception_and_key_line(setup):
    with pytest.raises(coursekit.LauncherFailed) as caught:
        coursekit.run_launcher(BEHAVE, ["--mode", "fail"], setup=setup, echo=False)
    message = str(caught.value)
    assert message == caught.value.result.failure()
    lines = message.splitlines()
    assert len(lines) <= 5, message
    assert "rank 1 failed first (of 2), exit code 1: a Python exception" in lines[0]
    assert "  ValueError: planted failure on rank 1 (code 7f3a)" in lines
    assert any(t.startswith("  at ") and "behave.py:" in t and 'raise ValueError("planted' in t
               for t in lines), message  # fmt: skip
    assert lines[-1].startswith(f"whole log: {caught.value.result.log_dir}")
    assert caught.value.result.returncode != 0


def test_failure_can_be_returned_instead_of_raised(setup):
    run = coursekit.run_launcher(BEHAVE, ["--mode", "fail"], setup=setup, echo=False, check=False)
    assert not run.ok and "planted failure" in run.root_cause()
    assert "ValueError: planted failure on rank 1" in run.failure()


def test_a_gloo_connect_failure_is_launched_once_more_and_said(setup, capsys):
    run = coursekit.run_launcher(BEHAVE, ["--mode", "gloo-connect-once"], setup=setup,
                                 nproc=3, echo=False)  # fmt: skip
    assert run.ok and (run.out_dir / "attempts").read_text() == "attempt\n" * 2
    said = capsys.readouterr().out
    assert "WARNING: behave: rank 1 could not connect gloo's process group" in said
    assert "launching it once more" in said
    assert "Gloo connectFullMesh" not in run.log()  # the run returned is the second attempt's


def test_a_second_gloo_connect_failure_is_reported(setup):
    with pytest.raises(coursekit.LauncherFailed) as caught:
        coursekit.run_launcher(BEHAVE, ["--mode", "gloo-connect-always"], setup=setup,
                               nproc=3, echo=False)  # fmt: skip
    assert "Gloo connectFullMesh failed with [planted]" in str(caught.value)
    assert (caught.value.result.out_dir / "attempts").read_text() == "attempt\n" * 2


WAYS = """
import argparse, os, signal, time
import torch.distributed as dist
p = argparse.ArgumentParser()
p.add_argument("--mode")
p.add_argument("--device")
p.add_argument("--out")
args = p.parse_args()
dist.init_process_group("gloo")
print(f"rank {dist.get_rank()} ready", flush=True)
def deep():
    raise ValueError("a long message " + "m" * 600 + " END")
if dist.get_rank() == 1:
    time.sleep(0.5)
    if args.mode == "exit13":
        os._exit(13)
    if args.mode == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    deep()
time.sleep(60)  # the other rank is busy when rank 1 goes
"""


@pytest.mark.parametrize("mode, expected", [
    ("exit13", "exit code 13: no Python traceback: the process exited through os._exit(13)"),
    ("sigkill", "exit code -9 (signal 9): killed by SIGKILL"),
    ("long", "exit code 1: a Python exception"),
])  # fmt: skip
def test_a_failure_is_never_cut_and_never_empty(setup, tmp_path, mode, expected):
    """The three ways a rank leaves that notebooks meet: os._exit (no traceback), SIGKILL
    (no traceback, a signal) and an exception whose message is longer than a screen line."""
    script = tmp_path / "ways.py"
    script.write_text(WAYS)
    run = coursekit.run_launcher(script, ["--mode", mode], setup=setup, echo=False, check=False)
    message = run.failure()
    lines = message.splitlines()
    assert "rank 1 failed first (of 2)" in lines[0] and expected in lines[0], message
    assert len(lines) <= 5, message
    if mode == "long":
        assert "  ValueError: a long message " + "m" * 600 + " END" in lines  # whole
        assert any(t.startswith("  at ") and "ways.py:12 in deep: raise ValueError" in t
                   for t in lines), message  # fmt: skip
    else:
        assert lines[1] == "  its last line: 'rank 1 ready'", message
        assert run.root_cause() == message  # no traceback to show: how it left, instead
    assert lines[-1] == (f"whole log: {run.log_dir} "
                         "(.log(1) of the returned run prints rank 1's lines)")


def test_timeout_kills_every_process(setup, token):
    counts = []
    done = threading.Event()

    def sample():  # how many of the run's processes are alive, while it runs
        while not done.is_set():
            counts.append(len(processes_with(token)))
            time.sleep(0.2)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        with pytest.raises(coursekit.LauncherTimeout) as caught:
            coursekit.run_launcher(
                # 15 s: twice what the ranks take to start here, so that they print first
                BEHAVE, ["--mode", "hang", "--token", token], setup=setup, timeout_s=15, echo=False
            )
    finally:
        done.set()
        sampler.join()
    message = str(caught.value)
    assert "ran past its limit of 15 s" in message and "Where each rank stood:" in message
    lines = message.splitlines()  # each rank's place, from the stacks it printed on SIGUSR1
    assert "rank 0: " in lines[1] and "behave.py" in lines[1] and "HANG-COLLECTIVE" in lines[1]
    assert "rank 1: " in lines[2] and "HANG-SLEEP" in lines[2], message
    assert lines[-1].startswith("whole log: ") and len(lines) <= 5
    assert max(counts) == 4, "expected the guard, torchrun and 2 workers while it ran"
    assert processes_with(token) == []


def test_bad_launcher_path_fails_before_starting(setup):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        coursekit.run_launcher("no_such_launcher.py", setup=setup)


def test_kernel_interrupt_kills_every_process(token, tmp_path):
    """The real thing: a Jupyter kernel runs the launcher and the user presses interrupt."""
    km, kc = start_kernel(tmp_path)
    try:
        msg_id = hang_in_kernel(kc, token, tmp_path)
        wait_for(lambda: len(processes_with(token)) == 4, what="guard, torchrun, 2 workers")
        km.interrupt_kernel()
        reply = kc.get_shell_msg(timeout=30)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = kc.get_shell_msg(timeout=30)
        assert reply["content"]["status"] == "error"
        assert reply["content"]["ename"] == "KeyboardInterrupt"
        assert processes_with(token) == []
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_kernel_death_kills_every_process(token, tmp_path):
    """A kernel killed outright (a crash, or a forced restart) takes its runs with it."""
    km, kc = start_kernel(tmp_path)
    try:
        hang_in_kernel(kc, token, tmp_path)
        wait_for(lambda: len(processes_with(token)) == 4, what="guard, torchrun, 2 workers")
        km.signal_kernel(signal.SIGKILL)
        wait_for(lambda: processes_with(token) == [], timeout_s=20, what="no process left")
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


ORPHAN_MAKER = """
import subprocess, sys
# a child in its own session, left behind as torchrun leaves its workers when cut short
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", sys.argv[1]],
                 start_new_session=True)
sys.exit(int(sys.argv[2]))
"""


@pytest.mark.parametrize("exit_code", [0, 3])
def test_the_guard_leaves_no_orphan_and_keeps_the_exit_code(token, exit_code):
    guard = subprocess.run([sys.executable, "-m", "coursekit.guard", sys.executable, "-c",
                            ORPHAN_MAKER, token, str(exit_code)], timeout=30)  # fmt: skip
    assert guard.returncode == exit_code
    assert processes_with(token) == []


def test_a_stopped_guard_stops_everything_below_it(token):
    guard = subprocess.Popen([sys.executable, "-m", "coursekit.guard", sys.executable, "-c",
                              "import time, sys; time.sleep(600)", token])  # fmt: skip
    wait_for(lambda: len(processes_with(token)) == 2, what="the guard and its command")
    guard.terminate()  # as the runner does, or the kernel's death through PR_SET_PDEATHSIG
    assert guard.wait(timeout=10) == 128 + signal.SIGTERM
    assert processes_with(token) == []


def test_two_runs_at_once(setup):
    results = {}

    def run(name):
        results[name] = coursekit.run_launcher(
            BEHAVE.parent.parent.parent / "launchers" / "check_allreduce.py",
            setup=setup, name=name, echo=False,
        )  # fmt: skip

    threads = [threading.Thread(target=run, args=(f"concurrent{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["concurrent0", "concurrent1"]
    for result in results.values():
        assert result.ok and result.metrics["world_size"] == 2
    assert results["concurrent0"].out_dir != results["concurrent1"].out_dir


@pytest.mark.parametrize(
    "kwargs, parameter",
    [
        ({"NPROC": 0}, "NPROC"),
        ({"NPROC": -2}, "NPROC"),
        ({"NPROC": "2"}, "NPROC"),
        ({"NPROC": True}, "NPROC"),
        ({"NPROC": 1.5}, "NPROC"),
        ({"DEVICE": "gpu"}, "DEVICE"),
        ({"TIMEOUT_S": 0}, "TIMEOUT_S"),
        ({"TIMEOUT_S": "ten"}, "TIMEOUT_S"),
        ({"SMOKE": "yes"}, "SMOKE"),
    ],
)
def test_bad_parameters_name_the_parameter(kwargs, parameter):
    with pytest.raises(coursekit.ParameterError, match=rf"^{parameter}=") as caught:
        coursekit.configure(**kwargs, quiet=True)
    assert "use" in str(caught.value)  # and it says what to do instead


def test_a_lesson_between_ranks_gets_two_ranks_and_says_why():
    """Notebooks 02, 06, 08 and 11 ask for min_nproc=2: one rank (NPROC=1 here, one GPU elsewhere)
    becomes two ranks on the CPU tier, and the printed setup explains it."""
    plain = coursekit.configure(DEVICE="cpu", NPROC=1, quiet=True)
    assert (plain.nproc, plain.note) == (1, "")
    lesson = coursekit.configure(DEVICE="cpu", NPROC=1, min_nproc=2, quiet=True)
    assert (lesson.device, lesson.tier, lesson.backend, lesson.nproc) == ("cpu", "cpu", "gloo", 2)
    assert "note     1 rank(s) per run would show nothing here" in lesson.describe()
    assert coursekit.configure(DEVICE="cpu", NPROC=3, min_nproc=2, quiet=True).nproc == 3


def test_cuda_without_a_gpu_fails_fast():
    """With no GPU visible (CUDA_VISIBLE_DEVICES empty), DEVICE='cuda' is refused at once."""
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", "import coursekit; coursekit.configure(DEVICE='cuda')"],
        capture_output=True, text=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )  # fmt: skip
    assert time.monotonic() - start < 10
    assert proc.returncode != 0
    assert "ParameterError: DEVICE='cuda' cannot be used: no CUDA GPU is visible" in proc.stderr


def _finished_run(tmp_path, rank_lines, metrics=True):
    """A RunResult as torchrun reports a rank that failed (the summary's lines included)."""
    run = coursekit.RunResult(name="x", cmd=[], nproc=2, run_dir=tmp_path, returncode=1)
    run.lines = [(1, t) for t in rank_lines] + [
        (None, "Root Cause (first observed failure):"), (None, "[0]:"),
        (None, "  rank      : 1 (local_rank: 1)"), (None, "  exitcode  : -6 (pid: 42)"),
    ]  # fmt: skip
    if metrics:
        (tmp_path / "out").mkdir()
        (tmp_path / "out" / "metrics.json").write_text("{}")
    return run


def test_an_abort_at_exit_after_finished_work_is_not_a_failure(tmp_path):
    run = _finished_run(tmp_path, ["step 4 loss 0.1", run_result.TEARDOWN_ABORT])
    assert run.ok and run.aborted_at_exit_only and run.failed_rank() == 1


@pytest.mark.parametrize("rank_lines, metrics", [
    (["step 4 loss 0.1", run_result.TEARDOWN_ABORT], False),  # the work did not finish
    (["Traceback (most recent call last):", "ValueError: x", run_result.TEARDOWN_ABORT], True),
    (["step 4 loss 0.1", "Segmentation fault"], True),
])  # fmt: skip
def test_other_failures_stay_failures(tmp_path, rank_lines, metrics):
    run = _finished_run(tmp_path, rank_lines, metrics)
    assert not run.ok and not run.aborted_at_exit_only


@pytest.mark.parametrize("gpus, visible, expected", [
    (0, None, ("cpu", [{}, {}])),
    (1, None, ("cpu", [{}, {}])),  # 2 nodes x 1 rank on 1 GPU: NCCL would refuse
    (2, None, ("cuda", [{"CUDA_VISIBLE_DEVICES": "0"}, {"CUDA_VISIBLE_DEVICES": "1"}])),
    (4, "3,5,6,7", ("cuda", [{"CUDA_VISIBLE_DEVICES": "3"}, {"CUDA_VISIBLE_DEVICES": "5"}])),
])  # fmt: skip
def test_pretend_nodes_on_one_host_get_gpus_of_their_own(gpus, visible, expected, tmp_path,
                                                        monkeypatch):
    """A GPU tier's two pretend nodes must not both take cuda:0 ("Duplicate GPU detected")."""
    from dataclasses import replace

    from coursekit.nodes import node_devices

    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    setup = coursekit.configure(DEVICE="cpu", RESULTS_DIR=tmp_path, quiet=True)
    if gpus:  # what configure would have found on a machine with these GPUs
        setup = replace(setup, device="cuda", tier="multi-gpu", nproc=1,
                        gpu_names=[f"GPU {i}" for i in range(gpus)])
    device, envs, note = node_devices(setup, n_nodes=2, nproc=1)
    assert (device, envs) == expected
    assert ("CPU ranks with gloo" in note) is (gpus == 1)


def test_run_nodes_prints_briefly_too(setup, tmp_path, capsys, monkeypatch, token):
    """Two pretend nodes: when each agent starts, rank 0's lines, one closing line."""
    import socket

    monkeypatch.setenv("COURSEKIT_HEADLESS", "1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rdzv = ["--nnodes=2", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
            f"--rdzv-id={token}"]  # fmt: skip
    job = coursekit.run_nodes(BEHAVE, ["--mode", "chatty"], setup=setup, nproc=1,
                              rendezvous=[rdzv, rdzv], name="nodes_brief")  # fmt: skip
    printed = capsys.readouterr().out.splitlines()
    assert job.ok and len(job.rank_lines(1)) == 200
    assert sorted(printed[:2]) == ["[node0] starting its agent", "[node1] starting its agent"]
    assert len(printed) == 2 + 200 + 1 and not any("from rank 1" in t for t in printed)
    assert printed[-1].startswith("nodes_brief: 2 nodes, 2 ranks, ")
    assert (job.run_dir / "output.log").read_text() == job.log() + "\n"
    assert job.failure() == ""


def test_a_torchrun_that_fails_by_itself_says_why(tmp_path):
    """No rank ever ran (a bad rendezvous argument): torchrun's own exception is the cause."""
    run = coursekit.RunResult(name="x", cmd=[], nproc=2, run_dir=tmp_path, returncode=1)
    run.lines = [(None, t) for t in [
        "Traceback (most recent call last):",
        '  File "/venv/site-packages/torch/distributed/run.py", line 1032, in <module>',
        "    main()",
        '  File "/venv/site-packages/torch/distributed/elastic/rendezvous/api.py", line 372, in '
        "create_handler",
        "    raise ValueError(",
        "ValueError: The rendezvous backend 'no-such-backend' is not registered.",
    ]]  # fmt: skip
    lines = run.failure().splitlines()
    assert lines[0] == ("x failed: torchrun failed before any rank reported a failure, exit "
                        "code 1: a Python exception")  # fmt: skip
    assert lines[1] == "  ValueError: The rendezvous backend 'no-such-backend' is not registered."
    assert lines[2].endswith("api.py:372 in create_handler: raise ValueError(")


def test_a_traceback_keeps_out_the_stdout_lines_tee_mixes_in():
    """torchrun's --tee follows a rank's stdout and stderr apart: a print can land inside its
    traceback. The traceback's own lines came through torch's excepthook ([rankN]: twice)."""
    raw = ["[rank1]:[rank1]: Traceback (most recent call last):", "[rank1]:printed meanwhile",
           '[rank1]:[rank1]:   File "/x/launch.py", line 3, in <module>',
           "[rank1]:[rank1]:     f()", "[rank1]:another print",
           "[rank1]:[rank1]: RuntimeError: first line of the message",
           "[rank1]:[rank1]: second line of the message", "[rank1]:after it"]  # fmt: skip
    parsed = [echo._parse_hooked(t) for t in raw]
    tb = run_result.parse_traceback([t for _, t, _ in parsed], [h for _, _, h in parsed])
    assert tb.exception == ["RuntimeError: first line of the message",
                            "second line of the message"]  # fmt: skip
    assert tb.key_frame("/x/launch.py") == ("/x/launch.py", 3, "<module>", "f()")


@pytest.mark.parametrize("code, expected", [
    (13, "exit code 13: no Python traceback: the process exited through os._exit(13) or "
         "sys.exit(13), or died in native code"),
    (-6, "exit code -6 (signal 6): aborted (SIGABRT) in native code"),
    (137, "exit code 137 (= 128 + 9): killed by SIGKILL"),
    (-11, "exit code -11 (signal 11): crashed with a segmentation fault"),
])  # fmt: skip
def test_exit_codes_are_explained(code, expected):
    assert run_result.exit_meaning(code, traceback_seen=False).startswith(expected)


def test_run_command_of_another_program_prints_its_own_lines(setup, capsys):
    """Not torchrun (mp.spawn, sbatch): its lines have no rank; brief shows them as rank 0's."""
    code = "import sys; [print(f'step {i}/3') for i in (1, 2, 3)]; print('done'); sys.exit(3)"
    run = runner.run_command([sys.executable, "-c", code], setup=setup, name="plain",
                             check=False)  # fmt: skip
    printed = capsys.readouterr().out.splitlines()
    assert printed[1:] == ["step 1/3", "step 2/3", "step 3/3", "done", (
        f"plain: {run.seconds:.1f} s, FAILED, 4 lines in {run.run_dir / 'output.log'} "
        "(.log() of the returned run prints them)")]  # fmt: skip
    lines = run.failure().splitlines()
    assert lines[0] == ("plain failed: the command failed, exit code 3: no Python traceback: "
                        "the process exited through os._exit(3) or sys.exit(3), or died in "
                        "native code")  # fmt: skip
    assert lines[1:] == ["  its last line: 'done'",
                         f"whole log: {run.run_dir / 'output.log'} "
                         "(.log() of the returned run prints them)"]


@pytest.mark.parametrize("threads, policy, expected", [
    (os.cpu_count(), None, "PASSIVE"),  # 2 ranks x all the cores: more threads than cores
    (os.cpu_count(), "ACTIVE", "ACTIVE"),  # the environment's own choice stays
    # one thread per rank: OpenMP's default, unless 2 ranks outnumber the cores already
    (1, None, "unset" if os.cpu_count() >= 2 else "PASSIVE"),
])  # fmt: skip
def test_ranks_whose_threads_outnumber_the_cores_wait_passively(threads, policy, expected,
                                                                 setup, tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", str(threads))
    if policy:
        monkeypatch.setenv("OMP_WAIT_POLICY", policy)
    else:
        monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    script = tmp_path / "policy.py"  # no torch: the ranks start in a blink
    script.write_text("import os\nprint('policy', os.environ.get('OMP_WAIT_POLICY', 'unset'))\n")
    run = coursekit.run_launcher(script, setup=setup, nproc=2, echo=False)
    assert sorted(text for _, text in run.lines if text.startswith("policy")) == [
        f"policy {expected}"] * 2


WHERE = """import argparse, json, os, pathlib
parser = argparse.ArgumentParser()
parser.add_argument("--device")
parser.add_argument("--out")
out = pathlib.Path(parser.parse_args().out)
out.mkdir(parents=True)
(out / "where.json").write_text(json.dumps({"out": str(out), "pid": os.getpid()}))
print(f"pid {os.getpid()} wrote {out}")
"""


def test_a_kernel_replays_the_launches_another_made_and_never_its_own(setup, tmp_path,
                                                                      monkeypatch, capsys):
    """The suite's kernels make each launch once (coursekit/replay.py): the Nth identical launch
    of a later process replays the Nth of an earlier one (its lines and files, this run's
    paths in them); its own repeats, a changed launcher, other arguments run for real."""
    script = tmp_path / "code" / "where.py"
    script.parent.mkdir()
    script.write_text(WHERE)
    monkeypatch.setenv(replay.REPLAY_ENV, str(tmp_path / "replays"))
    (tmp_path / "replays").mkdir()

    def pid(run):
        where = json.loads((run.out_dir / "where.json").read_text())
        assert where["out"] == str(run.out_dir)  # the recorded path renamed to this run's
        assert run.rank_lines(0) == [f"pid {where['pid']} wrote {run.out_dir}"]
        return where["pid"]

    def launch(setup, *args):
        return coursekit.run_launcher(script, args, setup=setup, nproc=1, echo=False)

    first, second = pid(launch(setup)), pid(launch(setup))
    assert first != second, "a process replayed its own launch"
    monkeypatch.setattr(replay, "ORIGIN", "another kernel")
    monkeypatch.setattr(replay, "_made", collections.Counter())
    later = coursekit.configure(DEVICE="cpu", RESULTS_DIR=tmp_path / "later" / "results",
                                TIMEOUT_S=180, quiet=True)  # fmt: skip
    capsys.readouterr()
    with pytest.raises(run_result.LauncherTimeout):  # a limit the record did not end within
        coursekit.run_launcher(script, setup=later, nproc=1, echo=False, timeout_s=0.5)
    monkeypatch.setattr(replay, "_made", collections.Counter())
    replayed = launch(later)
    assert pid(replayed) == first and replayed.ok
    said = capsys.readouterr().out
    assert "where: replayed: the same launch ran earlier in this test session" in said
    assert pid(launch(later)) == second  # the second identical launch: the second record
    assert pid(launch(later)) not in {first, second}  # a third: never made before
    assert pid(launch(later, "--device", "meta")) not in {first, second}  # other arguments
    monkeypatch.setattr(replay, "_made", collections.Counter())
    script.write_text(WHERE + "# changed\n")
    assert pid(launch(later)) not in {first, second}  # the launcher changed
    # a launch that names a folder of the runs outside its own writes what no record holds
    elsewhere = later.runs_dir / "shared"
    made = {pid(launch(later, "--device", str(elsewhere))) for _ in range(2)}
    monkeypatch.setattr(replay, "ORIGIN", "a third kernel")
    monkeypatch.setattr(replay, "_made", collections.Counter())
    assert pid(launch(later, "--device", str(elsewhere))) not in made | {first, second}
