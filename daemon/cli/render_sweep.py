"""A sweep as a person reads it (issue 39): `isaacd sweep status NAME` (a header, then one row per trial, the best
first) and `isaacd sweeps` (a line per sweep). Pure functions over status/sweeps.py's SweepStatus, which the control
socket answers as JSON; the trials come ranked by the supervisor (sweeps.asha.ranking) and are shown in that order,
so the table and `isaacd sweep best` never disagree about which trial is best."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ..status.sweeps import SweepStatus, TrialStatus
from .columns import aligned
from .durations import age

STATES = ("running", "paused", "pending", "completed", "failed", "cancelled")  # the order the header counts them


def short_names(keys: Sequence[str]) -> dict[str, str]:
    """Each searched key's column: its last part (`agent.algorithm.learning_rate` -> `learning_rate`), or as many
    trailing parts as tell it apart from another key ending the same way (`algorithm.gamma`, `env.gamma`)."""
    out: dict[str, str] = {}
    for key in keys:
        parts = key.lstrip("+").split(".")
        for n in range(1, len(parts) + 1):
            name = ".".join(parts[-n:])
            if not any(o != key and ".".join(o.lstrip("+").split(".")[-n:]) == name for o in keys):
                break
        out[key] = name
    return out


def value_text(v: Any) -> str:
    """A hyperparameter as the table shows it: a float in 4 significant digits (0.0003125, 1.235e-05; the exact
    value is in --json and `isaacd sweep best`), a bool true/false as in the sweep file, the rest as written."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:.4g}"
    if v is None:
        return "-"
    return str(v)


def objective_text(v: float | None) -> str:
    """An objective in the few characters a column has: 487.23, 0.8731, 1.2e-05, 15230."""
    if v is None:
        return "-"
    if not math.isfinite(v):
        return str(v)  # nan, inf: said as they are
    if abs(v) >= 1000:
        return f"{v:.0f}"
    if abs(v) >= 1:
        return f"{v:.2f}"
    return f"{v:.4g}"


def gpu_time(seconds: float) -> str:
    """GPU-seconds as a person counts them: 45 GPU-s, 12.5 GPU-min, 3.2 GPU-h."""
    s = max(0.0, seconds)
    if s < 120:
        return f"{s:.0f} GPU-s"
    if s < 7200:
        return f"{s / 60:.1f} GPU-min"
    return f"{s / 3600:.1f} GPU-h"


def rung_text(sw: SweepStatus, t: TrialStatus) -> str:
    """The last rung the trial reached, as the iteration the sweep file names it by ("150"), "-" before the first;
    the top rung (max_iterations) is the end of training."""
    if not t.rung_values:
        return "-"
    milestones = (*sw.rungs, sw.max_iterations) if sw.max_iterations is not None else sw.rungs
    index = len(t.rung_values) - 1
    return str(milestones[index]) if index < len(milestones) else str(index)


def _counts_text(sw: SweepStatus) -> str:
    counts = sw.counts()
    return ", ".join(f"{counts[s]} {s}" for s in STATES if counts.get(s)) or "none yet"


def _scheduler_text(sw: SweepStatus) -> str:
    total = f"{sw.max_iterations} iterations" if sw.max_iterations is not None else "max_iterations"
    if sw.scheduler == "pbt":
        share = f"{sw.quantile:.0%}" if sw.quantile is not None else "the bottom"
        return (f"scheduler pbt: {sw.trials_total} members train side by side to {total}; every {sw.interval} "
                f"iterations the bottom {share} copy a top {share} member's checkpoint and perturb its values")
    if sw.scheduler == "none" or not sw.rungs:
        return f"scheduler {sw.scheduler}: every trial trains to {total}; at most {sw.concurrency} at once"
    rungs = ", ".join(str(r) for r in sw.rungs)
    return (f"scheduler {sw.scheduler}: eta {sw.reduction_factor} (the top 1/{sw.reduction_factor} at a rung go on), "
            f"rungs at {rungs} of {total}; at most {sw.concurrency} at once")


def _best_text(sw: SweepStatus, names: Mapping[str, str]) -> str:
    best = sw.trial(sw.best) if sw.best is not None else None
    if best is None:
        return "best: none yet (no trial has reached its first rung)"
    values = ", ".join(f"{names.get(k, k)} {value_text(v)}" for k, v in best.values.items())
    objective = sw.best_objective if sw.best_objective is not None else best.objective
    return (f"best: {best.job}, {sw.objective_tag} {objective_text(objective)}{f' ({values})' if values else ''}\n"
            f"  as a job file: isaacd sweep best {sw.name} > best.toml")


def format_sweep(sw: SweepStatus, now: float | None = None) -> str:
    """`isaacd sweep status NAME`: what the sweep is, how far it got, its best trial, then every trial best first."""
    now = time.time() if now is None else now
    keys = list(dict.fromkeys(k for t in sw.trials for k in t.values))  # the sweep file's order
    names = short_names(keys)
    state = sw.state if not sw.reason else f"{sw.state}: {sw.reason}"
    who = f"  owner {sw.owner}" if sw.owner else ""
    since = f"  submitted {age(sw.submitted_at, now)} ago" if sw.submitted_at is not None else ""
    lines = [f"sweep {sw.name}  {state}{who}{since}",
             f"  objective {sw.objective_tag} ({sw.mode}, the mean of the last {sw.smooth} logged iterations)",
             f"  {_scheduler_text(sw)}",
             f"  trials: {sw.trials_total}: {_counts_text(sw)}",
             f"  {_best_text(sw, names)}",
             f"  GPU time so far: {gpu_time(sw.gpu_seconds)} ({sw.gpu_seconds:.0f} GPU-seconds)"]
    if not sw.trials:
        lines.append("(no trials yet)")
        return "\n".join(lines)
    pbt = sw.scheduler == "pbt"
    header = ["TRIAL", *(names[k] for k in keys), "STATE", "ITER", "OBJECTIVE", "EXPLOITS" if pbt else "RUNG"]
    rows = []
    for t in sw.trials:
        iteration = "-" if t.iteration is None else str(t.iteration)
        if sw.max_iterations is not None and t.iteration is not None:
            iteration = f"{t.iteration}/{sw.max_iterations}"
        last = (f"{t.exploits}{' (one under way)' if t.exploiting else ''}" if pbt else rung_text(sw, t))
        rows.append([t.job, *(value_text(t.values.get(k)) for k in keys), t.state, iteration,
                     objective_text(t.objective), last])
    lines.append("")
    lines += aligned([header, *rows])
    if pbt:
        lines += lineage_lines(sw, names)
    paused = [t for t in sw.trials if t.state == "paused"]
    if paused:
        lines.append(f"{len(paused)} paused at their rung with a save: each costs no GPU while paused and resumes "
                     f"exactly where it stopped if promoted (when it ranks in the top 1/{sw.reduction_factor} "
                     "of its rung)")
    return "\n".join(lines)


def lineage_lines(sw: SweepStatus, names: Mapping[str, str]) -> list[str]:
    """A population's exploits, each member's in order: its schedule of hyperparameters."""
    out = [f"  {t.job} {exploit_text(e, names)}" for t in sorted(sw.trials, key=lambda t: t.number)
           for e in t.lineage]
    return (["", "exploits (each member's lineage, oldest first):"] + out) if out else []


def exploit_text(e: Mapping[str, Any], names: Mapping[str, str]) -> str:
    """One exploit of a member's lineage: `at iteration 40: copied pop-t001 (its checkpoint at iteration 39);
    learning_rate 1.86e-05 -> 0.000594`."""
    changed = ", ".join(f"{names.get(k, k)} {value_text((e.get('old') or {}).get(k))} -> {value_text(v)}"
                        for k, v in (e.get("new") or {}).items())
    how = (f"copied {e.get('from_job')} (its checkpoint at iteration {e.get('from_iteration')})"
           if e.get("copied") else f"no copy of {e.get('from_job')} could be made: kept its own weights")
    return f"at iteration {e.get('at')}: {how}; {changed}"


def format_sweeps(sweeps: Sequence[SweepStatus]) -> str:
    """`isaacd sweeps`: one line per sweep."""
    if not sweeps:
        return "no sweeps (`isaacd sweep submit FILE` starts one; see docs/sweeps.md)"
    header = ["SWEEP", "OWNER", "STATE", "TRIALS", "RUNNING", "PAUSED", "DONE", "FAILED", "BEST", "OBJECTIVE",
              "GPU TIME"]
    rows = []
    for sw in sweeps:
        c = sw.counts()
        best = sw.trial(sw.best) if sw.best is not None else None
        rows.append([sw.name, sw.owner or "-", sw.state, str(sw.trials_total), str(c["running"]), str(c["paused"]),
                     str(c["completed"]), str(c["failed"]), best.job if best else "-",
                     f"{objective_text(sw.best_objective)} {sw.objective_tag}" if best else "-",
                     gpu_time(sw.gpu_seconds)])
    return "\n".join(aligned([header, *rows]))


# ---- `isaacd sweep best` of a population (issue 40) -------------------------------------------------------------
Segment = tuple[int, "int | None", str, dict[str, Any]]  # iterations [start, end) (None: on to now), member, values


def schedule(sw: SweepStatus, number: int) -> list[Segment]:
    """The hyperparameter schedule member `number`'s weights trained on, oldest first: each exploit carried out
    (its lineage) cut its timeline at the source's checkpoint iteration, before which the weights were the source's,
    trained with the source's values of that time (the source's own exploits before then, and so on back to a
    member's first sample). Ray Tune's PBT keeps the same record per trial (the config schedule its
    `PopulationBasedTrainingReplay` replays). A copy that could not be made cut nothing: the member went on from its
    own weights with new values, at the iteration it was judged at."""
    trials = {t.number: t for t in sw.trials}
    cur = trials.get(number)
    until: int | None = None
    before = math.inf
    out: list[Segment] = []
    while cur is not None:
        done = [e for e in cur.lineage if float(e.get("time", 0.0)) < before]
        if not done:
            first = dict(cur.lineage[0].get("old") or {}) if cur.lineage else dict(cur.values)
            if until is None or until > 0:
                out.append((0, until, cur.job, first))
            break
        e = done[-1]
        copied = bool(e.get("copied"))
        start = int(e.get("from_iteration") if copied else e.get("at") or 0)
        if until is None or until > start:  # (a copy of a checkpoint at the iteration it was judged at: none)
            out.append((start, until, cur.job, dict(e.get("new") or {})))
        until, before = start, float(e.get("time", 0.0))  # times fall at each step back: it ends
        if copied:
            cur = trials.get(int(e.get("from") or 0))
    return out[::-1]


def exact_text(v: Any) -> str:
    """A value as the trainer got it on its command line (sweeps/sampler.as_override): a float's shortest
    round-trip text, a bool true/false."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    return "-" if v is None else str(v)


def population_best(job_file: str, sw: SweepStatus, number: int, checkpoint: Any = None) -> str:
    """`isaacd sweep best` of a population: the best member's job file (its values now, as the supervisor wrote it)
    with, as TOML comments above its table, the schedule its weights trained on, its own exploits, and its newest
    complete checkpoint (`checkpoint`: status.types.CheckpointStatus, or None), the weights to start from."""
    t = sw.trial(number)
    if t is None:
        return job_file
    keys = list(dict.fromkeys(k for m in sw.trials for k in m.values))
    names = short_names(keys)
    rows = [["ITERATIONS", "MEMBER", *(names[k] for k in keys)]]
    for start, end, job, values in schedule(sw, number):
        last = end - 1 if end is not None else t.iteration
        span = f"{start}-{last}" if last is not None and last >= start else f"{start}-"
        rows.append([span + (" (now)" if end is None else ""), job, *(exact_text(values.get(k)) for k in keys)])
    lines = ["", f"population-based training: {t.job}'s weights trained on this schedule of hyperparameters, oldest "
                 "first", "(at an exploit a member copies another's checkpoint and goes on from it with perturbed "
                 "values):"]
    lines += ["  " + row for row in aligned(rows)]
    lines.append(f"{t.job}'s own exploits:" + ("" if t.lineage else " none"))
    lines += [f"  {exploit_text(e, names)}" for e in t.lineage]
    if checkpoint is None:
        lines.append(f"{t.job} has no complete checkpoint yet")
    else:
        lines += [f"{t.job}'s newest complete checkpoint (iteration {checkpoint.iteration}), its weights to start "
                  "from (Isaac Lab: --checkpoint <path>;",
                  "rsl_rl: runner.load(<path>)); the job below trains from scratch with its values now:",
                  f"checkpoint = {json.dumps(str(checkpoint.path))}"]
    head, sep, table = job_file.partition("[[jobs]]")
    comments = "".join(f"# {line}".rstrip() + "\n" for line in lines)
    return head + comments + sep + table if sep else job_file
