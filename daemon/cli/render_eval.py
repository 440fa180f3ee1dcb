"""How a job's checkpoint evaluations read to a person (issue 41): the `eval:` line of `isaacd status`, the table of
`isaacd evals JOB` and the answer of `isaacd best JOB`. Pure functions over the typed values of evals/types.py.

The status line says what a user needs in one glance: the newest score and the best one, then only what is out of
the ordinary (an evaluation running or waiting, failed attempts, checkpoints given up, why there is no video)."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

from .columns import aligned
from .durations import age
from ..evals.types import EvalResult, EvalsStatus
from ..status.types import JobStatus


def score(x: float | None, like: float | None = None) -> str:
    """A return as people read it: 487, 48.7, 4.87, 0.487 (decimals by the size of `like`, the mean, so a mean
    and its spread have the same decimals: "487 ± 12", "0.95 ± 0.03")."""
    if x is None:
        return "-"
    ref = abs(like if like is not None else x)
    decimals = 0 if ref >= 100 else 1 if ref >= 10 else 2 if ref >= 0.1 or ref == 0 else 3
    return f"{x:.{decimals}f}"


def mean_std(r: EvalResult) -> str:
    return f"{score(r.return_mean)} ± {score(r.return_std, r.return_mean)}"


def percent(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _iterations(its: Sequence[int]) -> str:
    return ", ".join(str(i) for i in its)


def eval_note(job: JobStatus, now: float) -> str | None:
    """`isaacd status`'s lines for a job with [jobs.eval] (None for one without: `JobStatus.evals` is None)."""
    return eval_lines(job.name, job.evals, now) if job.evals is not None else None


def eval_lines(name: str, ev: EvalsStatus, now: float) -> str:
    """`  NAME eval: model_400.pt 487 ± 12 over 100 episodes; best model_350.pt 495`, then what is out of the
    ordinary, each said once: an evaluation running or waiting, failed attempts, checkpoints given up (with the
    reason), why there is no video."""
    head = f"  {name} eval: "
    if ev.last is None:
        head += f"none yet (every {_every(ev.every)}, on {ev.where or '?'})"
    else:
        head += _scored(ev.last)
        if ev.best is not None and ev.best.iteration == ev.last.iteration:
            head += ", the best so far"
        elif ev.best is not None:
            head += f"; best {ev.best.checkpoint_name} {score(ev.best.return_mean)}"
    now_doing = []
    if ev.running is not None:
        since = f" for {age(ev.running_since, now)}" if ev.running_since is not None else ""
        now_doing.append(f"evaluating iteration {ev.running}{since}")
    if ev.waiting:
        now_doing.append(f"{ev.waiting} waiting")
    if ev.paced_until is not None and ev.paced_until > now and ev.running is None:
        # max_training_cost: evaluations lately cost the training this much each, so the next one waits
        cost = f" (each costs the training {ev.cost_seconds:.2f} s)" if ev.cost_seconds is not None else ""
        now_doing.append(f"next in {age(now, ev.paced_until)}{cost}")
    if now_doing:
        head += "; " + ", ".join(now_doing)
    lines = [head]
    if ev.given_up:
        why = f"; last failure: {ev.last_error}" if ev.last_error else ""
        lines.append(f"    eval gave up on iteration{'' if len(ev.given_up) == 1 else 's'} "
                     f"{_iterations(ev.given_up)}{why} (`isaacd events {name}`)")
    elif ev.last_error:  # the keeper's newest problem: a failed attempt (retried) or why it cannot evaluate
        lead = f"eval {_plural(ev.failed, 'failed attempt')} in all; last: " if ev.failed else "eval: "
        lines.append(f"    {lead}{ev.last_error}")
    if ev.video_unavailable:
        lines.append(f"    eval video unavailable: {ev.video_unavailable} (scores only)")
    return "\n".join(lines)


def _every(every: str) -> str:
    if every == "best":
        return "new best training reward"
    return "checkpoint" if every in ("1", "") else f"{every}th checkpoint"


def _scored(r: EvalResult) -> str:
    success = f", success {percent(r.success_rate)}" if r.success_rate is not None else ""
    return f"{r.checkpoint_name} {mean_std(r)}{success} over {r.episodes} episodes"


def _clock(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def _duration(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s:.1f}s" if s < 120 else age(0.0, s)


def format_evals(job: str, results: Sequence[EvalResult], best: int | None, *, given_up: Sequence[int] = (),
                 last_error: str | None = None) -> str:
    """`isaacd evals JOB`: every evaluation, oldest first, the best marked with `*`."""
    if not results:
        lines = [f"{job}: no evaluation finished yet"]
    else:
        header = ["", "ITER", "CHECKPOINT", "RETURN", "LENGTH", "SUCCESS", "EPISODES", "WHEN", "DURATION"]
        rows = [["*" if r.iteration == best else "", str(r.iteration), r.checkpoint_name, mean_std(r),
                 score(r.length_mean), percent(r.success_rate), str(r.episodes), _clock(r.finished_at),
                 _duration(r.duration_seconds)] for r in results]
        lines = aligned([header, *rows])
        chosen = next((r for r in results if r.iteration == best), None)
        if chosen is not None:
            lines.append(f"* best: {chosen.checkpoint} ({mean_std(chosen)}; `isaacd best {job}`)")
    videos = [r for r in results if r.video]
    if videos:
        lines.append(f"newest video: {videos[-1].video}" + (f" (GIF {videos[-1].gif})" if videos[-1].gif else ""))
    if given_up:
        why = "" if not last_error else f": {last_error}" if len(given_up) == 1 else f"; the newest: {last_error}"
        lines.append(f"given up: iteration{'' if len(given_up) == 1 else 's'} {_iterations(given_up)}{why}")
    return "\n".join(lines)


def best_score_line(job: str, r: EvalResult) -> str:
    """`isaacd best JOB`'s line on stderr: the score beside the path on stdout."""
    success = f", success {percent(r.success_rate)}" if r.success_rate is not None else ""
    return (f"{job}: best {os.path.basename(r.checkpoint)} (iteration {r.iteration}): return {mean_std(r)}"
            f"{success} over {r.episodes} episodes")
