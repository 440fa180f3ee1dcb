"""The built-in trainer's evaluation mode (issue 41): with ``ISAACD_EVAL=1`` its entry points (``isaacd-train``,
``isaacd_trainer.isaaclab20``, ``isaacd_trainer.isaaclab30 --rl_library rsl_rl``) parse the job's command line and
resolve its configs (Hydra overrides included) as for training, then call :func:`run_builtin` instead of training.

This is what Isaac Lab 3.0's play path does (``isaaclab_rl/entrypoints/backends/play_rsl_rl.py`` ``run``), on the
built-in env: build the env and the runner, ``runner.load(checkpoint)``, ``runner.get_inference_policy`` (the
policy's deterministic action: its mean), step. It counts episodes (:mod:`isaacd_trainer.eval_core`) instead of
looping until Ctrl-C, exports no JIT/ONNX policy and writes no run dir (the runner has no log dir). The env and torch
are seeded with ``ISAACD_EVAL_SEED``, so one checkpoint evaluated twice scores the same on the same host.
"""

from __future__ import annotations

import os
import sys
import time

from isaacd_trainer import eval_core

_STARTED = time.time()  # the evaluation's duration counts from the entry point's import, near the process start

def refuse_library(library: str) -> None:
    """skrl / rl_games: the error JSON and a nonzero exit."""
    eval_core.fail(eval_core.NOT_BUILT.format(library=library))


def run_builtin(task: str, env_cfg: dict, agent_cfg: dict) -> None:
    """Evaluate ``ISAACD_EVAL_CHECKPOINT`` on the built-in ``task``; the result JSON and ``Eval/*`` scalars, or the
    error JSON and ``SystemExit(EXIT_EVAL_ERROR)``."""
    try:
        settings = eval_core.EvalSettings.from_env()
    except eval_core.EvalSettingsError as e:
        eval_core.fail(str(e))
    if not os.path.isfile(settings.checkpoint):
        eval_core.fail(f"checkpoint {settings.checkpoint} does not exist")
    from isaacd_trainer import runtime  # torch, rsl_rl
    import torch

    if settings.video:
        video_reason = "no renderer: the built-in trainer's environments draw nothing"
    else:
        video_reason = None
    agent_cfg = dict(agent_cfg, device=settings.device, seed=settings.seed)
    runtime.configure_seed(settings.seed)
    env = runtime.make_env(task, env_cfg, settings.num_envs, settings.device, settings.seed)
    try:
        runner = runtime.make_runner(env, agent_cfg, log_dir=None, device=settings.device)
        try:
            runner.load(settings.checkpoint, map_location=settings.device)
        except Exception as e:  # torn, another task's, another library's: the reason, in one line
            eval_core.fail(f"checkpoint {settings.checkpoint} does not load: {type(e).__name__}: {e}")
        policy = runner.get_inference_policy(device=settings.device)
        counter = eval_core.EpisodeCounter(settings.num_envs, settings.episodes)
        with torch.inference_mode():
            obs = env.get_observations()
            while not counter.done:
                obs, rewards, dones, extras = env.step(policy(obs))
                if hasattr(policy, "reset"):
                    policy.reset(dones)  # recurrent policies, as upstream's play loop does
                counter.observe(rewards.tolist(), dones.tolist(), eval_core.success_of(extras))
        eval_core.finish(settings, counter.summary(), task=task, library="rsl_rl", started=_STARTED,
                         video_reason=video_reason)
    finally:
        env.close()
    sys.stdout.flush()
