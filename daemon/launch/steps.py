"""The prepare steps of a launch, in order: each one concern, reading the context (context.py) and answering with a
typed contribution (contributions.py) or None. The cold start and the spare run this same list (pipeline.py).

A new launch concern is one function here and its place in STEPS (and, if it needs data, a field of the context).
Every OS call goes through the seam (`oscalls`), so the fake kernel of the tests sees all of it."""

from __future__ import annotations

from typing import Callable

from ..caches import compile_caches
from ..history.store import job_log_path
from ..os_seam.oscalls import OsCalls
from ..os_seam.owned_dirs import OwnershipRefused
from ..runtimes import trainer_command
from ..access.owner import OWNER_RUNTIMES
from ..os_seam.owner_dirs import prepare_owned
from ..runtimes.container_spec import hand_dirs_to_container_user
from .context import LaunchContext
from .contributions import Contribution, Env, EnvDefaults, Refusal, ScrubEnv
from .evaluation import eval_environment
from .exploit import exploit_values

Step = Callable[[LaunchContext, OsCalls], Contribution]


def owner_may_run_here(ctx: LaunchContext, oscalls: OsCalls) -> Contribution:
    """An owner's job runs only where isaacd can start a process as that user (issue 32)."""
    cfg = ctx.cfg
    if ctx.owner is not None and cfg.runtime not in OWNER_RUNTIMES:
        return Refusal(f'cannot start: owner: runtime = "{cfg.runtime}" runs trainers as its own user, not as '
                       f'{ctx.owner.name}; use runtime = "process", "podman" or "systemd"')
    return None


def mig_instance_known(ctx: LaunchContext, oscalls: OsCalls) -> Contribution:
    """A trainer on the host that the queue placed on a MIG instance is told it by its UUID (config/placed.py: only a
    gpu_memory job goes on one). While the GPU inventory has not listed it (NVML not read yet), no launch: CUDA with
    no CUDA_VISIBLE_DEVICES could pick another job's instance. Retried after a backoff, not counted in the crash-loop
    window (the trainer is not to blame)."""
    cfg = ctx.cfg
    if cfg.in_container or cfg.gpu_memory is None or not isinstance(cfg.gpus, list):
        return None
    mig = [str(g) for g in cfg.gpus if isinstance(g, str) and ":" in g]
    if mig and not cfg.environment.get("CUDA_VISIBLE_DEVICES", "").startswith("MIG-"):
        return Refusal(f"cannot start: MIG instance {', '.join(mig)}: its UUID is not known yet (the GPU collector has "
                       "not listed it), and CUDA_VISIBLE_DEVICES needs it", settle=None, crash_loop=False)
    return None


def owners_directories(ctx: LaunchContext, oscalls: OsCalls) -> Contribution:
    """Its log_root, experiment dir, workdir, caches and log the owner's, no symlink followed (os_seam/owned_dirs.py);
    then the role's own: a spare's FIFO dir and staging, handed deepest first (each chowned while its parent is still
    root's), and the dirs made for it (a container's outputs/)."""
    owner = ctx.owner
    if owner is None:
        return None
    problem = prepare_owned(oscalls, owner, ctx.state_dir, ctx.cfg.log_root, ctx.experiment_dir, ctx.workdir,
                            [c.host for c in ctx.caches], job_log_path(ctx.state_dir, ctx.cfg.name))
    if problem is not None:
        return Refusal(f"cannot start: {problem}")
    try:
        for d in reversed(ctx.owner_hands_over):
            oscalls.hand_over(d, owner)
        for d in ctx.owner_makes:
            oscalls.make_owned_dir(d, owner)
    except (OSError, OwnershipRefused) as exc:
        return Refusal(f"cannot start: state_dir: {exc}")
    return None


def compile_cache_dirs(ctx: LaunchContext, oscalls: OsCalls) -> Contribution:
    """The compile caches exist and are writable: a directory isaacd cannot write is the operator's to fix."""
    problem = compile_caches.prepare(list(ctx.caches))
    return Refusal(f"cannot start: compile_cache: {problem}") if problem is not None else None


def container_users_directories(ctx: LaunchContext, oscalls: OsCalls) -> Contribution:
    """A container of the supervisor's own user runs as its image's user (Isaac Lab 3 kit-less images: uid 1000),
    which must write the caches and the role's own dirs (an owner's were handed above)."""
    if ctx.owner is None and ctx.cfg.in_container:
        hand_dirs_to_container_user(oscalls, ctx.cfg, None, [c.host for c in ctx.caches] + list(ctx.container_user_dirs))
    return None


def side_channel(ctx: LaunchContext, oscalls: OsCalls) -> Contribution:
    """Its events file (the shim's side channel) new and empty, and writable by whom the process runs as: made for an
    owner (no symlink followed), its dir handed to a container's user (Isaac Lab 3 images run as uid 1000). A number
    reused after a lost history must not replay old news."""
    path = ctx.events
    if path is None:
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        if ctx.owner is not None:
            oscalls.create_owned_file(path, ctx.owner)
        elif ctx.cfg.in_container:
            hand_dirs_to_container_user(oscalls, ctx.cfg, None, [path.parent])
    except (OSError, OwnershipRefused) as exc:
        return Refusal(f"not starting: the {ctx.role.value}'s events file {path}: {exc}", settle=None)
    return None


def trainer_environment(ctx: LaunchContext, oscalls: OsCalls) -> Contribution:
    """isaacd's variables (side channel, token, snapshots, W&B run, caches) and the job's own `environment`."""
    return Env(trainer_command.trainer_env(ctx.cfg, ctx.events, ctx.token, wandb_run=ctx.wandb_run,
                                           caches=list(ctx.caches)))


def owners_environment(ctx: LaunchContext, oscalls: OsCalls) -> Contribution:
    """An owner's process inherits none of the supervisor's environment (its credentials) beyond a few variables."""
    return ScrubEnv(ctx.owner, ctx.cfg.environment) if ctx.owner is not None else None


def node_backup_environment(ctx: LaunchContext, oscalls: OsCalls) -> Contribution:
    """A Ray node without the shared log_root fetches and uploads itself (backup/remote.py), as this token."""
    return Env(ctx.node_env) if ctx.node_env else None


def role_environment(ctx: LaunchContext, oscalls: OsCalls) -> Contribution:
    """What only this role sets (a spare's FIFO, device, preload list, booted command line), after the scrub."""
    return Env(ctx.role_env) if ctx.role_env else None


def role_environment_defaults(ctx: LaunchContext, oscalls: OsCalls) -> Contribution:
    """What this role sets only where the job has not (a booted spare's W&B placeholder)."""
    return EnvDefaults(ctx.role_env_defaults) if ctx.role_env_defaults else None


STEPS: tuple[Step, ...] = (owner_may_run_here, mig_instance_known, owners_directories, compile_cache_dirs,
                           container_users_directories, side_channel, trainer_environment, owners_environment,
                           node_backup_environment, exploit_values, eval_environment, role_environment,
                           role_environment_defaults)
