"""Live ranks (coursekit/ranks.py): a pool of ipyparallel engines with a process group formed,
driven by cells. Collectives answer in milliseconds; a rank that skips one ends the cell
within seconds, each rank's place said, and the pool works again; nothing is left behind
when the pool stops or its kernel goes (shut down, restarted, killed)."""

import time

import psutil
import pytest
from conftest import processes_with
from jupyter_client import KernelManager

import coursekit
from coursekit.ranks import Ranks, _as_text

pytestmark = pytest.mark.slow
POOL = "--orphan-exit"  # every process of a pool runs under `coursekit.guard --orphan-exit`


def wait_until_gone(timeout: float, among: list | None = None) -> list:
    """The pool processes (``among`` these, else any) still alive after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in (among if among is not None else processes_with(POOL))
                 if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]  # fmt: skip
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.3)


def pool_of(km: KernelManager) -> list:
    """The pool processes a kernel started (its descendants under the pool's guard)."""
    kernel = psutil.Process(km.provisioner.process.pid)
    return [p for p in kernel.children(recursive=True) if POOL in " ".join(p.cmdline())]


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    setup = coursekit.configure(DEVICE="cpu", RESULTS_DIR=tmp_path_factory.mktemp("ranks"),
                                quiet=True)  # fmt: skip
    pool = Ranks(setup, n=3).start()  # 3 ranks: a rank's two neighbours differ
    yield pool
    pool.stop()
    assert wait_until_gone(10) == [], "a process of the pool outlived stop()"


def test_a_cell_runs_on_every_rank_or_on_those_named(pool):
    code = ("t = torch.full((2,), float(rank)); dist.all_reduce(t); print('rank', rank)\n"
            "t.sum().item()")
    outcomes = pool.run(code)
    assert [(o.rank, o.value, o.stdout.strip(), o.error) for o in outcomes] == [
        (r, "6.0", f"rank {r}", None) for r in range(3)]  # 2 x (0 + 1 + 2) on every rank
    scatter = ("out = torch.zeros(2); dist.reduce_scatter_single(out, torch.arange(6.0))\n"
               "out.tolist()")
    assert [o.value for o in pool.run(scatter)] == ["[0.0, 3.0]", "[6.0, 9.0]", "[12.0, 15.0]"]
    assert [o.rank for o in pool.run("y = 7 * rank", ranks=[0, 2])] == [0, 2]
    named = pool.run("y")  # each rank keeps its own names: rank 1 never ran that line
    assert [named[0].value, named[2].value] == ["0", "14"]
    assert named[1].error == "NameError: name 'y' is not defined"
    text = _as_text(pool.run("rank * 10"), "rank * 10")
    assert text.splitlines() == ["[rank 0]", "-> 0", "[rank 1]", "-> 10", "[rank 2]", "-> 20"]
    with pytest.raises(ValueError, match="ranks 0 to 2"):
        pool.run("1", ranks=[3])


def test_a_rank_that_skips_a_collective_ends_the_cell_and_the_pool_works_again(pool):
    hang = "x = torch.ones(1)\nif rank == 0:\n    dist.all_reduce(x)\nprint('done', rank)"
    start = time.monotonic()
    outcomes = pool.run(hang)
    took = time.monotonic() - start
    assert took < pool.timeout_s + 2, f"the hung cell took {took:.1f} s"
    stuck = outcomes[0]
    assert "Timed out" in stuck.error and stuck.line == 3  # rank 0 waited at line 3
    assert [o.stdout for o in outcomes[1:]] == ["done 1\n", "done 2\n"]
    assert "at line 3: dist.all_reduce(x)" in _as_text(outcomes, hang)
    back = pool.run("t = torch.ones(1); dist.all_reduce(t); t.item()")
    assert [o.value for o in back] == ["3.0"] * 3, "the group was not formed again"


def test_a_cell_that_never_returns_is_interrupted(pool):
    loop = "import time\nwhile True:\n    time.sleep(0.05)"
    start = time.monotonic()
    outcomes = pool.run(loop, ranks=[1], timeout_s=1)
    assert time.monotonic() - start < 5
    assert outcomes[0].error.startswith("KeyboardInterrupt") and outcomes[0].line == 3
    assert [o.value for o in pool.run("rank")] == ["0", "1", "2"]


def test_no_pool_process_outlives_its_kernel():
    """Restarted (the old kernel killed) or shut down: the pool goes with its kernel."""
    km = KernelManager(kernel_name="python3")
    km.start_kernel()
    client = km.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        start = ("import coursekit; setup = coursekit.configure(DEVICE='cpu', quiet=True, "
                 "RESULTS_DIR='results'); pool = coursekit.live_ranks(setup, n=2)")  # fmt: skip
        reply = client.execute_interactive(start, timeout=120)
        assert reply["content"]["status"] == "ok", reply["content"]
        first = pool_of(km)
        assert len(first) == 3  # the controller and 2 engines, each under its guard
        km.restart_kernel(now=True)  # the old kernel is killed: its pool cannot stop itself
        assert wait_until_gone(10, first) == [], "the pool of a killed kernel lived on"
        client.wait_for_ready(timeout=60)
        reply = client.execute_interactive(start, timeout=120)
        assert reply["content"]["status"] == "ok", reply["content"]
        second = pool_of(km)
        assert len(second) == 3
    finally:
        client.stop_channels()
        km.shutdown_kernel(now=False)  # a clean shutdown: the kernel's exit stops the pool
    assert wait_until_gone(10, second) == [], "the pool of a shut-down kernel lived on"


def test_a_rank_whose_process_dies_is_started_again(pool):
    """A native abort (here os._exit) ends a rank's process: the cell says so, and the pool
    comes back with every rank, its group formed again."""
    outcomes = pool.run("import os\nif rank == 1:\n    os._exit(3)\nrank")
    assert outcomes[0].value == "0" and "died" in outcomes[1].error
    back = pool.run("t = torch.ones(1); dist.all_reduce(t); t.item()")
    assert [o.value for o in back] == ["3.0"] * 3


def test_a_gloo_connect_failure_starts_the_ranks_again(pool, capsys):
    """Gloo's connect failing while the group forms (a transient: coursekit/result.py) starts
    the ranks again once. Planted: rank 1's next init_process_group raises gloo's message."""
    plant = ("def planted(*args, **kwargs):\n"
             "    raise RuntimeError('Gloo connectFullMesh failed with [planted] Connection "
             "closed by peer')\n"
             "if rank == 1:\n"
             "    dist.init_process_group = planted\n"
             "raise ValueError('an error: the group is formed again')")  # fmt: skip
    start = time.monotonic()
    outcomes = pool.run(plant)
    assert all("an error" in o.error for o in outcomes)
    assert "WARNING: a rank could not connect gloo's process group" in capsys.readouterr().out
    assert time.monotonic() - start < 60, "the other ranks' wait was not cut short"
    back = pool.run("t = torch.ones(1); dist.all_reduce(t); t.item()")
    assert [o.value for o in back] == ["3.0"] * 3
