"""Does the job's trainer know its task? Asked of the trainer's own task registry, without booting the simulator.

A wrong task id fails a launch only after the trainer's imports (seconds on Isaac Lab 3.x kit-less, minutes with
Isaac Sim), and fails every restart the same way (jobs/machine.py fails it at once now: daemon/attempt/config_fault.py). This
catches it earlier, for `isaacd check-config` and `isaacd doctor`, with the closest registered id:

built-in trainer
    Its registry (isaacd_trainer.tasks.TASKS) through the check its train scripts run (isaacd_trainer.gymspec, the
    text gymnasium prints), in this process: no subprocess, well under a millisecond.
Isaac Lab 3.x installed in the launcher's Python (pip / uv, kit-less), or a 3.x checkout (``isaaclab.sh -p``)
    The launcher runs a probe that registers the tasks the way the 3.0.0 train entry point does before its look-up,
    and nothing more: the ``isaaclab.tasks`` entry points (isaaclab/cli/__init__.py:48 ``load_external_tasks``, called
    by isaaclab_rl/entrypoints/dispatch.py:93), ``import isaaclab_tasks`` and, where installed,
    ``isaaclab_tasks_experimental`` (backends/train_rsl_rl.py:21, :57); then ``gym.spec(task.split(":")[-1])``
    (isaaclab_tasks/utils/parse_cfg.py:66). No simulator, no environment: about 2 s on this 2-core CPU (measured with
    `isaacd check-config` on a pip-installed 3.0.0 job: README "check-config").
not checked
    An Isaac Lab 2.x checkout or image (its isaaclab_tasks imports Isaac Sim's Kit modules: no look-up without the
    app), container jobs (the registry is inside the image), a raw `command`, an extension's own `train_script` (it
    registers its tasks by importing its package), and a job whose extra_args name an ``--external_callback`` (the
    callback registers tasks: running it here would run the user's code).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass

from ..config.schema import JobConfig
from .base import WorkflowError
from .detect import detect_generation, isaaclab_dir
from .launcher import pip_installed

PROBE_TIMEOUT_S = 120.0  # `uv run` may resolve the project first; the imports take ~2 s here
_MARK = "ISAACD_TASKS="
# argv[1]: the task; prints one line: {"ids": [...Isaac Lab's...], "error": "gymnasium.error.X: ..." | null}
_PROBE = """\
import contextlib, json, sys
import gymnasium as gym
with contextlib.suppress(ImportError):
    from isaaclab.cli import load_external_tasks
    load_external_tasks()
import isaaclab_tasks  # noqa: F401
with contextlib.suppress(ImportError):
    import isaaclab_tasks_experimental  # noqa: F401
try:
    gym.spec(sys.argv[1].split(":")[-1])
    error = None
except gym.error.Error as exc:
    error = f"{type(exc).__module__}.{type(exc).__name__}: {exc}"
ids = sorted(k for k, s in gym.registry.items() if "env_cfg_entry_point" in (s.kwargs or {}))
print("ISAACD_TASKS=" + json.dumps({"ids": ids, "error": error}))
"""


@dataclass(frozen=True)
class TaskCheck:
    """What the trainer's registry said of the job's task."""

    registry: str  # whose registry: "isaacd's built-in trainer", "the Isaac Lab in /opt/il/bin/python"
    error: str | None  # gymnasium's line, as the trainer would print it; None: registered
    closest: str | None = None  # the registered id closest to the task
    count: int = 0  # registered tasks


def check_task(job: JobConfig) -> TaskCheck | None:
    """The job's task against its trainer's registry; None where that cannot be read without booting (see above).
    Raises WorkflowError("launcher", ...) when the launcher's probe cannot run."""
    if job.command or any(a == "--external_callback" or a.startswith("--external_callback=") for a in job.extra_args):
        return None
    if job.workflow == "builtin":
        return _builtin(job.task)
    if job.in_container or job.train_script is not None:
        return None
    if pip_installed(job):
        return _installed(job.launcher or [], job.task)
    root = isaaclab_dir(job)
    if root is not None and detect_generation(job).major >= 3:  # a 3.x checkout: its isaaclab.sh -p runs its Python
        return _installed(list(job.launcher) if job.launcher else [str(root / "isaaclab.sh"), "-p"], job.task)
    return None


def task_problem(job: JobConfig) -> WorkflowError | None:
    """A WorkflowError naming `task` when the trainer does not know it, with the closest registered id."""
    found = check_task(job)
    if found is None or found.error is None:
        return None
    hint = (f"; did you mean \"{found.closest}\"?" if found.closest else
            f"; no registered id is close (it has {found.count} tasks)")
    return WorkflowError("task", f"{job.task!r} is not a task {found.registry} registers, so every launch would fail "
                                 f"({found.error}){hint}")


def _builtin(task: str) -> TaskCheck:
    from isaacd_trainer import gymspec
    from isaacd_trainer.tasks import TASKS

    who = "isaacd's built-in trainer"
    try:
        gymspec.check(task, TASKS)
    except gymspec.Error as exc:
        return TaskCheck(who, f"{type(exc).__module__}.{type(exc).__name__}: {exc}",
                         gymspec.closest(task, TASKS), len(TASKS))
    return TaskCheck(who, None, count=len(TASKS))


def _installed(launcher: list[str], task: str) -> TaskCheck:
    shown = " ".join(launcher)
    try:
        out = subprocess.run([*launcher, "-c", _PROBE, task], capture_output=True, text=True,
                             timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise WorkflowError("launcher", f"cannot run {shown!r} to read its task registry: {exc}") from None
    line = next((ln for ln in reversed(out.stdout.splitlines()) if ln.startswith(_MARK)), None)
    if line is None:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise WorkflowError("launcher", f"{shown!r} could not list its Isaac Lab tasks (exit {out.returncode}: "
                                        f"{tail[:300]}); is isaaclab_tasks installed in that Python?")
    said = json.loads(line.removeprefix(_MARK))
    ids = list(said["ids"])
    from isaacd_trainer.gymspec import closest

    return TaskCheck(f"the Isaac Lab in {shown}", said["error"], closest(task, ids) if said["error"] else None,
                     len(ids))
