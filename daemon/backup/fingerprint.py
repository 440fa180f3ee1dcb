"""A job's fingerprint in the bucket (issue 28): what makes a checkpoint resumable by this job, recorded in the
manifest and the lease, compared before a restore.

The fields: the workflow (builtin / rsl_rl / rl_games / skrl) and its library, the task, the experiment name,
the Isaac Lab generation (major) and the checkpoint format the trainer writes (rsl_rl 2.x/3.x or 4.x/5.x keys).
`num_envs` and `seed` are not in it: the OOM step-down lowers `num_envs` and a restart may draw a new seed, and
both runs are still the same experiment. A field either side does not know (None: a manifest of an older isaacd,
a format not yet learned from the trainer) never counts as a difference.
"""

from __future__ import annotations

from typing import Any, Mapping

Fingerprint = dict[str, Any]

FIELDS = ("workflow", "library", "task", "experiment", "isaaclab", "checkpoint_format")


def job_fingerprint(job: Any, resolved: Any, rsl_rl_version: str | None = None) -> Fingerprint:
    """`job`: a JobConfig; `resolved`: its workflows.Resolved (generation, workflow)."""
    from ..workflows.validate import expected_rsl_rl_format

    library = resolved.workflow.library
    fmt = expected_rsl_rl_format(rsl_rl_version, resolved.generation.major, job.workflow == "builtin") \
        if library == "rsl_rl" else library
    return {"workflow": job.workflow, "library": library, "task": job.task, "experiment": job.experiment_name,
            "isaaclab": resolved.generation.major, "checkpoint_format": fmt}


def differences(ours: Mapping[str, Any] | None, theirs: Mapping[str, Any] | None) -> dict[str, tuple[Any, Any]]:
    """field -> (ours, theirs) for every field both sides know and that differs."""
    if not ours or not theirs:
        return {}
    return {k: (ours.get(k), theirs.get(k)) for k in FIELDS
            if ours.get(k) is not None and theirs.get(k) is not None and ours.get(k) != theirs.get(k)}


def describe(fp: Mapping[str, Any] | None) -> str:
    """One line for events and errors: task, experiment, workflow, Isaac Lab generation."""
    if not fp:
        return "unknown (no fingerprint recorded)"
    return (f"task {fp.get('task')}, experiment {fp.get('experiment')}, workflow {fp.get('workflow')}, "
            f"Isaac Lab {fp.get('isaaclab')}.x, checkpoints {fp.get('checkpoint_format')}")
