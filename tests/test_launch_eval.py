"""An evaluation's launch (issue 41, Role.EVAL): the job's cold start with no resume and no W&B run, its own token and
output file, and the design's ISAACD_EVAL_* variables from one prepare step, whatever the job's own environment says
of the GPU. Run through the same pipeline as an attempt's, on the fake kernel: no process."""

from __future__ import annotations

from pathlib import Path

from test_attempt_planner import JOB, World

from isaacd.attempt.eval_launch import eval_context, eval_log_path, evaluation
from isaacd.config.schema import parse_config
from isaacd.launch import evaluation as contract
from isaacd.launch.context import Role
from isaacd.launch.contributions import Refusal
from isaacd.launch.pipeline import prepare
from isaacd.launch.steps import STEPS
from isaacd.workflows import resolve
from isaacd_trainer import eval_core

from os_fakes import FakeOs

EVAL = '[jobs.eval]\nepisodes = 12\nnum_envs = 4\nseed = 7\n'


def spec_for(tmp_path: Path, job: str, iteration: int = 40):  # noqa: ANN201
    w = World(tmp_path, job)
    resolved = resolve(w.cfg)
    ckpt = w.run_dir / f"model_{iteration}.pt"
    e = w.cfg.eval
    assert e is not None
    launch = evaluation(e, w.cfg, ckpt, iteration, resolved, e.on_gpu)
    ctx = eval_context(w.cfg, w.state_dir, resolved, resolved.program(in_container=False), launch, "evtok", None)
    spec = prepare(ctx, FakeOs())
    assert ctx.role == Role.EVAL and not isinstance(spec, Refusal)
    return w, ckpt, spec


def test_an_evaluation_is_the_cold_start_with_its_checkpoint_and_settings_as_variables(tmp_path: Path):
    w, ckpt, spec = spec_for(tmp_path, JOB + 'environment = { CUDA_VISIBLE_DEVICES = "3" }\n' + EVAL)
    env = spec.env
    assert {k: env[k] for k in env if k.startswith("ISAACD_EVAL")} == {
        "ISAACD_EVAL": "1", "ISAACD_EVAL_CHECKPOINT": str(ckpt), "ISAACD_EVAL_ITERATION": "40",
        "ISAACD_EVAL_EPISODES": "12", "ISAACD_EVAL_NUM_ENVS": "4", "ISAACD_EVAL_SEED": "7",
        "ISAACD_EVAL_DEVICE": "cpu", "ISAACD_EVAL_RESULT": f"{ckpt}.eval.json",
        "ISAACD_EVAL_TB_DIR": str(w.run_dir / "eval"), "ISAACD_EVAL_VIDEO": "0",
        "ISAACD_EVAL_VIDEO_DIR": str(w.run_dir / "eval" / "videos"), "ISAACD_EVAL_NICE": "0"}
    # on the CPU it sees no GPU, whatever the job's own environment names (the step runs after it)
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    # it never holds training back: one OpenMP/MKL thread, whatever the job's environment says for training
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "1"
    assert env["ISAACD_EVAL_NICE"] == "0"  # beside a CPU training (every core busy) nice 19 would starve it
    # its own token, no side channel, no W&B run; the job's flags without any resume; its own output file
    assert env["ISAACD_LAUNCH_TOKEN"] == "evtok" and spec.token == "evtok"
    assert "ISAACD_SHIM_EVENTS" not in env and "WANDB_RUN_ID" not in env
    assert "--resume" not in spec.argv and "--checkpoint" not in spec.argv and "--task" in spec.argv
    assert spec.log_path == eval_log_path(w.state_dir, "cp") != w.state_dir / "logs" / "cp.log"
    assert not spec.spare


def test_a_gpu_evaluation_sees_the_jobs_first_gpu_as_its_cuda_0(tmp_path: Path):
    job = JOB.replace('num_envs = 1024\n', 'num_envs = 1024\ndevice = "cuda:2"\ngpus = [2, 5]\nnproc_per_node = 1\n')
    _, _, spec = spec_for(tmp_path, job + '[jobs.eval]\ngpu_memory = "4GiB"\nvideo = true\nvideo_length = 50\n')
    assert spec.env["CUDA_VISIBLE_DEVICES"] == "2" and spec.env["ISAACD_EVAL_DEVICE"] == "cuda:0"
    assert spec.env["ISAACD_EVAL_NICE"] == "19"  # beside a GPU training: it yields the CPU to the trainer
    assert spec.env["ISAACD_EVAL_VIDEO"] == "50" and spec.env["ISAACD_EVAL_NUM_ENVS"] == "100"  # = episodes


def test_the_variables_are_the_ones_the_trainer_reads_and_other_launches_get_none(tmp_path: Path):
    assert (contract.EVAL_ENV, contract.EVAL_CHECKPOINT_ENV, contract.EVAL_ITERATION_ENV, contract.EVAL_EPISODES_ENV,
            contract.EVAL_NUM_ENVS_ENV, contract.EVAL_SEED_ENV, contract.EVAL_DEVICE_ENV, contract.EVAL_RESULT_ENV,
            contract.EVAL_TB_DIR_ENV, contract.EVAL_VIDEO_ENV, contract.EVAL_VIDEO_DIR_ENV) == (
        eval_core.EVAL_ENV, eval_core.CHECKPOINT_ENV, eval_core.ITERATION_ENV, eval_core.EPISODES_ENV,
        eval_core.NUM_ENVS_ENV, eval_core.SEED_ENV, eval_core.DEVICE_ENV, eval_core.RESULT_ENV, eval_core.TB_DIR_ENV,
        eval_core.VIDEO_ENV, eval_core.VIDEO_DIR_ENV)
    assert contract.eval_environment in STEPS  # one step of the one pipeline
    w = World(tmp_path, JOB + EVAL)
    plan = w.plan()
    assert not any(k.startswith("ISAACD_EVAL") for k in plan.spec.env)  # an attempt of a job with [jobs.eval]
    assert parse_config(JOB + EVAL, "t.toml", tmp_path).jobs[0].eval is not None
