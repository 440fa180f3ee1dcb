"""A warm spare's launch context (daemon/launch/context.py): what is the spare's own, as data for the launch pipeline
the attempt's cold start runs too. Its FIFO (control), events file and, booted, its staging dir with the fresh-start
command line it boots with (spare.py's docstring tells the protocol)."""

from __future__ import annotations

import json
from pathlib import Path

from isaacd_trainer.shim_protocol import (BOOTED_ARGV_ENV, SPARE_CONTROL_ENV, SPARE_DEVICE_ENV, SPARE_FLAG,
                                          SPARE_PLAIN_ENV, SPARE_PRELOAD_ENV, STAGING_ENV, STAGING_WORK)

from ..caches import compile_caches
from ..config.schema import JobConfig
from ..history.store import job_log_path
from ..launch.context import LaunchContext, Role
from ..os_seam.oscalls import RunAs
from ..runtimes import trainer_command
from ..runtimes.container_spec import HYDRA_OUTPUTS, container_args, container_device_arg
from ..workflows import Resolved
from ..workflows.launcher import Program
from .spare_mode import Mode

BOOTED_WANDB_PLACEHOLDER = "isaacd-booted-spare"  # never a run: the go replaces it before wandb.init
BUILTIN_PRELOAD = ["isaacd_trainer.cli", "isaacd_trainer.train_v2", "isaacd_trainer.runtime",
                   "isaacd_trainer.envs.cartpole", "hydra"]
# what Isaac Lab's skrl / rl_games train scripts import that holds no state (a module that is missing is reported
# in spare_ready's errors, not fatal); rsl_rl's runners are imported (and patched) for every rsl_rl spare
LIBRARY_PRELOAD = {"skrl": ["skrl.agents.torch.ppo", "skrl.trainers.torch", "hydra"],
                   "rl_games": ["rl_games.torch_runner", "rl_games.common.a2c_common", "hydra"]}


def spare_context(cfg: JobConfig, state_dir: Path, resolved: Resolved, program: Program,
                  mode: Mode, token: str, control: Path, events: Path, owner: RunAs | None,
                  events_dir: Path | None) -> tuple[LaunchContext, Path | None, list[str]]:
    """The spare's context, and (booted) its staging dir and boot flags. `resolved`: the job's workflow as its
    attempt resolved it (never probed again here); `events_dir`: the attempts' events dir, mounted into a container
    spare (None on the process runtime)."""
    in_container = cfg.in_container
    role_env = {SPARE_CONTROL_ENV: str(control),
                SPARE_DEVICE_ENV: container_device_arg(cfg) if in_container else cfg.device,
                SPARE_PRELOAD_ENV: ",".join((BUILTIN_PRELOAD if cfg.workflow == "builtin" else
                                             LIBRARY_PRELOAD.get(cfg.workflow, [])) + list(cfg.spare_preload))}
    if program.plain_spare:
        role_env[SPARE_PLAIN_ENV] = "1"  # skrl / rl_games: no rsl_rl to import, no shim after go
    assert program.spare_head is not None
    workdir = trainer_command.workdir(cfg, state_dir)
    cwd, log_path = workdir, job_log_path(state_dir, cfg.name)
    staging: Path | None = None
    boot_args: list[str] = []
    defaults: dict[str, str] = {}
    if mode == "booted":
        staging, boot_args = control.parent / token, trainer_command.trainer_args(cfg, None, resolved=resolved)
        cwd, log_path = stage_booted(staging)
        role_env[BOOTED_ARGV_ENV] = json.dumps(program.go_argv(container_args(cfg, boot_args) if in_container
                                                               else boot_args))
        role_env[STAGING_ENV] = str(staging)
        # with agent.logger=wandb, upstream's train_rsl_rl._run pins a W&B run id at boot (isaaclab_rl/utils/
        # wandb.py announce_new_run: `wandb.util.generate_id()` unless WANDB_RUN_ID is set; wandb 0.31 has no
        # generate_id, so the boot died). No W&B run starts before learn() (rsl_rl's logger calls wandb.init
        # there), and the go brings the attempt's WANDB_RUN_ID/WANDB_RESUME (go_message): a placeholder here
        defaults["WANDB_RUN_ID"] = BOOTED_WANDB_PLACEHOLDER
    spare_head = tuple(program.spare_head + [SPARE_FLAG])
    base = control.parent
    ctx = LaunchContext(
        role=Role.SPARE, cfg=cfg, state_dir=state_dir, owner=owner, token=token,
        events=events, caches=tuple(compile_caches.for_job(cfg, state_dir)), experiment_dir=resolved.workflow.experiment_dir(cfg),
        workdir=workdir, cwd=cwd, log_path=log_path, argv=spare_head, container_argv=spare_head,
        # an owner's: its staging handed over (deepest first), a container's outputs/ in a booted spare's cwd (Hydra
        # writes it there: container_spec.from_launch); a numeric container.user's: its dirs, FIFO and staging
        owner_hands_over=tuple(staging_dirs(staging)),
        owner_makes=(cwd / HYDRA_OUTPUTS,) if in_container and staging is not None else (),
        container_user_dirs=(base, control, *staging_dirs(staging), *([events_dir] if events_dir else [])),
        role_env=role_env, role_env_defaults=defaults,
        same_path_mounts=(base, events_dir) if events_dir is not None else ())
    return ctx, staging, boot_args


def stage_booted(staging: Path) -> tuple[Path, Path]:
    """A booted spare's staging dir: (its cwd, `work/` with a real `logs/`; its output, `boot.log`)."""
    work = staging / STAGING_WORK
    (work / "logs").mkdir(parents=True, exist_ok=True)
    return work, staging / "boot.log"


def staging_dirs(staging: Path | None) -> list[Path]:
    """A booted spare's staging and the dirs its boot writes into (handed to a numeric container.user)."""
    return [] if staging is None else [staging, staging / STAGING_WORK, staging / STAGING_WORK / "logs"]
