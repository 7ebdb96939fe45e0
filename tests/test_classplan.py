"""The class plan: seat arithmetic, refusals with their fix, the JSON the hub reads, and that a
seat's environment makes the course find the tier the plan promised."""

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT

import coursekit
from coursekit import classplan, config
from coursekit.classplan import PlanError, plan


def test_eight_gpus_eight_seats_one_each():
    p = plan(8, 8, 64, 512)
    assert [s.gpu_ids for s in p.seats] == [[i] for i in range(8)]
    assert [s.cpus for s in p.seats] == [list(range(8 * i, 8 * i + 8)) for i in range(8)]
    assert {(s.tier, s.nproc, s.memory_gib, s.threads) for s in p.seats} == {
        ("single-gpu", 1, 64, 4)}
    assert p.seats[3].env["CUDA_VISIBLE_DEVICES"] == "3"
    assert p.seats[0].name == "seat01" and p.spare_cpus == []
    # notebooks that need 2 ranks run them on the CPU of a 1-GPU seat (configure's min_nproc)
    assert p.seats[0].notebooks["00_environment_check"] == classplan.RUNS
    assert "2 CPU ranks" in p.seats[0].notebooks["08_pitfalls_and_debugging"]


def test_eight_gpus_four_seats_two_each():
    p = plan(4, 8, 64, 512, gpus_per_seat=2)
    assert [s.gpu_ids for s in p.seats] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert {(s.tier, s.nproc, s.threads) for s in p.seats} == {("multi-gpu", 2, 8)}
    assert p.seats[1].env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert p.seats[0].notebooks["01_why_is_my_second_gpu_idle"] == classplan.RUNS
    assert "NCCL" in p.seats[0].notebooks["08_pitfalls_and_debugging"]
    assert "4 CPU ranks" in p.seats[0].notebooks["12_beyond_data_parallelism"]


def test_cpu_seats_share_two_cores():
    p = plan(3, 0, 2, 23)
    assert [s.cpus for s in p.seats] == [[0], [1], [0]]
    assert {(s.tier, s.nproc, s.threads) for s in p.seats} == {("cpu", 2, 1)}
    assert {s.env["CUDA_VISIBLE_DEVICES"] for s in p.seats} == {""}
    assert "3 seats share 2 cores: each run will be slower" in " ".join(p.notes)
    assert "1 core for 2 ranks" in " ".join(p.seats[0].notes)
    table = p.table()
    assert "seat03" in table and "3 seats share 2 cores" in table


def test_leftover_cores_and_gpus_are_named():
    p = plan(3, 4, 8, 64)
    assert [s.cpus for s in p.seats] == [[0, 1], [2, 3], [4, 5]] and p.spare_cpus == [6, 7]
    assert any("1 GPU (3) left to no seat" in n for n in p.notes)


def test_gpu_ids_pick_the_cards():
    p = plan(2, 2, 4, 16, gpu_ids=[5, 7])
    assert [s.gpu_ids for s in p.seats] == [[5], [7]]


@pytest.mark.parametrize("args, kwargs, words", [
    ((16, 8, 64, 512), {}, ["16 seats need 16 GPUs, this server has 8", "--seats 8",
                            "--gpus-per-seat 0 to seat everyone on the CPU tier"]),
    ((4, 8, 64, 512), {"gpus_per_seat": 3}, ["need 12 GPUs", "--seats 2", "--gpus-per-seat 2"]),
    ((2, 2, 4, 16), {"gpu_ids": [1, 1]}, ["--gpu-ids", "GPU 1 twice", "Duplicate GPU detected"]),
    ((2, 3, 4, 16), {"gpu_ids": [0, 1]}, ["--gpu-ids names 2 GPU(s) and --gpus says 3"]),
    ((8, 0, 16, 16), {}, ["--memory-gib 16", "2 GiB each", "2.5 GiB", "--seats 6"]),
    ((0, 0, 2, 16), {}, ["--seats=0"]),
    ((1, -1, 2, 16), {}, ["--gpus=-1"]),
    ((1, 0, 0, 16), {}, ["--cores=0"]),
    ((1, 0, 2, 0), {}, ["--memory-gib=0"]),
])  # fmt: skip
def test_a_plan_that_cannot_work_is_refused_with_its_fix(args, kwargs, words):
    with pytest.raises(PlanError) as e:
        plan(*args, **kwargs)
    for w in words:
        assert w in str(e.value)


def test_all_seats_on_the_cpu_tier_when_asked():
    p = plan(16, 8, 64, 512, gpus_per_seat=0)
    assert {(s.tier, s.nproc) for s in p.seats} == {("cpu", 2)}
    assert not any(s.gpu_ids for s in p.seats)


def test_the_cli_refuses_before_anything_starts():
    done = subprocess.run(
        [sys.executable, "-m", "coursekit.classplan", "--seats", "16", "--gpus", "8", "--cores",
         "64", "--memory-gib", "512"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert "16 seats need 16 GPUs, this server has 8: pass --seats 8" in done.stderr


def test_the_cli_prints_a_table_and_json(capsys):
    assert classplan.main(["--seats", "3", "--gpus", "0", "--cores", "2",
                           "--memory-gib", "23"]) == 0
    assert "seat01" in capsys.readouterr().out
    assert classplan.main(["--seats", "2", "--gpus", "2", "--cores", "4", "--memory-gib", "16",
                           "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"hardware", "memory_floor_gib", "spare_cpus", "notes", "seats"}
    assert doc["hardware"] == {"gpus": 2, "gpu_ids": [0, 1], "cores": 4, "memory_gib": 16}
    seat = doc["seats"][1]
    assert set(seat) == {"name", "gpu_ids", "cpus", "threads", "memory_gib", "tier", "nproc",
                         "notebooks", "env", "notes"}
    assert (seat["name"], seat["gpu_ids"], seat["cpus"], seat["tier"]) == (
        "seat02", [1], [2, 3], "single-gpu")
    assert seat["env"]["CUDA_VISIBLE_DEVICES"] == "1" and seat["env"]["OMP_NUM_THREADS"] == "1"
    assert len(seat["notebooks"]) == len(coursekit.course.COURSE)


def test_a_cpu_seat_env_makes_the_course_find_the_cpu_tier(monkeypatch):
    (seat,) = plan(1, 0, 2, 8).seats
    for name, value in seat.env.items():
        monkeypatch.setenv(name, value)
    setup = config.configure(quiet=True)
    assert (setup.tier, setup.nproc) == (seat.tier, seat.nproc) == ("cpu", 2)


@pytest.mark.parametrize("seats, gpus, per_seat", [(8, 8, None), (4, 8, 2), (2, 8, 4), (3, 0, 0)])
def test_every_seat_env_gives_the_tier_the_plan_promised(seats, gpus, per_seat):
    """A GPU seat's tier, decided as configure decides it, from the GPUs its environment shows
    (CUDA_VISIBLE_DEVICES: torch.cuda.device_count() counts those ids)."""
    for s in plan(seats, gpus, 64, 512, gpus_per_seat=per_seat).seats:
        _, tier, nproc = config.tier_for(classplan.gpus_in(s.env))
        assert (tier, nproc) == (s.tier, s.nproc)
        assert int(s.env["OMP_NUM_THREADS"]) * max(s.nproc, 2) <= len(s.cpus)


def test_the_tier_limits_still_stand_in_the_course():
    """Each tier limit the plan prints names the line of the course that decides it."""
    for number, _, _, path, text in classplan.TIER_LIMITS:
        assert text in (ROOT / path).read_text(), (number, path, text)
    assert "setup.n_gpus >= 4" in coursekit.course.notebook("12").path.read_text()
    assert classplan.min_nproc(coursekit.course.notebook("08")) == 2
    assert classplan.min_nproc(coursekit.course.notebook("00")) == 1


def test_this_machine_is_the_default():
    gpus, cores, memory = classplan.this_machine()
    assert cores == os.cpu_count() and memory > 0 and gpus >= 0
