"""Runs the prepare steps (steps.py) over a launch's context and assembles what the runtime starts: one code path
for the cold start (attempt/planner.py) and the warm spare (attempt/spare.py)."""

from __future__ import annotations

from typing import Sequence

from ..os_seam.oscalls import HOST_OS, OsCalls
from ..runtimes.base import LaunchSpec
from ..access.owner import owner_env
from .context import LaunchContext, Role
from .contributions import Env, EnvDefaults, Refusal, ScrubEnv
from .steps import STEPS, Step


def prepare(ctx: LaunchContext, oscalls: OsCalls = HOST_OS, steps: Sequence[Step] = STEPS) -> LaunchSpec | Refusal:
    """The launch's spec, or the first step's refusal (the steps after it do not run)."""
    env: dict[str, str] = {}
    for step in steps:
        got = step(ctx, oscalls)
        if isinstance(got, Refusal):
            return got
        if isinstance(got, Env):
            env.update(got.values)
        elif isinstance(got, EnvDefaults):
            for k, v in got.values.items():
                env.setdefault(k, v)
        elif isinstance(got, ScrubEnv):
            env = owner_env(env, got.owner, got.job_environment)
    spare = ctx.role == Role.SPARE
    return LaunchSpec(job=ctx.cfg, argv=list(ctx.argv), trainer_args=list(ctx.trainer_args), env=env, cwd=ctx.cwd,
                      log_path=ctx.log_path, attempt=ctx.attempt, token=ctx.token, caches=ctx.caches,
                      spare=spare and ctx.cfg.in_container, container_argv=ctx.container_argv,
                      same_path_mounts=ctx.same_path_mounts, run_as=ctx.owner)
