"""How `isaacd status` and `isaacd events` read to a person. Pure functions over the control API's answers.

A status arrives as JSON and is read back into `status.Status` (typed fields: a misspelt field is an
AttributeError, not a silent None); the GPU table and the events stay the JSON they are."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from .columns import aligned
from .render_backup import backup_note
from .render_eval import eval_note
from .render_queue import queue_note
from .durations import age
from ..status.types import WatchdogState
from ..status.types import GpuDeviceStatus, GpusStatus, JobStatus, LaunchWaitStatus, Status


def _num(v: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if v is None else fmt.format(v)


def iterations_done(job: JobStatus) -> int | None:
    """Iterations finished. TensorBoard steps and checkpoint numbers are 0-based (the last of a 500-iteration
    run is 499), so "499/500" read as one missing: count iterations instead. A completed job has done them
    all even when a restarted supervisor has not read its events again."""
    if job.state == "completed" and job.max_iterations is not None:
        return int(job.max_iterations)
    if job.iteration is not None:
        return int(job.iteration) + 1
    ck = job.checkpoint
    return int(ck.iteration) + 1 if ck else None


def resume_story(job: JobStatus, events: list[dict[str, Any]]) -> str | None:
    """"resumed from 20, redoing 8" while a resumed attempt re-trains what the crash lost.

    After a resume the iteration goes back and the reward dips; without a word that reads like a new bug."""
    started = next((e for e in reversed(events) if e["event"] == "started"), None)
    if started is None or not isinstance(started.get("resume_from"), dict):
        return None
    before = [e for e in events if e["event"] == "exited" and e["time"] <= started["time"]]
    lost_at = before[-1].get("iteration") if before else None
    resumed = started["resume_from"].get("iteration")
    if lost_at is None or resumed is None or lost_at <= resumed:
        return None
    progress = job.last_progress_time
    if progress is None or progress < started["time"]:  # no step of this attempt yet: `iteration` is the old one
        return (f"resuming from checkpoint {resumed}; it had reached {lost_at} before the restart, "
                f"so {lost_at - resumed} iterations will be redone and reward may dip until it catches up")
    now_at = job.iteration
    if now_at is not None and now_at >= lost_at:
        return None  # caught up
    return (f"resumed from checkpoint {resumed}, redoing {lost_at - resumed} iterations up to {lost_at} "
            f"(reached before the restart); reward may dip until it catches up")


def resumed_note(job: JobStatus) -> str | None:
    """"resumed from checkpoint 20 (model_20.pt)" for an attempt that resumed, when there is nothing to redo."""
    ck = job.resume_from
    if ck is None or job.state not in ("starting", "running"):
        return None
    return f"resumed from checkpoint {ck.iteration} ({os.path.basename(ck.path)})"


def restart_story(job: JobStatus, events: list[dict[str, Any]], now: float) -> str | None:
    """The last restart's reason, and the last crash's too when an operator restart came after it."""
    if not job.restarts:
        return None
    parts = [f"last restart: {job.last_restart_reason or '?'}"]
    crash = next((e for e in reversed(events) if e["event"] == "restart_scheduled"), None)
    if crash is not None and crash.get("reason") != job.last_restart_reason:
        parts.append(f"last crash: {crash.get('reason')} ({age(crash['time'], now)} ago)")
    return "; ".join(parts)


def format_status(status: Status | Mapping[str, Any], now: float | None = None,
                  events: dict[str, list[dict[str, Any]]] | None = None) -> str:
    """`status`: a Status, or its JSON (the control API's answer). `events`: recent events per job, for the
    restart and resume stories (optional)."""
    st = status if isinstance(status, Status) else Status.from_json(status)
    now = time.time() if now is None else now
    events = events or {}
    sup = st.supervisor
    lines = [f"isaacd {sup.version}  pid {sup.pid}  up {age(sup.started_at, now)}  "
             f"config {sup.config_path}"]
    if sup.last_config_error:
        lines.append(f"  ! last reload rejected (old config still in force): {sup.last_config_error}")
    header = ["JOB", "STATE", "RUNTIME", "PID", "ITERS", "ENVS", "REWARD", "FPS", "CHECKPOINT", "RESTARTS", "UPTIME"]
    rows = []
    notes = []
    for j in st.jobs:
        done = iterations_done(j)
        ck = j.checkpoint
        ck_s = f"{ck.iteration} ({age(ck.time, now)} ago)" if ck else "-"
        where = f"{j.runtime}@{j.node}" if j.node else str(j.runtime)  # ray: the node it runs on
        rows.append([j.name, j.state, where, str(j.pid or "-"),
                     f"{'-' if done is None else done}/{j.max_iterations}", envs_cell(j),
                     _num(j.mean_reward), _num(j.fps, "{:.0f}"), ck_s, str(j.restarts),
                     age(j.started_at, now)])
        if j.state_reason and j.state in ("failed", "stopped", "backing-off", "stopping"):
            notes.append(f"  {j.name}: {j.state_reason}{_then(j)}")
        boot = boot_note(j)
        if boot:
            notes.append(boot)
        for story in (restart_story(j, events.get(j.name, []), now),
                      resume_story(j, events.get(j.name, [])) or resumed_note(j)):
            if story:
                notes.append(f"  {j.name}: {story}")
        envs = envs_note(j)
        if envs:
            notes.append(envs)
        if j.launch_wait is not None and j.state == "starting":
            notes.append(f"  {j.name}: {launch_wait_text(j.launch_wait)}")
        notes += _watchdog_notes(j, now)
        queue = queue_note(j, now)
        if queue:
            notes.append(queue)
        spare = _spare_note(j)
        if spare:
            notes.append(spare)
        backup = backup_note(j, now)
        if backup:
            notes.append(backup)
        evals = eval_note(j, now)  # [jobs.eval] (issue 41): the newest and the best score
        if evals:
            notes.append(evals)
        caches = compile_cache_note(j)
        if caches:
            notes.append(caches)
    if any(j.owner for j in st.jobs):  # a shared server (issue 32): whose each job is; "-" the supervisor's user's
        header.insert(1, "OWNER")
        for r, j in zip(rows, st.jobs):
            r.insert(1, j.owner or "-")
    lines += aligned([header, *rows])
    if not rows:
        lines.append("(no jobs)")
    lines += notes
    if st.gpus is not None:
        lines.append("")
        lines.append(format_gpus(st.gpus))
    return "\n".join(lines)


def _then(j: JobStatus) -> str:
    """What a stop leads to, when an operator's start or restart came during it."""
    if j.state != "stopping":
        return ""
    return {"start": "; then it starts (`isaacd start` during the stop)", "restart": "; then it restarts"}.get(
        j.stopping_then or "", "")


def boot_note(j: JobStatus) -> str | None:
    """"booting for 46s (environment for 12s); last output: ..." while a started trainer has no iteration yet."""
    b = j.boot
    if b is None or j.state != "starting":
        return None
    text = f"  {j.name}: booting for {_seconds(b.seconds)}"
    if b.phase:
        text += f" ({b.phase} for {_seconds(b.phase_seconds)})"
    if b.last_line:
        text += f"; last output: {b.last_line}"
    return text


def _seconds(s: float | None) -> str:
    return "?" if s is None else age(0.0, s)


def launch_wait_text(w: LaunchWaitStatus) -> str:
    """"waiting for the spare's ack of the go: 1.2 s of 2 s" ([jobs.launch] sets the bounds)."""
    bound = f" of {round(w.bound_seconds, 1):g} s" if w.bound_seconds is not None else " (no deadline)"
    return f"waiting for {w.label}: {w.waited_seconds:.1f} s{bound}"


def envs_cell(j: JobStatus) -> str:
    """num_envs in use, and the configured count when a step-down made them differ ("-" from an older supervisor)."""
    used, configured = j.num_envs, j.num_envs_configured
    if used is None:
        return "-"
    return str(used) if used == configured or configured is None else f"{used} of {configured}"


def envs_note(j: JobStatus) -> str | None:
    used, configured = j.num_envs, j.num_envs_configured
    if used is None or configured is None or used == configured:
        return None
    return (f"  {j.name}: num_envs {used} in use of {configured} configured, stepped down after CUDA out of "
            f"memory at start-up; `isaacd restart {j.name}` tries {configured} again")


def compile_cache_note(j: JobStatus) -> str | None:
    """Where the job's compile caches are and how big ("?" until the first walk, which runs off the tick)."""
    if not j.compile_caches:
        return None
    root = os.path.commonpath([c.path for c in j.compile_caches])
    sizes = ", ".join(f"{c.name} {'?' if c.size_bytes is None else f'{c.size_bytes / 2**20:.1f} MiB'}"
                      for c in j.compile_caches)
    return f"  {j.name} compile caches in {root}: {sizes}"


def _spare_note(j: JobStatus) -> str | None:
    """The warm spare's state and what it costs, when there is one (or why there is none, if it was asked for)."""
    sp = j.spare
    if sp is None or not sp.live:
        return None
    cost = []
    if sp.rss_bytes:
        cost.append(f"{sp.rss_bytes / 2**20:.0f} MiB RAM")
    if sp.cuda_memory_bytes:
        cost.append(f"{sp.cuda_memory_bytes / 2**20:.0f} MiB GPU")
    mode = " (booted)" if sp.mode == "booted" else ""  # booted: holds a second environment (issue 21)
    costs = ", " + ", ".join(cost) if cost else ""
    return f"  {j.name} warm spare{mode}: {sp.state} (pid {sp.pid}{costs})"


def _watchdog_notes(j: JobStatus, now: float) -> list[str]:
    wds = j.watchdogs
    if not wds:
        return []
    quiet_states = (WatchdogState.OK, WatchdogState.WARMUP)
    quiet = ", ".join(f"{wd} {w.state}" for wd, w in sorted(wds.items()) if w.state in quiet_states)
    if any(w.state == WatchdogState.IDLE for w in wds.values()):  # no trainer: not "ok" (issue 37)
        quiet = "; ".join(filter(None, [f"idle (the job is {j.state}: no trainer to watch)", quiet]))
    notes = [f"  {j.name} watchdogs: {quiet}".rstrip()]
    for wd, w in sorted(wds.items()):
        if w.state not in (*quiet_states, WatchdogState.IDLE, WatchdogState.DISABLED, None):
            since = f" since {age(w.since, now)} ago" if w.since else ""
            notes.append(f"    {wd} {w.state.upper()}{since}: {w.detail or ''}".rstrip(": "))
    return notes


def format_gpus(gpus: GpusStatus) -> str:
    if not gpus.up:
        return f"GPUs: collector down: {gpus.reason or 'no NVML'}"
    rows: list[list[str]] = [["GPU", "MODEL", "TEMP", "UTIL", "POWER", "MEM", "JOBS", "HEALTH"]]
    for g in gpus.devices:
        def f(v: float | None, fmt: str) -> str:
            return "-" if v is None else fmt.format(v)

        power = "-" if g.power_watts is None else f"{g.power_watts:.0f}/{g.power_limit_watts or 0:.0f} W"
        # a MIG device by its profile ("MIG 1g.18gb"): its GPU's model is on its GPU's row
        model = "MIG " + str(g.model).rsplit(" MIG ", 1)[1] if g.mig and " MIG " in str(g.model) else str(g.model)
        rows.append([g.index, model[:20], f(g.temperature_celsius, "{:.0f}C"), f(g.utilization_ratio, "{:.0%}"),
                     power, gpu_memory_cell(g), ",".join(gpu_jobs(g)) or "-",
                     g.health if g.health is not None else "ok"])
    return "\n".join(aligned(rows))


def gpu_jobs(g: GpuDeviceStatus) -> list[str]:
    """The jobs on a GPU: those NVML sees a process of, and those the host's queue placed there (a job on a scripted
    host, or training on the CPU, or still starting, has no process on it and is there all the same)."""
    return sorted(set(g.jobs) | set(g.placed))


def gpu_memory_cell(g: GpuDeviceStatus) -> str:
    """What the memory column is: used by processes as NVML reports it, and what the queue gave the jobs placed there
    ("used 0/140 GiB, asked 80 GiB"): a placed job that has not allocated yet uses nothing, and is not free room."""
    used = None if g.memory_used_bytes is None else \
        f"used {_gib(g.memory_used_bytes)}/{_gib(g.memory_total_bytes or 0)} GiB"
    asked = None if g.asked_bytes is None else f"asked {_gib(g.asked_bytes)} GiB"
    return ", ".join(x for x in (used, asked) if x) or "-"


def _gib(n: int) -> str:
    x = n / 2**30
    return f"{x:.0f}" if x >= 10 or x == int(x) else f"{x:.1f}"


def _clock(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def _value(key: str, v: Any) -> str:
    """One event field for a person: checkpoints by file and iteration, times as clock times, not JSON."""
    if isinstance(v, dict) and "iteration" in v and "path" in v:
        saved = f", saved {_clock(v['time'])}" if isinstance(v.get("time"), (int, float)) else ""
        return f"{os.path.basename(str(v['path']))} (iteration {v['iteration']}{saved})"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_value(k, x)}" for k, x in v.items() if x is not None) + "}"
    if isinstance(v, list):
        return ",".join(_value(key, x) for x in v)
    if isinstance(v, float) and v > 1e9 and (key.endswith(("_at", "time", "until"))):
        return _clock(v)
    if isinstance(v, bool):
        return "yes" if v else "no"
    return str(v)


def format_events(events: list[dict[str, Any]]) -> str:
    lines = []
    for e in events:
        rest = {k: v for k, v in e.items() if k not in ("time", "job", "event", "argv")}
        detail = " ".join(f"{k}={_value(k, v)}" for k, v in rest.items() if v is not None)
        lines.append(f"{_clock(e['time'])}  {e['event']:<20} {detail}".rstrip())
    return "\n".join(lines) or "(no events)"


def format_nodes(res: dict) -> str:
    """`isaacd nodes`: the Ray cluster as the supervisor sees it, cordons and waiting jobs."""
    lines = [f"ray cluster {res.get('address')}" + ("" if res.get("connected") else "  (not connected yet)")]
    if res.get("error"):
        lines.append(f"  ! {res['error']}")
    rows = []
    for n in res.get("nodes") or []:
        state = "alive" if n.get("alive") else "lost"
        if n.get("cordoned"):
            state += ", cordoned"
        total, avail = n.get("total") or {}, n.get("available") or {}
        def res_s(k: str) -> str:
            return f"{avail.get(k, 0):g}/{total[k]:g}" if k in total else "-"
        rows.append([n["name"], state, res_s("GPU"), res_s("CPU"), ", ".join(n.get("jobs") or []) or "-",
                     (n["node_id"] or "")[:12]])
    header = ["NODE", "STATE", "GPU FREE", "CPU FREE", "JOBS", "NODE ID"]
    lines += aligned([header, *rows])
    for n in res.get("nodes") or []:
        if n.get("cordoned"):
            lines.append(f"  {n['name']}: cordoned: {n['cordoned'].get('reason')} (`isaacd uncordon {n['name']}` "
                         "to place jobs there again)")
    for w in res.get("waiting") or []:
        lines.append(f"  {w['job']}: {w['reason']}")
    return "\n".join(lines)
