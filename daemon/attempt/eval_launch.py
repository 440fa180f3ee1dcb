"""An evaluation's launch context (daemon/launch/context.py, Role.EVAL; issue 41): the job's cold start with no resume
and no W&B run, its own token and output file, and what it evaluates (`EvalLaunch`, set as variables by the launch
pipeline's `eval_environment` step). Prepared on the eval keeper's worker (attempt/evals.py), as a spare's is."""

from __future__ import annotations

from pathlib import Path

from ..caches import compile_caches
from ..config.eval import EvalConfig
from ..config.schema import JobConfig
from ..launch.context import EvalLaunch, LaunchContext, Role
from ..evals.result import result_path
from ..os_seam.oscalls import RunAs
from ..runtimes import trainer_command
from ..workflows import Resolved
from ..workflows.launcher import Program


def eval_log_path(state_dir: Path, job: str) -> Path:
    """The job's evaluations' output, each appended in turn (its start offset is in the eval's handle): beside the
    job's own log (history/store.py job_log_path), never in it, so `isaacd logs` and the exit reasons read the
    trainer's output alone."""
    return Path(state_dir) / "logs" / f"{job}.eval.log"


def run_dir_of(checkpoint: Path, resolved: Resolved) -> Path:
    """The run dir a checkpoint lies in (skrl keeps them in `<run>/checkpoints/`, rl_games in `<run>/nn/`)."""
    return checkpoint.parent.parent if resolved.workflow.layout.subdir else checkpoint.parent


def first_gpu(cfg: JobConfig) -> str:
    """The job's first GPU as CUDA_VISIBLE_DEVICES spells it: its first claimed GPU (a placed job's are named:
    config/placed.py), else its device's index."""
    if isinstance(cfg.gpus, list) and cfg.gpus:
        visible = cfg.environment.get("CUDA_VISIBLE_DEVICES", "")
        if isinstance(cfg.gpus[0], str) and ":" in cfg.gpus[0] and visible.startswith("MIG-"):
            return visible.split(",")[0]  # a MIG instance the queue placed it on (issue 42): CUDA takes its UUID only
        return str(cfg.gpus[0])
    _, _, index = cfg.device.partition(":")
    return index or "0"


def evaluation(ev: EvalConfig, cfg: JobConfig, checkpoint: Path, iteration: int, resolved: Resolved,
               on_gpu: bool, beside_pids: tuple[int, ...] = ()) -> EvalLaunch:
    run_dir = run_dir_of(checkpoint, resolved)
    return EvalLaunch(checkpoint=str(checkpoint), iteration=iteration, episodes=ev.episodes, num_envs=ev.envs,
                      seed=ev.seed, gpu=first_gpu(cfg) if on_gpu else None, result=str(result_path(checkpoint)),
                      tb_dir=str(run_dir / "eval"), video=ev.video_length if ev.video else 0,
                      video_dir=str(run_dir / "eval" / "videos"), beside_pids=beside_pids)


def eval_context(cfg: JobConfig, state_dir: Path, resolved: Resolved, program: Program, launch: EvalLaunch,
                 token: str, owner: RunAs | None) -> LaunchContext:
    """The evaluation's context: the attempt's cold start (the job's flags with no checkpoint: the shim puts the
    evaluated one in), in the job's workdir, as the job's owner."""
    args = trainer_command.trainer_args(cfg, None, None, resolved)
    return LaunchContext(
        role=Role.EVAL, cfg=cfg, state_dir=state_dir, owner=owner, token=token, events=None,
        caches=tuple(compile_caches.for_job(cfg, state_dir)), experiment_dir=resolved.workflow.experiment_dir(cfg),
        workdir=trainer_command.workdir_path(cfg, state_dir), cwd=trainer_command.workdir(cfg, state_dir),
        log_path=eval_log_path(state_dir, cfg.name), argv=tuple(program.argv(args)), trainer_args=tuple(args),
        evaluation=launch)
