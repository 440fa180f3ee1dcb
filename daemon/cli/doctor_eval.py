"""`isaacd doctor`'s video check for evaluations (issue 41): a job with `[jobs.eval] video = true` on a host where
Isaac Lab cannot render gets its scores all the same, and no video; doctor says so once, with the reason.

What is known without running anything is said at once (the built-in trainer draws nothing). Whether Isaac Lab can
render for an evaluation (on the GPU or the CPU: its visualizers, Kit, Newton's GL viewer with pyglet and the host's
EGL, moviepy) is decided by the evaluation process itself, in the trainer's Python (trainer/shim_eval.py `_video`),
which writes its reason into each result (`<checkpoint>.eval.json` `video_reason`): doctor reads the newest one under
the job's log_root, the same result whose reason `isaacd status` shows."""

from __future__ import annotations

from pathlib import Path

from ..config.schema import Config, JobConfig
from ..evals.result import SUFFIX, video_reason
from .checks import Check

RESULTS_LOOKED_AT = 200  # result files listed at most per job (the newest decides; a big log_root stays quick)


def check_eval_video(cfg: Config) -> list[Check]:
    jobs = [j for j in cfg.jobs if j.eval is not None and j.eval.video]
    return [_one(j) for j in jobs]


def _one(job: JobConfig) -> Check:
    name = f"eval_video:{job.name}"
    assert job.eval is not None
    if job.workflow == "builtin":
        return Check(name, "warn", "no renderer: the built-in trainer's environments draw nothing",
                     "scores are recorded without a video; remove video = true")
    fix = "scores are recorded without a video; install what the reason names (docs/evals.md, Video), or remove " \
          "video = true"
    newest = _newest_result(job.log_root)
    if newest is None:
        return Check(name, "pass", "no evaluation has run yet: the first one says whether this host can render")
    why = video_reason(newest)
    if why:
        return Check(name, "warn", f"{why} (said by {newest.name})", fix)
    return Check(name, "pass", f"the newest evaluation recorded no reason against video ({newest.name})")


def _newest_result(log_root: Path) -> Path | None:
    found: list[Path] = []
    try:
        for p in log_root.glob(f"*/*/*/*{SUFFIX}"):  # <library>/<experiment>/<run>/model_N.pt.eval.json
            found.append(p)
            if len(found) >= RESULTS_LOOKED_AT:
                break
    except OSError:
        return None

    def mtime(p: Path) -> float:
        try:
            return p.stat().st_mtime
        except OSError:
            return 0.0
    return max(found, key=mtime, default=None)
