"""scripts/gpu_check.py: the first command on a GPU machine, run here in its CPU mode."""

import importlib.metadata
import json
import subprocess
import sys
import sysconfig
import time

import pytest
from conftest import ROOT

SCRIPT = ROOT / "scripts" / "gpu_check.py"


@pytest.mark.slow
def test_gpu_check_in_cpu_mode_writes_a_summary_that_passes(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--only", "00", "--lanes", "1",
         "--compile-backend", "eager", "--build", str(tmp_path)],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["passed"] is True and summary["failures"] == []
    assert summary["torch_pinned"] == "2.13.0" and summary["torch"].startswith("2.")
    assert [r["notebook"] for r in summary["notebooks"]] == ["00_environment_check"]
    assert summary["notebooks"][0]["status"] == "passed"
    probes = summary["probes"]
    assert set(probes) == {"bf16_compile", "allreduce"}  # the fp16 probe: GPUs only, by choice
    assert probes["allreduce"]["backend"] == "gloo"
    assert all(p["status"] == "passed" for p in probes.values())
    assert summary["image_cuda_tag"]["status"] == "not checked"  # a CPU build of torch here


def test_the_image_cuda_tag_is_checked_against_the_pinned_torch():
    sys.path.insert(0, str(ROOT / "scripts"))
    from gpu_check import image_cuda_check

    tag = image_cuda_check(None, True)["dockerfile_cuda"]
    assert tag and tag.count(".") == 1  # the Dockerfile's CUDA_TAG parses
    assert image_cuda_check(tag, True)["status"] == "passed"
    # the pinned torch with another CUDA (pip's 2.13.0 on a GPU machine, say): said, not failed
    other = image_cuda_check("99.1", True)
    assert other["status"] == "differs" and "ARG CUDA_TAG=cuda99.1" in other["why"]
    assert "not verified" in other["why"]
    assert image_cuda_check("99.1", False)["status"] == "not checked"


def test_a_failure_with_another_torch_is_told_apart_from_a_defect():
    sys.path.insert(0, str(ROOT / "scripts"))
    from gpu_check import diagnose

    error = "AttributeError: module 'torch.distributed' has no attribute 'all_gather_single'"
    assert diagnose(error, torch_matches=False).startswith("maybe the torch version")
    assert diagnose(error, torch_matches=True).startswith("a defect")
    assert diagnose("AssertionError: a loss is not finite", torch_matches=False).startswith(
        "a defect")
    assert diagnose("", torch_matches=False) == ""


# ---- the check on a machine with no index (--offline), and what its rows carry -------------

sys.path.insert(0, str(ROOT / "scripts"))
import gpu_check  # noqa: E402
import gpu_wheels  # noqa: E402


def make_wheel(folder, name, version, requires=(), module_text="VALUE = 1\n"):
    """A small pure-Python wheel, as pip builds them (module, dist-info, RECORD)."""
    import zipfile

    dist = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    files = {f"{name}/__init__.py": module_text, f"{dist}/METADATA": metadata,
             f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n",
             f"{name}-{version}.data/purelib/{name}_extra.py": "EXTRA = 2\n",
             f"{name}-{version}.data/scripts/{name}-tool": "#!python\n"}  # fmt: skip
    files[f"{dist}/RECORD"] = "".join(f"{f},,\n" for f in files) + f"{dist}/RECORD,,\n"
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for arc, text in files.items():
            zf.writestr(arc, text)
    return path


def wheel_folder(tmp_path, wheels):
    folder = tmp_path / "wheels"
    folder.mkdir()
    entries = [{"name": gpu_wheels.canonical(n), "version": v,
                "file": make_wheel(folder, n, v, req).name} for n, v, req in wheels]
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    (folder / "wheels.json").write_text(json.dumps({"python": python, "wheels": entries}))
    return folder


def test_offline_installs_the_wheels_leaves_the_machines_own_and_finds_what_is_missing(tmp_path):
    wheels = wheel_folder(tmp_path, [("cktoy", "1.0", ["packaging", "cktoy_absent>=2"]),
                                     ("psutil", "0.0.1", [])])  # psutil: the machine's own
    scratch = tmp_path / "scratch"
    done = gpu_check.install_offline(wheels, scratch)
    assert done["installed"] == ["cktoy"] and "psutil" in done["kept"]
    assert (scratch / "cktoy" / "__init__.py").exists() and not (scratch / "psutil").exists()
    spec = gpu_check.write_kernelspec(scratch, sys.executable, str(scratch)) / "kernel.json"
    assert json.loads(spec.read_text())["argv"][:3] == [sys.executable, "-m", "ipykernel_launcher"]
    code = ("import sys, gpu_check; from pathlib import Path; "
            f"print('\\n'.join(gpu_check.preflight(Path({str(scratch)!r}))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={"PYTHONPATH": f"{scratch}:{ROOT / 'scripts'}", "PATH": ""})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "cktoy needs cktoy_absent>=2: not on this path"


def test_the_stand_in_for_the_gpu_machine_takes_its_packages_and_none_the_wheels_bring():
    sys.path.insert(0, str(ROOT / "scripts"))
    from gpu_standin import WHEELS_BRING, canonical, the_machines

    here = sysconfig.get_path("purelib")  # this venv holds the check's packages too
    found = importlib.metadata.distributions(path=[here])
    dists = {canonical(d.metadata["Name"]): d for d in found}
    assert {canonical(m) for m in WHEELS_BRING} <= set(dists)
    names = the_machines(dists)
    assert {"torch", "matplotlib", "tensorboard", "pytest", "pluggy", "numpy"} <= names
    assert not names & {canonical(m) for m in WHEELS_BRING}


def test_offline_refuses_wheels_of_another_python(tmp_path):
    wheels = wheel_folder(tmp_path, [("cktoy", "1.0", [])])
    manifest = json.loads((wheels / "wheels.json").read_text())
    (wheels / "wheels.json").write_text(json.dumps({**manifest, "python": "2.7"}))
    with pytest.raises(SystemExit, match="wheels for Python 2.7"):
        gpu_check.install_offline(wheels, tmp_path / "scratch")


def test_a_wheel_unpacked_without_pip_lies_as_pip_target_lays_it(tmp_path):
    wheel = make_wheel(tmp_path, "cktoy", "1.0")
    gpu_check.unpack_wheel(wheel, tmp_path / "t")
    found = sorted(str(p.relative_to(tmp_path / "t")) for p in (tmp_path / "t").rglob("*")
                   if p.is_file())
    assert found == ["cktoy-1.0.dist-info/METADATA", "cktoy-1.0.dist-info/RECORD",
                     "cktoy-1.0.dist-info/WHEEL", "cktoy/__init__.py", "cktoy_extra.py"]


def fake_run(runs_dir, name, launcher, nproc, device, backend=None):
    run = runs_dir / name
    (run / "out").mkdir(parents=True)
    cmd = ["python", "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
           f"../launchers/{launcher}", "--device", device, "--out", str(run / "out")]
    (run / "run.json").write_text(json.dumps({"cmd": cmd, "nproc": nproc, "returncode": 0}))
    if backend:
        (run / "out" / "metrics.json").write_text(json.dumps({"backend": backend}))


def test_a_row_says_where_each_launch_ran_and_what_held_the_gpu(tmp_path):
    folder = tmp_path / "nb"
    fake_run(folder / "runs", "first", "ddp_first_run.py", 1, "cuda", backend="nccl")
    fake_run(folder / "runs", "shared", "ddp_bench.py", 2, "cuda")  # 2 ranks, 1 GPU: gloo
    fake_run(folder / "runs", "cpu", "collectives_demo.py", 2, "cpu", backend="gloo")
    held = [{"what": "kernel", "peak_mib": 812.0}, {"what": "ddp_first_run.py", "peak_mib": 9}]
    row = gpu_check.notebook_row("04_x", folder, "failed", 3.0, "no result", n_gpus=1, held=held)
    by_run = {r["run"]: r for r in row["launches"]}
    assert by_run["first"]["backend"] == "nccl" and by_run["first"]["backend_from"] == "metrics"
    assert by_run["shared"]["backend"] == "gloo" and by_run["shared"]["backend_from"] == "rule"
    assert row["backend"] == "gloo+nccl"
    assert row["on_the_gpu"] == ("kernel (812 MiB); ddp_first_run.py (1x nccl); "
                                 "ddp_bench.py (2x gloo)")  # in the runs' order
    assert row["status"] == "failed" and row["tier"] is None  # no verify.json, no results file
    empty = gpu_check.notebook_row("00_x", tmp_path / "none", "passed", 1.0, "", 0, [])
    assert empty["on_the_gpu"] == "nothing" and empty["backend"] == "-"


def test_a_notebook_that_leaves_no_result_is_never_given_an_earlier_runs_row(tmp_path):
    nb = ROOT / "notebooks" / "00_environment_check.ipynb"
    stale = tmp_path / "notebooks" / nb.stem
    stale.mkdir(parents=True)
    (stale / "verify.json").write_text(json.dumps({"notebooks": [
        {"notebook": nb.stem, "status": "passed", "seconds": 1, "error": "",
         "failed_cell": None}]}))  # fmt: skip
    watch = gpu_check.GpuWatch(sample=lambda: [])
    dies = lambda nb, folder, limit: [sys.executable, "-c", "print('boom'); raise SystemExit(3)"]  # noqa: E731
    rows, workers = gpu_check.run_notebooks([nb], 1, "cpu", tmp_path, 60, time.monotonic() + 600,
                                            0, watch, command=dies)  # fmt: skip
    for w in workers:
        w.join()
    (row,) = rows
    assert row["status"] == "failed" and row["error"] == "no result (exit 3): boom"
    rows, workers = gpu_check.run_notebooks([nb], 1, "cpu", tmp_path, 60, time.monotonic() + 5,
                                            0, watch, command=dies)  # fmt: skip
    for w in workers:
        w.join()
    assert rows[0]["error"] == "no result (exit 3): boom"  # 00 ran with the budget spent
    eight = ROOT / "notebooks" / "08_pitfalls_and_debugging.ipynb"
    rows, workers = gpu_check.run_notebooks([eight], 1, "cpu", tmp_path, 60,
                                            time.monotonic() + 5, 0, watch, command=dies)
    for w in workers:
        w.join()
    assert rows[0]["status"] == "cut" and "budget" in rows[0]["error"]


def test_the_gpu_record_names_each_process_and_the_notebook_it_belongs_to():
    parent = subprocess.Popen([sys.executable, "-c", "import subprocess, sys; subprocess.run("
                               "[sys.executable, '-c', 'import time; time.sleep(30)', 'x.py'])"])
    try:
        import psutil

        def child_started():  # forked and exec'd: before exec its command is its parent's
            kids = psutil.Process(parent.pid).children()
            return kids if kids and "x.py" in kids[0].cmdline() else None

        deadline = time.monotonic() + 20
        while not child_started() and time.monotonic() < deadline:
            time.sleep(0.05)
        (child,) = child_started()
        sampled = [(child.pid, 300 * 2**20), (999_999_999, 2**20)]
        watch = gpu_check.GpuWatch(sample=lambda: sampled)
        watch.track(parent.pid, "07_build_ddp_yourself")
        watch.poll()
        sampled[0] = (child.pid, 500 * 2**20)
        watch.poll()
        (entry,) = watch.of("07_build_ddp_yourself")
        assert entry["what"] == "x.py" and entry["peak_mib"] == 500.0
        assert [e["pid"] for e in watch.unattributed()] == [999_999_999]
    finally:
        for p in psutil.Process(parent.pid).children(recursive=True):
            p.kill()
        parent.kill()
        parent.wait()


def test_the_wheels_leave_torch_numpy_and_the_machines_packages_to_the_machine():
    pins = gpu_wheels.course_pins()
    wanted = {gpu_wheels.canonical(spec.split("==")[0]) for spec in gpu_wheels.lacking(pins)}
    assert {"papermill", "nbclient", "nbformat", "ipykernel", "ipywidgets"} <= wanted
    assert not wanted & {"torch", "numpy", "matplotlib", "tensorboard", "psutil", "tqdm",
                         "pyyaml", "jupyterlab", "jupyter-server-mathjax"}
    assert gpu_wheels.canonical("jupyter_server.Mathjax") == "jupyter-server-mathjax"


@pytest.mark.slow
def test_the_wheel_plan_for_python_312_ships_no_package_of_the_machine():
    ship, machine, _ = gpu_wheels.plan("3.12")  # pip's resolver, metadata only (needs the index)
    assert {"papermill", "ipykernel", "jupyter-client"} <= set(ship)
    assert not set(ship) & set(machine) and not set(ship) & {"torch", "numpy"}
    assert {"torch", "numpy", "matplotlib", "packaging"} <= set(machine)


def test_the_matrix_installs_the_course_beside_each_torch_and_remakes_an_env_when_pins_move():
    import matrix

    rest = matrix.requirements_without_torch()
    assert not [r for r in rest if r.startswith("torch")] and "papermill==2.7.0" in rest
    assert matrix.env_stamp("2.11.0") != matrix.env_stamp("2.15.0")
    def v(text):
        return tuple(int(x) for x in text.split("."))

    low, high = map(v, matrix.SUPPORTED)
    assert all(low <= v(t) <= high for t in matrix.TORCH) and v(matrix.TORCH[0]) <= (2, 11, 0)


def test_a_failed_notebook_row_names_its_launch_s_first_exception(tmp_path):
    runs = tmp_path / "runs"
    fake_run(runs, "demo", "collectives_demo.py", 2, "cpu")
    (runs / "demo" / "run.json").write_text(json.dumps({"cmd": [], "nproc": 2, "returncode": 1}))
    (runs / "demo" / "output.log").write_text(
        "[rank1] AttributeError: module 'torch.distributed' has no attribute 'x'\n"
        "[rank0] RuntimeError: Connection closed by peer\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n")
    error = gpu_check.launch_error(runs)
    assert error == "demo: AttributeError: module 'torch.distributed' has no attribute 'x'"
    assert gpu_check.diagnose(error, torch_matches=False).startswith("maybe the torch version")


def test_the_lanes_take_the_longest_notebooks_first_unless_a_budget_orders_them(tmp_path):
    notebooks = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    order = [nb.name[:2] for nb in gpu_check.start_order(notebooks, tmp_path, None)]
    assert order[0] == "05" and sorted(order) == [nb.name[:2] for nb in notebooks]
    (tmp_path / "summary.json").write_text(json.dumps({"notebooks": [
        {"notebook": "00_environment_check", "status": "passed", "seconds": 9999}]}))
    assert gpu_check.start_order(notebooks, tmp_path, None)[0].name.startswith("00")
    by_teaching = [nb.name[:2] for nb in gpu_check.start_order(notebooks, tmp_path, 600)]
    assert by_teaching[0] == "00" and sorted(by_teaching) == sorted(order)
    assert sorted(gpu_check.TEACHES_MOST_ON_A_GPU) == sorted(order)  # none left to chance


def test_a_budget_too_small_for_notebook_00_is_refused_before_anything_runs(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--budget", "60",
                           "--build", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--budget (BUDGET=) 60 s" in proc.stderr
    assert "at least 120 s" in proc.stderr and not (tmp_path / "notebooks").exists()


def test_a_cut_notebook_is_no_failure_and_gets_no_diagnosis(tmp_path, capsys):
    cut = gpu_check.notebook_row("08_x", tmp_path / "none", "cut", 0.0,
                                 "the budget was spent before it could start", 0, [])
    cut["diagnosis"] = ""
    gpu_check.print_table([cut])
    printed = capsys.readouterr().out
    assert printed.count("08_x") == 1 and "defect" not in printed  # its row, nothing more
