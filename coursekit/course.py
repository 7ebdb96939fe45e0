"""The course's contract in one table: a row per notebook, read by the tests, verify, the
report, the site and the README's generated tables (``python scripts/readme.py``).

A notebook's row names its file, its place on the course map, the files it writes into
launchers/ and what kind each one is, and how the test suite runs it: the parameters of its
one run in JupyterLab (the browser test: SMOKE sizes, the exercises' reference solutions),
and the rank counts its tests run it at. CONTRIBUTING.md says what else a new notebook or a
new task needs; tests/test_course.py checks that this table, the notebooks, the launchers
folder, the test modules, the README and CONTRIBUTING.md agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# What a file in launchers/ is. Every kind but "module" and "checker" equals a %%writefile cell
# of its notebook.
LAUNCHER = "launcher"  # runs on its own under `torchrun --nproc-per-node N`, on any tier
SPAWNS = "spawns"  # starts its own processes (torch.multiprocessing.spawn), no torchrun
MESH = "mesh"  # a launcher that needs 4 ranks (a 2 x 2 device mesh)
MODULE = "module"  # imported by a notebook's cells or by launchers, never run by itself
EXERCISE = "exercise"  # the learner completes it; loaded by the notebook's checker
BROKEN = "broken"  # fails or hangs on purpose: the lesson runs it and reads the failure
CHECKER = "checker"  # judges a code task under torchrun: a committed file, no cell (not the lesson)
KINDS = (LAUNCHER, SPAWNS, MESH, MODULE, EXERCISE, BROKEN, CHECKER)


@dataclass(frozen=True)
class Notebook:
    number: str  # "00": the file is notebooks/<number>_<slug>.ipynb
    slug: str
    title: str  # the course map's name for it
    learn: str  # the course map's "you leave knowing", one line
    files: dict[str, str]  # launchers/<name> -> its kind (KINDS)
    browser: dict = field(default_factory=dict)  # the browser run's parameters, besides SMOKE
    test_ranks: tuple[int, ...] = (2,)  # NPROC of every run of it in the suite (browser's first)

    @property
    def stem(self) -> str:
        return f"{self.number}_{self.slug}"

    @property
    def path(self) -> Path:
        return ROOT / "notebooks" / f"{self.stem}.ipynb"

    @property
    def test_module(self) -> Path:
        return ROOT / "tests" / f"test_{self.stem}.py"

    def launchers(self, *kinds: str) -> list[str]:
        return [name for name, kind in self.files.items() if kind in kinds]


COURSE = (
    Notebook("00", "environment_check", "environment check",
             "versions, your hardware tier and what the course does on it; a 2-rank all-reduce",
             {"check_allreduce.py": LAUNCHER}, browser={"SMOKE": False}),
    Notebook("01", "why_is_my_second_gpu_idle", "why is my second GPU idle?",
             "how `nn.DataParallel` scatters, replicates, gathers and reduces on device 0, and "
             "why device 0 carries more memory and work (measured)",
             {"ddp_same_model.py": LAUNCHER},
             test_ranks=(2, 3)),
    Notebook("02", "processes_ranks_and_collectives", "processes, ranks and collectives",
             "ranks, process groups and the collectives, varied live on a pool of ranks; a "
             "ring all-reduce you write; the alpha-beta cost model",
             {"ring_allreduce.py": EXERCISE, "allreduce_bench.py": LAUNCHER},
             browser={"NPROC": 3}, test_ranks=(3, 2)),
    Notebook("03", "your_first_ddp_run", "your first DDP run",
             "the minimal DDP program, in its `mp.spawn` and `torchrun` forms, on your tier",
             {"ddp_spawn_classic.py": SPAWNS, "ddp_first_run.py": LAUNCHER},
             browser={"NPROC": 3}, test_ranks=(3, 1)),
    Notebook("04", "a_real_ddp_training_loop", "a real DDP training loop",
             "`DistributedSampler` and `set_epoch`, rank-0 logging and TensorBoard, atomic "
             "checkpoints and resume, all-reduced evaluation",
             {"train_step1_data.py": LAUNCHER, "train_step2_logging.py": LAUNCHER,
              "train_step3_checkpoints.py": LAUNCHER, "train_step4_evaluation.py": LAUNCHER},
             browser={"NPROC": 2}, test_ranks=(2, 3)),
    Notebook("05", "accumulation_mixed_precision_and_the_proof",
             "accumulation, mixed precision and the proof",
             "`no_sync` accumulation, autocast and `torch.compile`, and DDP == one process "
             "with the global batch, proved in float64",
             {"train_step5_accumulation.py": LAUNCHER, "train_step6_amp_compile.py": LAUNCHER,
              "ddp_equivalence.py": LAUNCHER}, browser={"NPROC": 3}, test_ranks=(3,)),
    Notebook("06", "dp_vs_ddp_measured", "DP vs DDP, measured",
             "throughput and memory of one process, DataParallel and DDP side by side; "
             "scaling against the alpha-beta model; buckets and overlap",
             {"ddp_bench.py": LAUNCHER}, browser={"NPROC": 2}),
    Notebook("07", "build_ddp_yourself", "build DDP yourself",
             "DDP written by hand in three steps, each checked against torch's DDP, then raced",
             {"check_my_ddp.py": CHECKER, "my_ddp_naive.py": EXERCISE,
              "my_ddp_overlapped.py": EXERCISE, "my_ddp_bucketed.py": EXERCISE,
              "my_ddp_bench.py": LAUNCHER}, test_ranks=(2, 1, 3, 4)),
    Notebook("08", "pitfalls_and_debugging", "pitfalls and debugging: hangs and desyncs",
             "a hang, a desync and a collective mismatch reproduced under a timeout, located "
             "and fixed; printing from ranks",
             {"pitfall_hang.py": BROKEN, "pitfall_hang_fixed.py": LAUNCHER,
              "pitfall_desync.py": BROKEN, "collective_mismatch.py": BROKEN,
              "pitfall_desync_fixed.py": LAUNCHER, "print_ranks.py": LAUNCHER,
              "pitfall_logging.py": BROKEN},
             browser={"NPROC": 3}, test_ranks=(3,)),
    Notebook("09", "pitfalls_in_real_training", "pitfalls in real training",
             "unused parameters, BatchNorm across ranks, `set_epoch` and padding, uneven "
             "inputs and `Join`; an exercise with two planted bugs",
             {"pitfall_unused.py": BROKEN, "pitfall_unused_fixed.py": LAUNCHER,
              "batchnorm_stats.py": LAUNCHER, "sampler_forgot_set_epoch.py": LAUNCHER,
              "sampler_fixed.py": LAUNCHER, "pitfall_uneven.py": BROKEN,
              "pitfall_uneven_fixed.py": LAUNCHER, "pitfalls_exercise.py": BROKEN},
             browser={"NPROC": 2}, test_ranks=(2, 3)),
    Notebook("10", "beyond_one_machine", "beyond one machine",
             "two nodes and their rendezvous, a killed worker restarted and compared in "
             "float64, elastic jobs, Slurm, Kubernetes, the course container",
             {"multinode_train.py": LAUNCHER}),
    Notebook("11", "beyond_ddp_sharding", "beyond DDP: sharding",
             "where a rank's memory goes; ZeRO-1 and FSDP2 against DDP: bytes per rank, step "
             "time, the same trained parameters; ZeRO-1 written by hand; distributed checkpoints",
             {"train_step7_sharding.py": LAUNCHER, "my_zero1.py": EXERCISE,
              "check_my_zero1.py": CHECKER}, browser={"NPROC": 3}, test_ranks=(3, 2)),
    Notebook("12", "beyond_data_parallelism", "beyond data parallelism",
             "Megatron's MLP split written by hand; tensor and pipeline parallelism by hand and "
             "with torch, the bubble, FSDP x TP on a 2-D mesh, a transformer memory calculator",
             {"my_megatron_mlp.py": EXERCISE,
              "check_megatron_mlp.py": CHECKER, "tensor_parallel.py": LAUNCHER,
              "pipeline_parallel.py": LAUNCHER, "fsdp_tp_2d.py": MESH},
             browser={"NPROC": 2}, test_ranks=(2, 3)),
)  # fmt: skip


def notebook(number: str) -> Notebook:
    """The row of notebook ``number`` ("03")."""
    (row,) = [nb for nb in COURSE if nb.number == number]
    return row


def launcher_kinds() -> dict[str, str]:
    """Every file of launchers/ (by name) -> its kind."""
    return {name: kind for nb in COURSE for name, kind in nb.files.items()}


def course_map() -> str:
    """The README's course map, a row per notebook."""
    rows = [f"| {nb.number} | [{nb.title}](notebooks/{nb.stem}.ipynb) | {nb.learn} |"
            for nb in COURSE]  # fmt: skip
    return "\n".join(["| nb | notebook | you leave knowing |", "|---|---|---|", *rows])
