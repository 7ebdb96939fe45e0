"""Launchers: each equals its %%writefile cell and runs on its own under torchrun."""

import ast
import importlib.util
import re
import sys
from pathlib import Path

import nbformat
import pytest
import torch
from conftest import NOTEBOOKS, ROOT

import coursekit
from coursekit.course import CHECKER, COURSE, LAUNCHER, launcher_kinds

sys.path.insert(0, str(ROOT / "scripts"))
import sync_launchers  # noqa: E402

LAUNCHERS = ROOT / "launchers"
KIND = launcher_kinds()  # every file of launchers/ -> its kind, from the course table
SOLUTIONS = ROOT / "solutions"
# arguments that keep a launcher's run to a few seconds here (none: its defaults already do)
TRAIN_QUICK = ["--train-size", "256", "--test-size", "128", "--epochs", "1"]
QUICK_ARGS = {
    "ddp_first_run.py": ["--steps", "5"],
    "ddp_equivalence.py": ["--steps", "3"],
    "ddp_same_model.py": ["--steps", "2", "--hidden", "64", "--classes", "10", "--batch-size", "6"],
    **{f"train_step{i}_{name}.py": TRAIN_QUICK for i, name in enumerate(
        ["data", "logging", "checkpoints", "evaluation", "accumulation", "amp_compile"], start=1)},
    "multinode_train.py": ["--steps", "3"],
    "train_step7_sharding.py": ["--train-size", "192", "--epochs", "1", "--strategy", "fsdp"],
    "ring_allreduce.py": ["--sizes", "1", "5"],
    "allreduce_bench.py": ["--max-bytes", "64K", "--factor", "16", "--iters", "3", "--warmup", "1",
                           "--model-width", "32"],
    # notebook 09's fixed launchers (their defaults are already small)
    "pitfall_unused_fixed.py": ["--steps", "4"],
    "pitfall_uneven_fixed.py": ["--batches", "2"],
    "batchnorm_stats.py": ["--global-batch", "24"],
    "sampler_forgot_set_epoch.py": ["--size", "11"],
    "sampler_fixed.py": ["--size", "11"],
    # notebook 12's: a tiny transformer (12 heads: whole heads for 1 and 3 ranks)
    **{name: ["--dim", "48", "--heads", "12", "--seq", "16", "--vocab", "32"]
       for name in ("tensor_parallel.py", "pipeline_parallel.py")},
    # the learner's unfinished wrappers: the checker reports what they raised, and runs on
    "check_my_zero1.py": ["--impl", f"{LAUNCHERS / 'my_zero1.py'}:MyZeRO1"],
    "check_megatron_mlp.py": ["--impl", f"{LAUNCHERS / 'my_megatron_mlp.py'}:ParallelMLP"],
    "check_my_ddp.py": [a for step, cls in [("naive", "NaiveDDP"), ("bucketed", "BucketedDDP")]
                        for a in ("--impl", f"{LAUNCHERS / f'my_ddp_{step}.py'}:{cls}")],
    "my_ddp_bench.py": ["--naive", SOLUTIONS / "ddp_naive.py",
                        "--overlapped", SOLUTIONS / "ddp_overlapped.py",
                        "--bucketed", SOLUTIONS / "ddp_bucketed.py",
                        "--layers", "4", "--width", "32", "--batch", "4", "--rounds", "1",
                        "--steps", "1",
                        "--bucket-mb", "0.01,1"],
    "ddp_bench.py": ["--rounds", "1", "--target-s", "0.01", "--width", "32", "--batch", "4",
                     "--py-batch", "4", "--sweep-width", "32", "--sweep-batches", "2,8",
                     "--bucket-caps", "1,25", "--bucket-layers", "4", "--bucket-width", "32",
                     "--bucket-batch", "2", "--profile-bucket-mb", "1"],
}
def writefile_cells() -> dict[Path, tuple[str, str]]:
    """launcher path -> (notebook name, the text its %%writefile cell writes)."""
    return sync_launchers.writefile_cells(NOTEBOOKS[0].parent)


def torchrun_launchers() -> list[Path]:
    """The launchers that run on their own under torchrun at any rank count (the kinds the
    course table calls launcher)."""
    return sorted(p for p in LAUNCHERS.glob("*.py") if KIND.get(p.name) in (LAUNCHER, CHECKER))


def test_every_launcher_equals_its_writefile_cell(capsys):
    cells = writefile_cells()
    committed = {p.resolve() for p in LAUNCHERS.glob("*.py") if KIND.get(p.name) != CHECKER}
    assert committed == set(cells), "every launcher but a checker is written by one notebook cell"
    assert sync_launchers.main(["--check"]) == 0, capsys.readouterr().out  # the differing lines


def test_the_sync_command_writes_a_launcher_from_its_cell_and_its_check_names_the_lines(
        tmp_path, monkeypatch, capsys):  # fmt: skip
    launcher = tmp_path / "launchers" / "demo.py"
    (tmp_path / "notebooks").mkdir(parents=True)
    launcher.parent.mkdir()
    launcher.write_text("print('old')\n")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "%%writefile ../launchers/demo.py\nprint('new')")])  # fmt: skip
    nbformat.write(nb, tmp_path / "notebooks" / "99_demo.ipynb")
    monkeypatch.setattr(sync_launchers, "ROOT", tmp_path)
    assert sync_launchers.main(["--check"]) == 1
    out = capsys.readouterr().out
    assert "-print('old')" in out and "+print('new')" in out and "99_demo.ipynb" in out
    assert launcher.read_text() == "print('old')\n"  # the check writes nothing
    assert sync_launchers.main([]) == 0 and launcher.read_text() == "print('new')\n"
    assert sync_launchers.main(["--check"]) == 0


# notebooks that never run a launcher at 1 rank, on any tier: configure(min_nproc=2) gives
# them 2 CPU ranks where a tier has fewer, and notebook 00 checks with max(2, nproc) ranks
NEVER_AT_1_RANK = {"00"} | {nb.name[:2] for nb in NOTEBOOKS if "min_nproc=2" in nb.read_text()}


def launcher_rank_counts() -> list[tuple[Path, int]]:
    """1 rank (the single-GPU tier) for every launcher a notebook may run at 1 rank; 3 ranks
    (an uneven split of the data) for every launcher; each only where its notebook's runs in
    the suite (the course table's test_ranks) do not already run it so."""
    row_of = {name: nb for nb in COURSE for name in nb.files}
    wanted = []
    for launcher in torchrun_launchers():
        row = row_of[launcher.name]
        never = {1} if row.number in NEVER_AT_1_RANK else set()
        wanted += [(launcher, n) for n in (1, 3) if n not in set(row.test_ranks) | never]
    return wanted


@pytest.mark.slow
@pytest.mark.parametrize("launcher, nproc", launcher_rank_counts(),
                         ids=lambda v: v.stem if isinstance(v, Path) else f"{v}ranks")
def test_launcher_runs_under_torchrun(launcher, nproc, setup):
    args = QUICK_ARGS.get(launcher.name, [])
    run = coursekit.run_launcher(launcher, args, setup=setup, nproc=nproc, echo=False)
    assert run.metrics["world_size"] == nproc
    assert run.metrics["backend"] == "gloo"
    # a launcher that trains several runs in one launch reports each under "runs"
    for figures in run.metrics.get("runs", {"": run.metrics}).values():
        assert len(figures["ranks"]) == nproc
        if "loss_max_diff" in figures:  # notebook 12's layouts (tiny_gpt.run_summary): at 3
            # ranks (a middle pipeline stage, an uneven split) the one-process model, float64
            tolerance = 1e6 * torch.finfo(torch.float64).eps
            assert figures["loss_max_diff"] <= tolerance
            for held in figures["ranks"]:
                assert held["grad_max_diff"] <= tolerance and held["param_max_diff"] <= tolerance


def test_classic_spawn_form(setup):
    """mp.spawn, no torchrun: one process per GPU with NCCL, or N CPU processes with gloo;
    run under the runner's guard (subprocess.run's timeout would kill only the parent)."""
    from coursekit.runner import run_command

    nproc = torch.cuda.device_count() or 2
    run = run_command([sys.executable, str(LAUNCHERS / "ddp_spawn_classic.py"), "--steps", "5"],
                      setup=setup, name="spawn_classic", echo=False)  # fmt: skip
    lines = [text for _, text in run.lines if text.startswith("rank ")]
    assert len(lines) == nproc, run.output
    assert len({line.split("checksum ")[1] for line in lines}) == 1  # the replicas are equal


def test_the_course_table_names_every_launcher_its_notebook_writes():
    """Each notebook's row lists exactly the files its %%writefile cells write, and its
    checkers, which no cell writes."""
    written: dict[str, set[str]] = {}
    for path, (notebook, _) in writefile_cells().items():
        written.setdefault(notebook[:2], set()).add(path.name)
    for nb in COURSE:
        assert set(nb.files) - set(nb.launchers(CHECKER)) == written.get(nb.number, set()), nb.stem
        assert all((LAUNCHERS / name).is_file() for name in nb.launchers(CHECKER)), nb.stem


# the packages beside the launchers: common/ (two or more notebooks use it), nbNN/ (notebook NN)
PACKAGE = re.compile(r"^(common|nb\d\d)$")
CELL_IMPORT = re.compile(r"^\s*from\s+(common|nb\d\d)(?:\.(\w+))?\s+import\s+\(?([\w ,]+)"
                         r"|^\s*import\s+(common|nb\d\d)\.(\w+)", re.M)  # fmt: skip
# a launcher or a module beside them that a notebook's code names by path, unless it only shows,
# reads or tests the file (show_lines, read_text, Path(...).exists())
RUN_PATH = re.compile(r"launchers/((?:\w+/)?\w+)\.py")
NOT_A_RUN = re.compile(r"show_\w+\(|read_text|Path\(")


def imported_modules(source: str) -> set[str]:
    """'common/glyphs', 'nb06/bench_job': the modules beside the launchers that a Python file
    imports (`from common.glyphs import Net`, `from nb12 import tiny_gpt`), anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            package, _, module = node.module.partition(".")
            if PACKAGE.match(package):
                found |= ({f"{package}/{module}"} if module
                          else {f"{package}/{alias.name}" for alias in node.names})  # fmt: skip
        elif isinstance(node, ast.Import):
            for alias in node.names:
                package, _, module = alias.name.partition(".")
                if PACKAGE.match(package) and module:
                    found.add(f"{package}/{module}")
    return found


def notebooks_using_each_module() -> dict[str, set[str]]:
    """'common/glyphs' -> the notebooks ("04") that use it: they import it (a code cell, or their
    lesson module coursekit/lessons/nbNN.py), a launcher they write (%%writefile) or run imports
    it, they run it as a script, or a module they use imports it."""
    modules = {str(p.relative_to(LAUNCHERS).with_suffix("")): p
               for p in LAUNCHERS.glob("*/*.py") if PACKAGE.match(p.parent.name)
               and p.name != "__init__.py"}  # fmt: skip
    imports = {name: imported_modules(p.read_text()) for name, p in modules.items()}
    users: dict[str, set[str]] = {name: set() for name in modules}
    for notebook in NOTEBOOKS:
        number = notebook.name[:2]
        lesson = ROOT / "coursekit" / "lessons" / f"nb{number}.py"
        used = imported_modules(lesson.read_text()) if lesson.exists() else set()
        for cell in nbformat.read(notebook, as_version=4).cells:
            if cell.cell_type != "code":
                continue
            if cell.source.startswith("%%writefile"):
                launcher = (notebook.parent / cell.source.split("\n", 1)[0].split()[1]).resolve()
                used |= imported_modules(launcher.read_text())
                continue
            for m in CELL_IMPORT.finditer(cell.source):
                if m.group(4):
                    used.add(f"{m.group(4)}/{m.group(5)}")
                elif m.group(2):
                    used.add(f"{m.group(1)}/{m.group(2)}")
                else:
                    used |= {f"{m.group(1)}/{name.split()[0]}" for name in m.group(3).split(",")
                             if name.strip()}  # fmt: skip
            for line in cell.source.splitlines():
                for path in [] if NOT_A_RUN.search(line) else RUN_PATH.findall(line):
                    if path in modules:  # a module run as a script
                        used.add(path)
                    elif (LAUNCHERS / f"{path}.py").is_file():  # a launcher it runs
                        used |= imported_modules((LAUNCHERS / f"{path}.py").read_text())
        while new := {m for name in used if name in imports for m in imports[name]} - used:
            used |= new  # and what the modules it uses import
        for name in used & set(users):
            users[name].add(number)
    return users


def test_common_holds_what_two_notebooks_use_and_nbNN_what_notebook_NN_alone_uses():
    """launchers/common/ is shared code: a module that serves one notebook lives in that
    notebook's package launchers/nbNN/ (imported as `from nb06.bench_job import options`)."""
    wrong = []
    for name, numbers in sorted(notebooks_using_each_module().items()):
        package = name.split("/")[0]
        users = ", ".join(sorted(numbers)) or "none"
        if package == "common" and len(numbers) < 2:
            where = f"launchers/nb{min(numbers)}/" if numbers else "nowhere (delete it?)"
            wrong.append(f"launchers/{name}.py is used by notebook(s) {users} only: it belongs "
                         f"in {where}")  # fmt: skip
        elif package != "common" and numbers != {package[2:]}:
            where = "launchers/common/" if len(numbers) > 1 else (
                f"launchers/nb{min(numbers)}/" if numbers else "nowhere (delete it?)")
            wrong.append(f"launchers/{name}.py is used by notebook(s) {users}, not by notebook "
                         f"{package[2:]} alone: it belongs in {where}")  # fmt: skip
    assert not wrong, "\n".join(wrong)
    for folder in LAUNCHERS.glob("nb[0-9][0-9]"):
        assert (folder / "__init__.py").is_file(), f"{folder.name}/ needs an __init__.py"
        assert any(n.name.startswith(folder.name[2:] + "_") for n in NOTEBOOKS), folder.name


IMPORTED_PICK = "from common.devices import device_and_backend"  # launchers/common/devices.py
IMPORTED_PREAMBLE = "from common.devices import init_distributed"  # its torchrun preamble


# notebook 03's task check: its own gloo groups on CPU ranks, whatever the machine has
CPU_BY_DESIGN = {"broadcast_check_ranks.py"}


def launchers_with_a_process_group() -> list[Path]:
    """The launchers and the modules beside them that join a process group (nb12/layout_mains.py
    does it for notebook 12's launchers); devices.py defines init_distributed."""
    files = sorted(LAUNCHERS.glob("*.py")) + sorted(LAUNCHERS.glob("*/*.py"))  # common/, nbNN/
    return [p for p in files if p.name not in CPU_BY_DESIGN and p.name != "devices.py"
            and re.search(r"\b(init_process_group|init_distributed)\(", p.read_text())]


@pytest.mark.parametrize("launcher", launchers_with_a_process_group(),
                         ids=lambda p: str(p.relative_to(LAUNCHERS).with_suffix("")))
def test_device_and_backend_are_chosen_in_one_place_for_every_tier(launcher, monkeypatch):
    """The GPU tiers cannot run here: their choice is one function that the CPU runs call too,
    tested here for the environments of each tier (LOCAL_WORLD_SIZE, not WORLD_SIZE)."""
    source = launcher.read_text()
    if not re.search(r"^from common\.devices import .*\binit_distributed\b", source, re.M):
        assert "def device_and_backend(" in source or IMPORTED_PICK in source, (
            f"{launcher.name}: join the process group with `{IMPORTED_PREAMBLE}` "
            f"(init_distributed(args.device)), or pick device and backend with "
            f"device_and_backend(requested, local_rank, local_world_size, n_gpus): "
            f"`{IMPORTED_PICK}` (notebook 03's launcher writes it out)")
        assert "device_id=" in source, f"{launcher.name}: pass device_id= to init_process_group"
    monkeypatch.syspath_prepend(str(LAUNCHERS))  # as under torchrun: its folder is importable
    spec = importlib.util.spec_from_file_location(launcher.stem, launcher)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # a launcher runs only under `if __name__ == "__main__"`
    if hasattr(module, "device_and_backend"):
        pick = module.device_and_backend
    else:  # init_distributed picks with the device_and_backend of its own module
        pick = sys.modules[module.init_distributed.__module__].device_and_backend
    # 2 nodes x 8 GPUs: 16 ranks, 8 on this node, one GPU each
    assert pick("cuda", 3, 8, 8) == (torch.device("cuda", 3), "nccl")
    assert pick("cuda", 0, 2, 1) == (torch.device("cuda", 0), "gloo")  # 2 ranks share a GPU
    assert pick("cuda", 1, 2, 1) == (torch.device("cuda", 0), "gloo")
    assert pick("cpu", 1, 2, 0) == (torch.device("cpu"), "gloo")


def test_no_launcher_or_module_beside_them_imports_the_helper_package():
    """Launchers run on their own (under torchrun, Slurm, a container without the notebooks):
    what they share lives in launchers/common/, and the helper package only runs them."""
    importing = [str(p.relative_to(LAUNCHERS)) for p in sorted(LAUNCHERS.rglob("*.py"))
                 if re.search(r"^\s*(import|from)\s+coursekit\b", p.read_text(), re.M)]
    assert not importing, f"launchers/ files that import coursekit: {importing}"
