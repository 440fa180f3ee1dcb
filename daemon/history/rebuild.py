"""A job whose history document is unusable (or deleted) is rebuilt from what is on disk, not restarted
from zero.

`StateStore.load` has already moved a bad document aside and said why. What isaacd still knows:
  * the job's event journal (`run_dir`/`started`/`state` events): its own run dirs, the last launch,
    and whether an operator had stopped it;
  * the job's run dirs under its experiment dir (`<YYYY-mm-dd_HH-MM-SS>_<job>`, the exact name, so job
    `pole` never claims `cartpole`'s runs), with their checkpoints;
  * for the process runtime, a trainer that is still alive (pid from the last `started` event, checked
    against its command line and start time so a reused pid is never mistaken for it).
The rebuilt history has one ended attempt per run dir (oldest first), so the usual resume logic picks
the newest complete checkpoint of the newest run, and an open attempt for a live trainer, so recovery
adopts it instead of starting a duplicate.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from ..config.schema import JobConfig
from ..daemon_log import log
from ..observations.checkpoints import RSL_RL_LAYOUT, CheckpointLayout, Lineage, choose_resume
from .ended import list_ended
from .store import Attempt, HistoryCorrupt, JobHistory, LegacyCounters, StateStore, job_log_path

# operator/watchdog stops are remembered; a supervisor shutdown is not (the next supervisor resumes)
_NOT_FINAL_REASONS = ("supervisor shutdown", "removed from config")


def load_history(store: StateStore, cfg: JobConfig, state_dir: Path) -> JobHistory:
    """`store.load`, or a history rebuilt from disk when the document is damaged or gone while the job's
    runs are still there (and an event saying so). A job with no history and no runs starts fresh."""
    if not store.exists(cfg.name):
        if not store.journal_path(cfg.name).exists() and list_ended(state_dir, cfg.name):
            # a new job of an ended one's name (ended.py): its own timeline, nothing of the old one's runs
            return JobHistory(name=cfg.name)
        history, facts = rebuild(store, cfg, state_dir)
        if not history.attempts:
            return JobHistory(name=cfg.name)
        store.append_event(cfg.name, "history_missing", path=str(store.jobs_dir / f"{cfg.name}.json"),
                           detail="job history rebuilt from its run dirs and event journal", **facts)
        log.warning("history_missing", job=cfg.name, **facts)
        _save(store, history)
        return history
    try:
        return store.load(cfg.name)
    except HistoryCorrupt as exc:
        history, facts = rebuild(store, cfg, state_dir)
        store.append_event(cfg.name, "history_corrupt", path=str(exc.path), problem=exc.problem,
                           kept_as=str(exc.kept_as) if exc.kept_as else None,
                           detail="job history rebuilt from its run dirs and event journal", **facts)
        log.error("history_corrupt", job=cfg.name, path=str(exc.path), problem=exc.problem,
                  kept_as=str(exc.kept_as) if exc.kept_as else None, **facts)
        _save(store, history)
        return history


def _save(store: StateStore, history: JobHistory) -> None:
    try:
        store.save(history)
    except OSError as exc:  # the runner saves again at its next change
        log.error("history_save_failed", job=history.name, error=str(exc))


def own_run_dirs(cfg: JobConfig, events: list[dict[str, Any]]) -> list[Path]:
    """The job's run dirs, oldest first: those its journal names, and those named exactly after it."""
    found: set[Path] = set()
    for e in events:
        rd = e.get("run_dir")
        if isinstance(rd, str) and rd and Path(rd).is_dir():
            found.add(Path(rd))
    from ..workflows import WorkflowError, runs_workflow

    try:
        wf = runs_workflow(cfg)  # the job's own layout and run-dir names (rsl_rl, rl_games, ...)
    except WorkflowError:
        wf = None  # a job that cannot launch yet: what its journal names is all there is
    if wf is not None:
        pattern = wf.run_dir_re(cfg)
        try:
            found.update(p for p in wf.experiment_dir(cfg).iterdir() if p.is_dir() and pattern.match(p.name))
        except OSError:
            pass
    return sorted(found, key=lambda p: (p.name, str(p)))


def rebuild(store: StateStore, cfg: JobConfig, state_dir: Path) -> tuple[JobHistory, dict[str, Any]]:
    events = [e for e in store.events(cfg.name) if e.get("event") != "journal_damaged"]
    now = time.time()
    # the counters and resting state the journal shows, turned into the job's model by the runner (as an older
    # document's are)
    counters = LegacyCounters()
    history = JobHistory(name=cfg.name, legacy=counters)
    resumed_from = _resume_points(events)
    for i, run_dir in enumerate(own_run_dirs(cfg, events), start=1):
        try:
            started = run_dir.stat().st_mtime
        except OSError:
            started = now
        history.attempts.append(Attempt(
            number=i, started_at=started, reason="rebuilt from disk", run_dir=str(run_dir), runtime=cfg.runtime,
            resume_from=resumed_from.get(str(run_dir)),
            ended_at=now, exit={"code": None, "signal": None, "oom_killed": False, "external_stop": False,
                                "detail": "history rebuilt from disk"}))
    restarts = [e for e in events if e["event"] == "started" and e.get("reason") not in ("initial", "operator start")]
    counters.restarts = len(restarts)
    counters.restart_times = [float(e["time"]) for e in restarts]
    if restarts:
        counters.last_restart_reason = str(restarts[-1].get("reason"))

    live = _live_trainer(cfg, events, state_dir) if cfg.runtime == "process" else None
    if live is not None:
        pid, handle, live_run_dir = live
        history.attempts.append(Attempt(
            number=len(history.attempts) + 1, started_at=now, reason="rebuilt from disk: trainer still running",
            run_dir=live_run_dir, runtime="process", handle=handle))
    else:
        final = _final_state(events)
        if final is not None:
            counters.final_state, counters.final_reason = final
    newest = choose_resume([Lineage(Path(a.run_dir) if a.run_dir else None,
                                    a.resume_from["iteration"] if a.resume_from else None)
                            for a in history.attempts], layout=_layout(cfg))
    facts = {"run_dirs": [a.run_dir for a in history.attempts if a.run_dir],
             "checkpoint": newest.iteration if newest else None,
             "adopting_pid": live[0] if live else None, "final_state": counters.final_state}
    return history, facts


def _layout(cfg: JobConfig) -> CheckpointLayout:
    from ..workflows import WorkflowError, runs_workflow

    try:
        return runs_workflow(cfg).layout
    except WorkflowError:
        return RSL_RL_LAYOUT


def _resume_points(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """run dir -> the checkpoint its launch resumed from, as the journal recorded it. Layouts whose numbering
    restarts with every run (skrl's `agent_<timestep>.pt`) count a run's checkpoints from there, so without it a
    rebuilt skrl job would take its resumed runs for fresh ones and train past max_iterations."""
    # walked in order: a run_dir event belongs to the latest `started` of its attempt number (numbers start over
    # after an earlier rebuild, so a number alone can name two launches)
    resume_by_attempt: dict[Any, Any] = {}
    out: dict[str, dict[str, Any]] = {}
    for e in events:
        if e["event"] == "started":
            resume_by_attempt[e.get("attempt")] = e.get("resume_from")
        if e["event"] != "run_dir" or not isinstance(e.get("run_dir"), str):
            continue
        r = resume_by_attempt.get(e.get("attempt"))
        if isinstance(r, dict) and isinstance(r.get("iteration"), int) and isinstance(r.get("path"), str):
            out[e["run_dir"]] = {"path": r["path"], "iteration": r["iteration"]}
    return out


def _final_state(events: list[dict[str, Any]]) -> tuple[str, str | None] | None:
    """The job's resting state from its last `state` event, if it was at rest and meant to stay so."""
    for e in reversed(events):
        if e["event"] == "state":
            new, reason = e.get("new"), e.get("reason")
            if new in ("stopped", "completed", "failed") and reason not in _NOT_FINAL_REASONS:
                return str(new), reason if isinstance(reason, str) else None
            return None
    return None


def _live_trainer(cfg: JobConfig, events: list[dict[str, Any]],
                  state_dir: Path) -> tuple[int, dict[str, Any], str | None] | None:
    """(pid, process-runtime handle, run dir) of the last launched trainer if it still runs, else None."""
    from ..os_seam.proctree import proc_start_time

    last = next((e for e in reversed(events) if e["event"] in ("started", "exited", "adopted")), None)
    started = next((e for e in reversed(events) if e["event"] == "started"), None)
    if last is None or started is None or last["event"] == "exited":
        return None
    pid, argv = started.get("pid"), started.get("argv")
    if not isinstance(pid, int) or not isinstance(argv, list) or not argv:
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
        if os.getpgid(pid) != pid:  # trainers lead their own process group
            return None
    except OSError:
        return None
    words = [w.decode(errors="replace") for w in cmdline]
    # a script's interpreter may come first (`python .../isaacd-train ...`): compare the tail
    if len(words) < len(argv) or words[len(words) - len(argv) + 1:] != [str(a) for a in argv[1:]]:
        return None
    start_ticks = proc_start_time(pid)
    if start_ticks is None or _boot_time() + start_ticks / os.sysconf("SC_CLK_TCK") < float(started["time"]) - 5:
        return None  # older than the launch: the pid was reused
    run_dir = next((e.get("run_dir") for e in reversed(events) if e["event"] == "run_dir"
                    and e.get("attempt") == started.get("attempt")), None)
    handle = {"pid": pid, "pgid": pid, "start_time": start_ticks,
              "log_path": str(job_log_path(state_dir, cfg.name))}
    return pid, handle, run_dir if isinstance(run_dir, str) else None


def _boot_time() -> float:
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return 0.0
