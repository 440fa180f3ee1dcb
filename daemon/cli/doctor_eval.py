"""`isaacd doctor`'s video check for evaluations (issue 41): a job with `[jobs.eval] video = true` on a host where
Isaac Lab cannot render gets its scores all the same, and no video; doctor says so once, with the reason.

What is known without running anything is said at once (the built-in trainer draws nothing; an evaluation on the CPU
renders nothing). Whether the trainer's Python can render (Isaac Lab's visualizers, Kit, moviepy) is decided by the
evaluation process itself (trainer/shim_eval.py `_video`), which writes its reason into each result
(`<checkpoint>.eval.json` `video_reason`): doctor reads the newest one under the job's log_root."""

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
    fix = "scores are recorded without a video; remove video = true, or evaluate on a GPU host with Isaac Lab's " \
          "renderer"
    if job.workflow == "builtin":
        return Check(name, "warn", "no renderer: the built-in trainer's environments draw nothing", fix)
    if not job.eval.on_gpu:
        return Check(name, "warn", "no renderer: its evaluations run on the CPU; Isaac Lab renders video on a GPU",
                     'evaluate on the GPU (gpu_memory = "4GiB") or remove video = true')
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
