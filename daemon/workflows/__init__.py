"""Trainer contracts: which flags, run layout and numbering a job's train script speaks.

`resolve(job)` is the one entry point: it detects the Isaac Lab generation (or takes the
`isaaclab_version` key), picks the contract module and checks what can be checked before a
launch (script exists, generation known). Errors are `WorkflowError(key, message)` so
`check-config` and the runner can name the config key to fix. A pip-installed Isaac Lab's version is
asked of the job's launcher (`installed.py`, on a thread of its own): the supervisor's tick passes
`wait_probe=False` and gets `installed.ProbePending` until it has answered; the client waits.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..config.schema import JobConfig
from .base import Generation, Workflow, WorkflowError, regex_literal
from .detect import detect_generation, resume_flavour
from .installed import ProbePending, installed_isaaclab
from .launcher import Program, build_program, pip_installed, train_script
from .rl_games import RlGames
from .rsl_rl import RslRl
from .skrl import Skrl

__all__ = ["Resolved", "Workflow", "WorkflowError", "Generation", "ProbePending", "resolve", "runs_workflow",
           "regex_literal"]


@dataclass(frozen=True)
class Resolved:
    job: JobConfig
    workflow: Workflow
    generation: Generation

    def program(self, *, in_container: bool, python: str | None = None) -> Program:
        return build_program(self.job, self.workflow.library, self.generation, in_container=in_container,
                             python=python)


def resolve(job: JobConfig, *, wait_probe: bool = True) -> Resolved:
    """The job's contract. `wait_probe=False` (the supervisor's tick): a launcher whose Isaac Lab version probe has
    not answered yet raises `ProbePending` (a WorkflowError naming `launcher`) instead of waiting for it."""
    gen = detect_generation(job, wait_probe=wait_probe)
    wf = _workflow(job, gen)
    in_container = job.in_container
    if pip_installed(job) and not in_container:
        # also when isaaclab_version names the generation: the module must be there. As the job's owner: the
        # launcher is theirs to name (issue 32)
        installed_isaaclab(job.launcher or [], job.owner, wait=wait_probe)
    if not in_container:
        _check_asset_root(job)
    resolved = Resolved(job, wf, gen)
    resolved.program(in_container=in_container)  # raises for a missing script or launcher
    return resolved


def runs_workflow(job: JobConfig) -> Workflow:
    """The job's workflow for reading its runs on disk (experiment dir, run-dir names, checkpoint layout), never
    waiting for its launcher's probe: history/rebuild.py reads them as a runner is made, under the supervisor's lock
    on a reload. None of them depends on the Isaac Lab generation, and a pip install is 3.x (launcher.py)."""
    try:
        return resolve(job, wait_probe=False).workflow
    except ProbePending:
        return _workflow(job, Generation(3, 0, "a pip-installed Isaac Lab whose launcher has not answered yet"))


def _workflow(job: JobConfig, gen: Generation) -> Workflow:
    library = "rsl_rl" if job.workflow == "builtin" else job.workflow
    in_container = job.in_container
    if library == "rsl_rl":
        flavour = None
        if job.workflow == "rsl_rl" and not in_container and gen.major < 3 and not pip_installed(job):
            # an extension project's own cli_args.py (next to its train.py) decides, whatever Isaac Lab says
            script = train_script(job, library, gen, in_container=False)
            flavour = resume_flavour(Path(script).with_name("cli_args.py"))
        if flavour is None:
            flavour = "bool" if (gen.major, gen.minor) <= (2, 0) else "store_true"
        wf: Workflow = RslRl(gen, flavour, builtin=job.workflow == "builtin")
    elif library == "rl_games":
        wf = RlGames(gen, job)
    elif library == "skrl":
        wf = Skrl(gen, job)
    else:
        raise WorkflowError("workflow", f'workflow = "{job.workflow}" is not supported: use "rsl_rl", '
                                        '"rl_games", "skrl" or "builtin"')
    return wf


# Isaac Lab reads robots and ground planes from this directory instead of NVIDIA's asset server
# (isaaclab 3.0.0 isaaclab/utils/assets.py _resolve_asset_root: ISAACLAB_NUCLEUS_DIR = $ISAACSIM_ASSET_ROOT/Isaac/
# IsaacLab); offline hosts depend on it.
ASSET_ROOT_ENV = "ISAACSIM_ASSET_ROOT"


def _check_asset_root(job: JobConfig) -> None:
    root = job.environment.get(ASSET_ROOT_ENV)
    if root is None or root.startswith(("http://", "https://", "omniverse://")):
        return
    if not Path(root).is_absolute():
        raise WorkflowError(f"environment.{ASSET_ROOT_ENV}", f"{root!r} is relative; give the absolute path of the "
                                                             "local asset root (the trainer runs in isaacd's work dir)")
    if not Path(root).is_dir():
        raise WorkflowError(f"environment.{ASSET_ROOT_ENV}", f"{root} is not a directory: Isaac Lab would fail to "
                                                             "load its USD assets after booting; point it at your "
                                                             "local asset root (the folder holding Isaac/IsaacLab/...) "
                                                             "or remove it to use NVIDIA's asset server")


def config_issues(cfg) -> list:  # noqa: ANN001 - Config -> list[ConfigIssue]; typed loosely to keep imports light
    """What `check-config` can tell before a launch: script exists, generation known, the trainer knows the task
    (registry.py: asked of the job's Isaac Lab without booting it)."""
    from ..config.schema import ConfigIssue
    from .registry import task_problem

    issues = []
    for i, job in enumerate(cfg.jobs):
        try:
            resolve(job)
            problem = task_problem(job)
        except WorkflowError as exc:
            problem = exc
        if problem is not None:
            issues.append(ConfigIssue(f'jobs[{i}] (name = "{job.name}").{problem.key}', problem.message))
    return issues
