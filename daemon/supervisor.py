"""The supervisor: owns the job runners, ticks them, serves control requests, reloads config.

One main thread ticks the jobs. Each tick: every runner observes its trainer and feeds the state
machine; the tick hooks (the watchdog engine) turn the jobs' signals into commands for the machines; then one
immutable status snapshot is published. The control socket and the metrics server run in their own
threads: they read the latest snapshot with no lock and no I/O (`status`), and take `self.lock` only
to hand over a command or a reload, which never waits on a runtime (runtimes never block).

Everything optional (the GPU check, the hooks, the extensions: see app.build_supervisor) is handed in at
construction; nothing is attached afterwards. The control socket sees the supervisor as control.Controlled, an
extension (at its start) as `Running`.
"""

from __future__ import annotations

import fcntl
import os
import signal
import threading
import time
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Protocol

from . import __version__
from .service import sdnotify
from .config.schema import Config, ConfigError, ConfigIssue, JobConfig
from .config.read import read_settled_config
from .config.live_keys import job_change_detail
from .config.reload_diff import RESTART, ReloadSummary, changed_keys, setting_changes
from .clock import Clock, SystemClock
from .access.policy import Caller
from .control import ControlServer, Fleet
from .service.early_signals import take as take_early_signal
from .os_seam.exitwatch import ExitWatcher
from .gpu.oom_memory import OomNote
from .gpu.snapshot import GpuSnapshot
from .jobs.messages import Command, Readded, Reset, Restart, Start, Stop
from .jobs.policy import stopped_at_shutdown
from .jobs.machine import Refused
from .jobs.model import Origin
from .config.locate import EMBEDDED_DEFAULT_NAME
from .daemon_log import log
from .attempt.planner import GpuCheck
from .backup.keeper import JobBackup
from .runner import JobRunner
from .scheduling.submit import cancel_job, submit_job
from .sweeps.commands import SweepCommands
from .sweeps.controller import SweepController
from .runtimes.base import Runtime
from .runtimes.factory import make_runtime
from .status.signals import JobSignals
from .status.types import GpusStatus, JobStatus, Status, SupervisorInfo
from .history.store import StateStore
from .attempt.ending import EndedJobs
from .service.reload_requests import ReloadRequests
from .status.publishing import Publishing
from .workflows.installed import refresh as refresh_installed_isaaclab


class AlreadyRunning(RuntimeError):
    pass


NO_JOBS = ("no [[jobs]] in the file (empty or half-written?); refusing to stop every job. "
           "To remove them all on purpose, write `jobs = []`")
# The config's sections a reload does not change: the supervisor keeps them as it started (its socket, state dir,
# tick and log; the metrics server; the GPU sampler), and `isaacd reload` says they need a restart. [queue] is in
# force at the next pass (the queue hook reads the config in force; issue 42)
HELD_UNTIL_RESTART = ("supervisor", "metrics", "gpu")


# what a job's GPUs lack on this host (None: nothing, or unknown), asked before each launch
# a job's GPUs at a CUDA out-of-memory exit: (job name, attempt start) -> the note its history keeps
GpuMemory = Callable[[str, float | None], OomNote]
# each tick, after the jobs ticked: (monotonic now, every job's signals) -> (job, command) pairs
TickHook = Callable[[float, Sequence[JobSignals]], list[tuple[str, Command]] | None]
# parts of the snapshot others own, asked for at publish time; each returns a new value, never mutates
JobStatusHook = Callable[[JobStatus], JobStatus]  # per job: the row with its part filled in (the watchdogs' states)
StatusHook = Callable[[list[JobStatus]], GpusStatus | None]  # host-wide: the GPUs, which need the jobs' rows
RowChanges = Callable[[], Collection[str] | None]  # a job_status hook's: the jobs whose part may differ since asked


@dataclass(frozen=True)
class Hooks:
    """What others add to each tick and to each published snapshot, called in this order."""

    tick: Sequence[TickHook] = ()
    job_status: Sequence[JobStatusHook] = ()
    status: Sequence[StatusHook] = ()
    # one per job_status hook, in its order, where each can say which jobs' part of the row may have changed since
    # it last said (None: any): then a publish makes again only those rows, and the rows whose runner's row is new
    # (status/publishing.py). Without them (tests' hooks) every row goes through every hook at every publish.
    row_changes: Sequence[RowChanges] = ()


class Running(Protocol):
    """What an extension sees of the supervisor, handed to its `start` (it is built before the supervisor it serves):
    the config in force (a reload replaces it), the published status, the jobs' backup keepers. No runner, no lock."""

    config: Config

    def status(self) -> Status: ...

    def backups(self) -> list[JobBackup]: ...


class Extension(Protocol):
    """A part with threads or sockets of its own (GPU sampler, watchdog engine, metrics server): started after
    the jobs recovered and the control socket listens, stopped in reverse order at shutdown."""

    def start(self, running: Running) -> None: ...

    def stop(self) -> None: ...


def not_in(config: Config, names: Iterable[str]) -> list[str]:
    """The names that are no job of `config`, in order (its names as a set, once: config.job(n) for each of 1,000 jobs
    was O(N^2), issue 39). The tick asks only while a removed job lingers (more runners than jobs)."""
    jobs = {j.name for j in config.jobs}
    return [n for n in names if n not in jobs]


# its parts kept beside what they serve: a dropped runner's job ends (attempt/ending.py), the sweep commands
# (sweeps/commands.py), a reload asked for (service/reload_requests.py)
class Supervisor(EndedJobs, SweepCommands, ReloadRequests, Publishing):
    def __init__(self, config: Config, config_path: str | None, clock: Clock | None = None, *,
                 gpu_check: GpuCheck | None = None, gpu_memory: GpuMemory | None = None,
                 gpu_snapshot: Callable[[], GpuSnapshot] | None = None, hooks: Hooks = Hooks(),
                 extensions: Sequence[Extension] = (), sweeps: SweepController | None = None):
        self.config = config
        self.config_path = config_path
        self.clock: Clock = clock or SystemClock()
        self.started_at = time.time()
        self.lock = threading.RLock()
        self.store = StateStore(config.supervisor.state_dir)
        self._lock_fd = self._finish_ended(self._take_state_lock())  # (attempt/ending.py) before any job is made
        self.runtimes: dict[str, Runtime] = {}
        self.runners: dict[str, JobRunner] = {}
        self.config_reloads = 0
        self.config_errors = 0
        self.last_config_error: str | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()  # a trainer died (exitwatch) or a stop was asked: tick now
        self.exit_watcher = ExitWatcher(self._wake)
        self._reload_requested = threading.Event()
        self._shutdown_jobs = True
        self._removed: set[str] = set()  # jobs a reload removed: re-adding them undoes the stop
        self.control: ControlServer | None = None
        self.extensions: tuple[Extension, ...] = tuple(extensions)  # started/stopped with us
        self.sweeps = sweeps  # issue 39: its tick is a hook (app.py); submit, status, cancel and best go through it
        self.hooks = hooks
        self.gpu_check = gpu_check  # handed to each runner
        self.gpu_memory = gpu_memory  # likewise
        self.gpu_snapshot = gpu_snapshot  # likewise: the GPU sampler's latest snapshot (a booted spare's room)
        self._snapshot = Status()
        self._rows: dict[str, tuple[JobStatus, JobStatus]] = {}  # job -> its runner's row, the row published for it
        self._rows_made_at = float("-inf")  # when every row was last made through every hook (status/publishing.py)
        self._last_notify = float("-inf")

    # ---- lifecycle ---------------------------------------------------------------------
    def _take_state_lock(self) -> int:
        """Two supervisors on one state dir would each start every job: refuse the second."""
        path = self.store.dir / "supervisor.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = Path(path).read_text().strip() or "?"
            os.close(fd)
            raise AlreadyRunning(f"another isaacd supervisor (pid {other}) holds {path}; "
                                 "use `isaacd status`, or stop it first") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        return fd

    def runtime(self, name: str) -> Runtime:
        if name not in self.runtimes:
            self.runtimes[name] = make_runtime(name, self.config)
        return self.runtimes[name]

    def _make_runner(self, job_cfg: JobConfig) -> JobRunner:
        return JobRunner(job_cfg, self.runtime(job_cfg.runtime), self.store, self.config.supervisor.state_dir,
                         self.clock, gpu_check=self.gpu_check, gpu_memory=self.gpu_memory,
                         gpu_snapshot=self.gpu_snapshot)

    def start(self) -> None:
        for job_cfg in self.config.jobs:
            runner = self._make_runner(job_cfg)
            runner.recover()
            self.runners[job_cfg.name] = runner
        with self.lock:
            self._publish()  # the control socket never answers with an empty job list
        s = self.config.supervisor  # socket_group and admin_group: issue 32, access/policy.py
        self.control = ControlServer(self, s.control_socket, int(s.socket_mode, 8), s.socket_group, s.admin_group)
        self.control.start()
        self.exit_watcher.start()
        for ext in self.extensions:
            ext.start(self)
        log.info("supervisor_started", version=__version__, pid=os.getpid(), config=self.config_path,
                 jobs=list(self.runners), socket=str(self.config.supervisor.control_socket))
        self.tick()
        sdnotify.notify("READY=1", f"STATUS={self.summary()}")

    def install_signal_handlers(self) -> None:
        def on_term(signum: int, _frame: Any) -> None:
            log.info("shutdown_requested", signal=signal.Signals(signum).name)
            self._stop.set()
            self._wake.set()

        signal.signal(signal.SIGTERM, on_term)
        signal.signal(signal.SIGINT, on_term)
        signal.signal(signal.SIGHUP, lambda *_: self._reload_requested.set())
        if take_early_signal(signal.SIGHUP):  # sent while we were starting up: reload once we run
            self._reload_requested.set()

    def run_forever(self) -> None:
        interval = self.config.supervisor.tick_interval
        while True:
            self._wake.wait(interval)  # a tick every interval, and at once when a trainer dies
            self._wake.clear()
            if self._stop.is_set():
                break
            # Editors rewrite the file in place: wait (without blocking the tick) until it has been quiet
            # for a moment, so a SIGHUP in the middle of a save reads the finished file.
            if self._reload_requested.is_set() and self._config_quiet():
                self._reload_requested.clear()
                self.reload()
            try:
                self.tick()
            except Exception:  # noqa: BLE001 - one bad tick must not take every job down with it
                log.exception("tick_failed")
        self.shutdown()

    def tick(self) -> None:
        now = self.clock.monotonic()
        with self.lock:
            pids: set[int] = set()  # the trainers to watch, gathered in this pass (1,000 jobs: one pass, not two)
            for runner in list(self.runners.values()):
                try:
                    if runner.tick(now):
                        continue  # settled: no trainer to watch
                except Exception:  # noqa: BLE001
                    log.exception("job_tick_failed", job=runner.setting.cfg.name)
                if (handle := runner.handle) is not None and isinstance(handle.pid, int):
                    pids.add(handle.pid)
            # a job removed from the config lingers until its trainer is gone and its killed spare reaped; every job
            # of the config has a runner (made at the start and by each reload), so only more runners than jobs
            # can mean one lingers (1,000 jobs: the names looked up at every tick were 8 % of the tick, issue 39)
            if len(self.runners) > len(self.config.jobs):
                for name in [n for n in not_in(self.config, self.runners)
                             if not self.runners[n].state.active and not self.runners[n].releasing]:
                    self._drop(name)
            signals = self._signals() if self.hooks.tick else []
            for hook in self.hooks.tick:
                try:
                    commands = hook(now, signals) or []
                except Exception:  # noqa: BLE001
                    log.exception("tick_hook_failed", hook=getattr(hook, "__qualname__", str(hook)))
                    continue
                for job, cmd in commands:
                    self.send(job, cmd)
            self._publish()
            # a trainer a hook's command launched in this tick is watched from the next (its exit is seen by the
            # tick's own look meanwhile); the watch is only a wake-up
            self.exit_watcher.watch(pids)
        if now - self._last_notify >= 5.0:
            self._last_notify = now
            sdnotify.notify("WATCHDOG=1", f"STATUS={self.summary()}")

    def send(self, job: str, cmd: Command) -> str | None:
        """A command to a job's state machine (under self.lock); a job a reload just removed is ignored."""
        runner = self.runners.get(job)
        if runner is None:
            return None
        try:
            return runner.handle_message(cmd)
        except Exception:  # noqa: BLE001 - one job's bug must not take the supervisor down
            log.exception("job_command_failed", job=job, command=type(cmd).__name__)
            return Refused("failed: see the supervisor log")

    def shutdown(self) -> None:
        """Process-runtime trainers stopped gracefully (SIGINT, grace, SIGKILL); container jobs run on, adopted next."""
        sdnotify.notify("STOPPING=1")
        with self.lock:
            owned = [r for r in self.runners.values() if stopped_at_shutdown(r.setting.cfg.runtime, r.state)]
            for r in owned:
                r.handle_message(Stop(Origin.SHUTDOWN, "supervisor shutdown", final=False))
        deadline = time.monotonic() + max((r.setting.cfg.stop_timeout for r in owned), default=0) + 5
        while any(r.state.active for r in owned) and time.monotonic() < deadline:
            time.sleep(0.1)
            with self.lock:
                for r in owned:
                    if r.state.active:
                        r.tick(self.clock.monotonic())
        with self.lock:
            for r in self.runners.values():
                r.kill_spare("supervisor shutdown")
        for ext in reversed(self.extensions):
            try:
                ext.stop()
            except Exception:  # noqa: BLE001
                log.exception("extension_stop_failed")
        if self.control is not None:
            self.control.stop()
        self.exit_watcher.stop()
        log.info("supervisor_stopped", jobs={n: r.state.value for n, r in self.runners.items()})
        os.close(self._lock_fd)

    # ---- config reload -----------------------------------------------------------------
    def reload(self) -> dict[str, Any]:
        """Re-read the config. A bad file changes nothing: the running config and jobs stay.

        The file is read once it has been unchanged for a moment and read twice the same (an in-place
        save in progress is waited out), and a file without any job is refused unless it says
        `jobs = []`: an empty or truncated file must never stop every trainer."""
        if self.config_path is None:
            return {"ok": False, "error": "running on the embedded default config; nothing to reload"}
        try:
            new, raw = read_settled_config(self.config_path)
            if not new.jobs and self.runners and "jobs" not in raw and new.supervisor.jobs_dir is None:
                raise ConfigError(self.config_path, [ConfigIssue("", NO_JOBS)])
        except ConfigError as exc:
            self.config_errors += 1
            self.last_config_error = str(exc)
            log.error("config_rejected", path=self.config_path, error=str(exc),
                      detail="keeping the previous config; running jobs are untouched")
            for r in self.runners.values():
                self.store.append_event(r.setting.cfg.name, "config_rejected", error=str(exc))
            return {"ok": False, "error": str(exc)}
        refresh_installed_isaaclab((j.launcher, j.owner) for j in new.jobs if j.launcher)  # re-read off the tick
        with self.store.synced_together([j.name for j in new.jobs if j.name not in self.runners]), self.lock:
            changes = self._apply_config(new)  # new jobs' first saves synced in one wait for the disk (store.py)
            self._publish()  # `isaacd status` right after `isaacd reload` shows a job it added (the queue's why: a tick)
        self._wake.set()  # tick now, not at the next interval: a job just added is placed, and `submit` answers, sooner
        self.config_reloads += 1
        self.last_config_error = None
        log.info("config_reloaded", path=self.config_path, **changes)
        return {"ok": True, **changes}

    def _apply_config(self, new: Config) -> dict[str, Any]:
        old = self.config
        # every changed key of every section; a ray runtime already made keeps its [ray] until a restart
        settings = setting_changes(old, new, HELD_UNTIL_RESTART + (("ray",) if "ray" in self.runtimes else ()))
        if any(s.applies == RESTART for s in settings):
            log.warning("config_needs_restart", keys=[s.key for s in settings if s.applies == RESTART],
                        detail="these settings apply when the supervisor restarts")
        added, removed, changed = [], [], []
        job_keys: dict[str, tuple[str, ...]] = {}  # a changed job's keys
        for job_cfg in new.jobs:
            runner = self.runners.get(job_cfg.name)
            if runner is None:
                runner = self._make_runner(job_cfg)
                runner.recover()
                self.runners[job_cfg.name] = runner
                added.append(job_cfg.name)
            elif job_cfg.name in self._removed:  # back before its runner was dropped: the machine undoes the removal
                self._removed.discard(job_cfg.name)
                runner.reconfigure(job_cfg)
                runner.handle_message(Readded())
                runner.event("config_changed", detail="back in the config after a reload had removed it")
                added.append(job_cfg.name)
            elif runner.setting.written is not job_cfg and runner.setting.written != job_cfg:  # as written
                # A running trainer is never killed by a reload: its launch keys take effect at its next start, the
                # keys read live (config/live_keys.py JOB_KEYS_NOW) at once.
                job_keys[job_cfg.name] = tuple(changed_keys(runner.setting.written, job_cfg))
                runner.reconfigure(job_cfg, lambda: self.runtime(job_cfg.runtime))
                runner.event("config_changed", keys=list(job_keys[job_cfg.name]),
                             detail=job_change_detail(job_keys[job_cfg.name]))
                changed.append(job_cfg.name)
        for name in not_in(new, self.runners):
            runner = self.runners[name]
            if runner.state.active:
                # not remembered as an operator stop: if the job comes back (a restored file), it resumes
                runner.handle_message(Stop(Origin.CONFIG, "removed from config", final=False))
                self._removed.add(name)
                removed.append(name)
            else:
                runner.kill_spare("removed from config")  # a completed job's evaluation (issue 41) goes too
                if not runner.releasing:  # else the tick drops it once the spare it killed is reaped
                    self._drop(name)
                removed.append(name)
        self.config = new.model_copy(update={k: getattr(old, k) for k in HELD_UNTIL_RESTART})
        return ReloadSummary(tuple(added), tuple(removed), tuple(changed), job_keys, settings).to_json()

    # ---- read side -----------------------------------------------------------------------
    def status(self) -> Status:
        """The latest published snapshot: no lock, no I/O, so it answers while any runtime is busy."""
        return replace(self._snapshot, supervisor=SupervisorInfo(
            version=__version__,
            pid=os.getpid(),
            started_at=self.started_at,
            uptime_seconds=time.time() - self.started_at,
            config_path=self.config_path or EMBEDDED_DEFAULT_NAME,
            config_reloads_total=self.config_reloads,
            config_errors_total=self.config_errors,
            last_config_error=self.last_config_error,
            state_dir=str(self.config.supervisor.state_dir),
        ))

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for r in self.runners.values():
            counts[r.state.value] = counts.get(r.state.value, 0) + 1
        return ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no jobs"

    def submit(self, text: str, source: str, caller: Caller | None = None) -> str:  # `isaacd submit`
        return submit_job(self, text, source, caller)  # (scheduling/submit.py)

    def cancel(self, job: str) -> str:  # `isaacd cancel`
        return cancel_job(self, job)

    def backups(self) -> list[JobBackup]:
        return [r.backup for r in self.runners.values() if r.backup is not None]

    def job_names(self) -> Collection[str]:
        return self.runners.keys()  # a live view: a job a reload adds is known at once

    def events(self, job: str, limit: int | None = None) -> list[dict[str, Any]]:
        return self.store.events(job, limit)

    def fleet(self) -> Fleet | None:
        """The ray runtime, what `isaacd nodes|cordon|uncordon` act on, when the config has a [ray] section."""
        if self.config.ray is None:
            return None
        with self.lock:
            runtime = self.runtime("ray")
        if not isinstance(runtime, Fleet):
            raise TypeError(f"the ray runtime ({type(runtime).__name__}) has no nodes to show")
        return runtime

    # ---- commands ------------------------------------------------------------------------
    OPERATOR_COMMANDS: dict[str, Callable[[], Command]] = {
        "stop": lambda: Stop(Origin.OPERATOR, "operator stop (isaacd stop)"),
        "start": lambda: Start(Origin.OPERATOR, "operator start"),
        "restart": lambda: Restart(Origin.OPERATOR, "operator restart (isaacd restart)"),
        "reset": lambda: Reset(Origin.OPERATOR, "operator reset (isaacd reset): training from scratch"),
    }

    def command(self, op: str, job: str) -> str:
        if op == "backup-takeover":  # not the job's state: its backup keeper's lease (backup/lease.py)
            with self.lock:
                if job not in self.runners:
                    raise KeyError(f"no job named {job!r}; jobs: {', '.join(self.runners) or 'none'}")
                return self.runners[job].backup_takeover()
        make = self.OPERATOR_COMMANDS.get(op)
        if make is None:
            raise ValueError(f"unknown command {op!r}")
        with self.lock:
            if job not in self.runners:
                raise KeyError(f"no job named {job!r}; jobs: {', '.join(self.runners) or 'none'}")
            reply = self.send(job, make()) or "ok"
            self._publish()  # the caller's next `status` shows what the command did
        if isinstance(reply, Refused):  # not carried out: the client says why and exits non-zero
            raise ValueError(f"{job}: {reply}")
        return reply
