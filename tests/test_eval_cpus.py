"""An evaluation beside a GPU training keeps off the trainer's CPU and its SMT siblings (issue 41: on an H100 the
trainer was bound by one core and an evaluation beside it cost 0.975x; nice 19 alone orders one CPU's queue, not a
sibling sharing the trainer's core). The CPU choice is a pure function of a topology and the training's CPUs; the
daemon names the training's pids through the launch step; the shim pins itself before its heavy imports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_eval_keeper import Eval
from test_attempt_planner import JOB
from test_spare_mode import gpu_snapshot

from isaacd.attempt.eval_effects import StartEval
from isaacd.config.sizes import GiB
from isaacd.launch import evaluation as contract
from isaacd_trainer import eval_core as C

# a 16-vCPU VM whose vCPU n and n + 8 are one core's two hardware threads
SIBLINGS16 = {n: {n % 8, n % 8 + 8} for n in range(16)}


def test_the_evaluation_keeps_off_the_trainers_core_and_its_smt_sibling():
    assert C.cpus_beside(set(range(16)), {3}, SIBLINGS16) == set(range(16)) - {3, 11}
    # two training threads on two cores: both cores left out
    assert C.cpus_beside(set(range(16)), {3, 12}, SIBLINGS16) == set(range(16)) - {3, 11, 4, 12}
    # no topology known: the busy CPU itself is still left out
    assert C.cpus_beside({0, 1, 2}, {1}, {}) == {0, 2}


def test_where_only_the_siblings_are_left_it_takes_them_and_a_one_cpu_box_stays_as_it_was():
    assert C.cpus_beside({0, 8}, {0}, SIBLINGS16) == {8}  # better a sibling than the trainer's own CPU
    assert C.cpus_beside({5}, {5}, SIBLINGS16) == {5}  # nowhere else to run: nice alone does the yielding
    assert C.cpus_beside({0, 1}, set(), SIBLINGS16) == {0, 1}  # no training running: nothing to avoid


def test_the_kernels_cpu_lists_are_read_and_a_malformed_part_is_left_out():
    assert C.parse_cpu_list("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert C.parse_cpu_list("5") == {5} and C.parse_cpu_list("") == set() and C.parse_cpu_list("x,2") == {2}


def test_the_daemon_names_the_gpu_trainings_pids_and_the_trainer_reads_the_same_variable(tmp_path: Path):
    assert contract.EVAL_BESIDE_PIDS_ENV == C.BESIDE_PIDS_ENV
    job = JOB.replace('num_envs = 1024\n', 'num_envs = 1024\ndevice = "cuda:1"\ngpus = [1]\n')
    t = Eval(tmp_path, its=(0,), job=job + '[jobs.eval]\ngpu_memory = "4GiB"\n')
    t.observer.live.pids = [4242, 4243]  # the trainer and a child of it, as the runner's observer scanned them
    t.keeper.gpu_snapshot = lambda: gpu_snapshot({"1": (70 * GiB, 80 * GiB, {})})
    started = t.tick()
    assert [type(e) for e in started] == [StartEval]
    assert started[0].spec.env["ISAACD_EVAL_BESIDE_PIDS"] == "4242 4243"
    assert started[0].spec.env["ISAACD_EVAL_NICE"] == "19"


def test_beside_a_cpu_training_no_core_is_kept_off(tmp_path: Path):
    t = Eval(tmp_path, its=(0,))
    t.observer.live.pids = [4242]  # a CPU training keeps every core busy: there is no core to keep off
    started = t.tick()
    assert [type(e) for e in started] == [StartEval]
    assert "ISAACD_EVAL_BESIDE_PIDS" not in started[0].spec.env


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to choose between")
def test_the_shim_pins_the_evaluation_off_the_cpu_the_training_runs_on():
    """A real 'training' process held on one CPU (asleep: its last CPU is the only one it may use), then the shim's
    start in a real interpreter: its affinity leaves that CPU out; pids that do not exist change nothing."""
    mine = sorted(os.sched_getaffinity(0))
    held = mine[0]
    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                               preexec_fn=lambda: os.sched_setaffinity(0, {held}))
    code = ("import os; from isaacd_trainer import shim_eval as E; E._yield_to_training(); "
            "print(sorted(os.sched_getaffinity(0)))")
    try:
        env = {**os.environ, "ISAACD_EVAL_NICE": "0", "ISAACD_EVAL_BESIDE_PIDS": str(trainer.pid)}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60,
                             env=env)
        got = eval(out.stdout.strip())  # noqa: S307 - a list of ints this test printed
        assert held not in got and got and set(got) < set(mine)
        assert f"off the training's CPUs [{held}]" in out.stderr
        for pids in ("999999999", "x"):  # gone or malformed: harmless, the affinity stays
            env["ISAACD_EVAL_BESIDE_PIDS"] = pids
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                 timeout=60, env=env)
            assert eval(out.stdout.strip()) == mine  # noqa: S307
    finally:
        trainer.kill()
        trainer.wait()
