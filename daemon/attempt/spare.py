"""A warm spare trainer per job: the expensive, state-free start-up done ahead, waiting to take over.

A spare is the job's own launcher + the launcher shim in `--isaacd-spare` mode (trainer/shim.py): it imports
torch and rsl_rl (and the modules in `spare_preload`), creates the CUDA context on the job's device, reports
`spare_ready` on its own side channel, and blocks on a FIFO. At a crash the runner hands it the attempt's
command line, environment and working directory as one JSON line (`go`); from then on it is the attempt's
trainer, found and adopted like any other (its launch token is the attempt's). A new spare is started once the
new trainer is training. Costs: one idle Python process with torch imported (RSS in `isaacd status` and
`isaacd_job_spare_memory_bytes`) and, on a GPU, one CUDA context of GPU memory.

A spare never trains unasked and never writes into run dirs: it exits by itself when its parent (this
supervisor) dies or its FIFO is closed (the supervisor holds one end open for the spare's life, so its death
closes it), and the runner kills it when the job comes to rest (stopped, completed, failed); a killed spare is
kept (spare_release.py) until its runtime has reaped it, so none stays a zombie under the supervisor. Only where it fits:
process, podman or systemd runtime, one rank, the shim on (for skrl and rl_games, which run without it, the shim file only
hosts the spare on the process runtime: at go it runs the train script as plain Python would).

Container spares (runtime = "podman" or "systemd"): a second container of the job's spec (`LaunchSpec.spare`,
container_spec.from_launch) under a name of its own, with the job's GPUs, image, mounts and compile caches, no
published ports (a job with container.ports gets no spare), and this job's spare dir and the attempts' events dir
mounted at the same paths. At the go the attempt's token is the spare's (saved before the go line is written, as a
launch saves its token before the spawn), so the runtime polls, signals, adopts and finds the container as the
attempt's; its command line and cwd in the go are the container's (container_args, container_workdir), and its
output stays in `podman logs`. On the systemd runtime the spare's container runs in a unit of its own,
`isaaclab-job-<job>-spare-<token12>.service` (its output in that unit's journal), whose file is removed once the
spare, or the attempt it became, has ended (runtimes/systemd.py).

Booted spares (issue 21; which mode a job gets: spare_mode.py). The spare runs the job's train script with its
fresh-start command line and parks at the runner's learn(). Everything the boot writes (Isaac Lab's run dir with
run.json and params/) lies in the spare's staging dir, `<state_dir>/spare/<job>/<token>/` (its `work/` is the
boot's cwd, with a real `logs/`, never the job's log_root; `boot.log` its output), where neither isaacd's run dir
scan nor upstream's `--checkpoint latest` looks. At go the shim moves the run dir to the name a cold start would
give it now, under the attempt's cwd, and removes the staging; a spare that dies unused has its staging removed
here. The go carries `resume` {checkpoint, max_iterations, seed} (spare_mode.booted_resume) and the job log.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from isaacd_trainer.shim_protocol import (ALGORITHM_SET_ENV, GO_ARGV, GO_ATTEMPT_ENV, GO_CWD, GO_ENV, GO_LOG, GO_PLAIN,
                                          GO_RESUME, ShimEvent)

from ..runtimes import trainer_command
from .setting import JobSetting
from ..config.schema import JobConfig
from ..jobs.model import JobState
from ..daemon_log import log
from ..history.store import job_log_path
from ..os_seam.oscalls import HOST_OS, OsCalls, ProcFs
from ..runtimes.base import Handle, Runtime
from ..access.owner import OwnerProblem
from ..launch.contributions import Refusal
from ..launch.pipeline import prepare
from ..launch.worker import INLINE_WAIT, Preparation
from ..os_seam.owned_dirs import OwnershipRefused
from ..os_seam.proctree import process_tree
from ..gpu.snapshot import GpuSnapshot
from ..status.types import SpareStatus
from .spare_launch import spare_context
from .spare_effects import KillSpare, SpareEffect, StartSpare
from .spare_release import Releasing
from .spare_mode import Mode, booted_resume, choose_mode, gpu_rooms, host_room, set_after_load, spare_setting
from ..workflows.launcher import Program
from ..observations.shim_events import ShimEvents

SPARE_RUNTIMES = ("process", "podman", "systemd")
BOOT_LOG_TAIL = 2000  # characters of a failed boot's output quoted in its spare_exited event
RSS_SCAN_INTERVAL = 2.0  # seconds between measurements of a spare's memory (a walk of /proc), as the trainer's pids
RETRY_MIN, RETRY_MAX = 5.0, 300.0  # a spare that keeps dying is retried less and less often
def spare_fits(job: JobConfig, program: Program | None) -> str | None:
    """Why this job cannot have a spare, or None."""
    if job.runtime not in SPARE_RUNTIMES:
        return f'runtime = "{job.runtime}": spares run on the process, podman and systemd runtimes'
    if job.in_container and job.container.ports:
        return "container.ports: a spare's container cannot publish the ports the attempt holds"
    if job.ranks > 1:
        return "several ranks: torchrun starts them, a spare cannot stand in"
    if program is None or program.spare_head is None:
        return "the launcher shim is off (shim = false), or a raw command"
    return None


def go_message(argv: list[str], cwd: Path, plain: bool, attempt_env: dict[str, str]) -> dict[str, Any]:
    """The go line's object: the attempt's command line and working directory, and of its environment what
    differs from the spare's (the attempt's side channel, the snapshot settings, the W&B run)."""
    carried = (*GO_ATTEMPT_ENV, *trainer_command.WANDB_ENV)
    return {GO_ARGV: argv, GO_CWD: str(cwd), GO_PLAIN: plain,
            GO_ENV: {k: attempt_env[k] for k in carried if k in attempt_env}}


@dataclass
class _Spare:
    handle: Handle
    token: str
    control: Path
    events: ShimEvents
    started: float  # monotonic
    ready: bool = False
    facts: dict[str, Any] = field(default_factory=dict)  # what spare_ready said: preload_seconds, rss_bytes, ...
    mode: Mode = "imports"
    staging: Path | None = None  # booted: the dir holding everything its boot wrote
    boot_args: list[str] = field(default_factory=list)  # booted: the fresh-start flags it runs with
    # our end of its FIFO, held open (read-write, so it never blocks) for the spare's life: when this supervisor
    # dies the kernel closes it, the spare reads EOF and exits. A container spare cannot see its parent die
    keepalive: int | None = None
    rss_bytes: int | None = None  # its process tree's resident memory, measured by tick (RSS_SCAN_INTERVAL)
    rss_at: float = float("-inf")
    go_wall: float = 0.0  # when the go line was written (wall clock, as the spare's spare_go time: its ack latency)


@dataclass(frozen=True)
class _Prepared:
    """What `_start` made ready for a spare before the interpreter starts it (StartSpare.prepared)."""

    token: str
    control: Path
    events: Path
    now: float  # monotonic
    mode: Mode
    staging: Path | None
    boot_args: list[str]
    keepalive: int


class SpareKeeper:
    """Keeps at most one spare for one job: starts it, watches it, hands it over, kills it."""

    def __init__(self, cfg: JobConfig | JobSetting, runtime: Runtime, state_dir: Path, event: Callable[..., None],
                 oscalls: OsCalls = HOST_OS, gpu_snapshot: Callable[[], GpuSnapshot] | None = None,
                 trainer_pids: Callable[[], Sequence[int]] | None = None):
        # the runner's setting (a reload's new config reaches the next spare), or a config of its own (tests)
        self.setting = cfg if isinstance(cfg, JobSetting) else JobSetting.of(cfg)
        self.runtime, self.state_dir, self._event = runtime, state_dir, event
        self.oscalls = oscalls
        self.spare: _Spare | None = None
        self.retry_at = 0.0
        self._retry_delay = RETRY_MIN
        self.off_reason: str | None = None
        self.log = log.bind(job=self.cfg.name)
        # booted spares: what the room is read from, handed in (None in unit tests), never the status this feeds:
        # the GPU sampler's latest snapshot (GPU memory, its processes) and the live trainer's processes (its
        # main pid first); why the next spare is imports-only, and why booted spares are off (a failed boot)
        self.gpu_snapshot = gpu_snapshot
        self.trainer_pids = trainer_pids
        self.mode_reason: str | None = None
        self.booted_off: str | None = None
        self._swept_at_rest = False
        # the spare the last take() handed an attempt: its events file says when it acknowledged the go (the
        # starter hands it to the observer, which holds the attempt to its deadlines: attempt/deadlines.py)
        self.handed: _Spare | None = None
        # the host's queue needs the GPU memory a spare would hold (issue 31): none until then (monotonic)
        self.held_until = float("-inf")
        self.held_reason: str | None = None
        self.releasing = Releasing()  # dropped spares until their runtime has released them (a process: reaped)
        self._preparing: Preparation[StartSpare | str] | None = None  # the next spare's launch, on its worker

    @property
    def cfg(self) -> JobConfig:
        return self.setting.cfg

    def enabled(self, program: Program | None) -> bool:
        if spare_setting(self.cfg.spare) == "off":
            self.off_reason = f"spare = {str(self.cfg.spare).lower() if isinstance(self.cfg.spare, bool) else 'off'}"
            return False
        self.off_reason = spare_fits(self.cfg, program)
        return self.off_reason is None

    # ---- life: the keeper decides, the runner's interpreter acts (runner.apply_spare, spare_effects.py) ---------
    def tick(self, state: JobState, program: Program | None, now: float) -> list[SpareEffect]:
        """One look at the spare; what to start or kill, for the interpreter, which then says how it went."""
        self.releasing.poll()  # first: a spare killed at the last tick is reaped as soon as its SIGKILL has landed
        sp = self.spare
        if sp is not None:
            for ev in sp.events.poll():
                if ev.get("event") == ShimEvent.SPARE_READY:
                    sp.ready = True
                    sp.facts = {k: ev.get(k) for k in ("preload_seconds", "rss_bytes", "device", "cuda_memory_bytes")}
                    self._retry_delay = RETRY_MIN
                    sp.rss_at = float("-inf")  # measured again below: what it holds parked, not while it booted
                    self._event("spare_ready", pid=sp.handle.pid, mode=sp.mode, **sp.facts)
            self.measure_memory(now)
            boot_limit = self.cfg.launch.spare_boot_timeout
            if not sp.ready and now - sp.started > boot_limit:  # stuck in its boot: it would never be ready
                if sp.mode == "booted":
                    self.booted_off = "a booted spare's boot ran past spare_boot_timeout: imports-only from now on"
                kill = self.dismiss(f"not ready {now - sp.started:.0f} s after its start ([jobs.launch] "
                                    f"spare_boot_timeout = {boot_limit:g} s)")
                self.retry_at, self._retry_delay = now + self._retry_delay, min(self._retry_delay * 2, RETRY_MAX)
                return kill
            status = self.runtime.poll(sp.handle)
            if status is not None:
                boot = self._boot_failed(sp) if sp.mode == "booted" and not sp.ready else {}
                self._drop(sp)
                self._event("spare_exited", pid=sp.handle.pid, detail=status.describe(),
                            retry_in_seconds=round(self._retry_delay, 1), mode=sp.mode, **boot)
                self.retry_at, self._retry_delay = now + self._retry_delay, min(self._retry_delay * 2, RETRY_MAX)
                return []
        at_rest = state.at_rest
        if now < self.held_until:
            return self.dismiss(self.held_reason or "held back by the queue")
        if at_rest or not self.enabled(program):
            self._discard_preparation()
            kill = self.dismiss("the job is " + state.value if at_rest else (self.off_reason or "spare off"))
            if at_rest and not self._swept_at_rest:  # a trainer that died while taking a staged run over
                sweep_staging(self.state_dir / "spare" / self.cfg.name)
                self._swept_at_rest = True
            return kill
        self._swept_at_rest = False
        # start one behind a trainer that is training: never compete with a trainer's own start-up
        if self.spare is None and state == JobState.RUNNING and now >= self.retry_at and program is not None:
            return self._start(program, now)
        return []

    def hold(self, reason: str, until: float) -> None:
        """No spare until `until` (monotonic): the queue needs its GPU memory for a job that waits."""
        self.held_reason, self.held_until = reason, max(self.held_until, until)

    def _start(self, program: Program, now: float) -> list[SpareEffect]:
        """The spare's launch is prepared on a worker thread (launch/worker.py), as an attempt's is: a hung disk
        delays only this job's spare. Its mode is chosen here, on the tick (it reads the GPU sampler's snapshot)."""
        p, started_now = self._preparing, self._preparing is None
        if p is None:
            mode, self.mode_reason = self._mode(program)
            p = self._preparing = Preparation(lambda say: self._prepare(program, mode, now),
                                              name=f"isaacd-spare-{self.cfg.name}")
        got = p.answer(INLINE_WAIT if started_now else 0.0)
        if got is None:
            return []
        self._preparing = None
        if isinstance(got, str):
            self.log.warning("spare_not_started", error=got)
            self.retry_at = now + RETRY_MAX
            return []
        # started now (its boot deadline counts from here), whenever its preparation began: one made while the job
        # was between trainers waited for the next training one
        return [replace(got, prepared=replace(got.prepared, now=now))]

    def _discard_preparation(self) -> None:
        """A spare prepared for a job that has come to rest meanwhile: its FIFO, our end of it and its staging go."""
        p = self._preparing
        if p is None or not p.done:
            return  # asked again at the next tick
        self._preparing = None
        try:
            got = p.answer()
        except Exception as exc:  # noqa: BLE001 - a bug in a preparation nobody waits for: said, not raised
            self.log.warning("spare_not_started", error=f"{type(exc).__name__}: {exc}")
            return
        if isinstance(got, StartSpare):
            prepared = got.prepared
            self.oscalls.close_fd(prepared.keepalive)
            prepared.control.unlink(missing_ok=True)
            remove_staging(prepared.staging)

    def _prepare(self, program: Program, mode: Mode, now: float) -> StartSpare | str:
        """On the worker: the spare's FIFO, then the launch pipeline; the start to make, or why not."""
        token = uuid.uuid4().hex
        base = self.state_dir / "spare" / self.cfg.name
        base.mkdir(parents=True, exist_ok=True)
        sweep_staging(base)  # booted spares' leftovers: none runs now (a handed-over one moved its run dir out)
        control = base / f"control-{token}.fifo"
        events = base / f"events-{token}.jsonl"
        in_container = self.cfg.in_container
        try:
            owner = self.setting.owner()  # the spare runs as the job's owner, as its trainer does (issue 32)
            self.oscalls.mkfifo(control, 0o600)
            if owner is not None:  # its FIFO is the owner's: the spare reads it (its events file: the pipeline's)
                self.oscalls.hand_over(control, owner)
            # O_NOFOLLOW: never a symlink put in the FIFO's place (a container's owner may write this dir)
            keepalive = self.oscalls.open_fd(control, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
        except (OSError, OwnerProblem, OwnershipRefused) as exc:
            control.unlink(missing_ok=True)
            return str(exc)
        events_dir = self._attempts_events_dir() if in_container else None
        resolved = self.setting.resolved
        assert resolved is not None  # the program is the resolved workflow's (runner.program)
        ctx, staging, boot_args = spare_context(self.cfg, self.state_dir, resolved, program, mode, token,
                                                control, events, owner, events_dir)
        spec = prepare(ctx, self.oscalls)
        if isinstance(spec, Refusal):
            self.oscalls.close_fd(keepalive)
            control.unlink(missing_ok=True)
            remove_staging(staging)
            return spec.reason
        return StartSpare(spec, _Prepared(token, control, events, now, mode, staging, boot_args, keepalive))

    def started(self, start: StartSpare, handle: Handle) -> None:
        """The interpreter started the spare `_start` prepared: it is this job's spare from now on."""
        p: _Prepared = start.prepared
        self.spare = _Spare(handle, p.token, p.control, ShimEvents(p.events), p.now, mode=p.mode, staging=p.staging,
                            boot_args=p.boot_args, keepalive=p.keepalive)
        self._event("spare_started", pid=handle.pid, mode=p.mode, **({"imports_only_because": self.mode_reason}
                                                                      if self.mode_reason else {}))

    def start_failed(self, start: StartSpare, exc: Exception) -> None:
        """The runtime could not start it (no reason to touch the job): what was prepared goes; retried later."""
        p: _Prepared = start.prepared
        self.oscalls.close_fd(p.keepalive)
        p.control.unlink(missing_ok=True)
        remove_staging(p.staging)
        self._event("spare_exited", detail=f"failed to start: {exc}", retry_in_seconds=RETRY_MAX)
        self.retry_at = p.now + RETRY_MAX

    def measure_memory(self, now: float) -> None:
        """The spare's process tree's resident memory, for status(): a walk of /proc, so at most every
        RSS_SCAN_INTERVAL seconds of the tick, never in status() (which the status publisher calls)."""
        sp = self.spare
        if sp is not None and now - sp.rss_at >= RSS_SCAN_INTERVAL:
            sp.rss_bytes, sp.rss_at = _tree_rss_bytes(sp.handle.pid, self.oscalls), now

    def ready_token(self) -> str | None:
        sp = self.spare
        return sp.token if sp is not None and sp.ready else None

    def take(self, go: dict[str, Any], attempt_args: list[str] | None = None,
             checkpoint: str | None = None) -> tuple[Handle, str] | list[SpareEffect]:
        """Hand the attempt to a ready spare: (its handle, its launch token), or what the interpreter does before the
        attempt launches cold (nothing, or the spare's kill: it could not take this attempt).

        `attempt_args`, `checkpoint`: the attempt's trainer flags and the checkpoint file it resumes from (a booted
        spare takes only an attempt that differs from its fresh start in checkpoint, seed and iterations)."""
        sp = self.spare
        if sp is None or not sp.ready or self.runtime.poll(sp.handle) is not None:
            return []
        if sp.mode == "booted":
            # a PBT exploit's new agent.algorithm.* values differ from the boot's: the shim sets them after the load
            settable = set_after_load(go.get(GO_ENV, {}).get(ALGORITHM_SET_ENV), checkpoint)
            resume = booted_resume(sp.boot_args, list(attempt_args or []), checkpoint, settable)
            if isinstance(resume, str):  # e.g. num_envs stepped down: this environment is not the attempt's
                self.booted_off = f"a booted spare could not take an attempt ({resume}): imports-only from now on"
                return self.dismiss(resume)
            go = {**go, GO_RESUME: resume}
            if not self.cfg.in_container:  # a container's output stays where it is (podman logs)
                go[GO_LOG] = str(job_log_path(self.state_dir, self.cfg.name))
        line = (json.dumps(go) + "\n").encode()
        sp.go_wall = time.time()
        try:
            fd = self.oscalls.open_fd(sp.control, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        except OSError as exc:  # ENXIO: nobody reads the FIFO any more (the spare is going away)
            self.log.warning("spare_handover_failed", error=str(exc))
            return self.dismiss("handover failed")
        try:
            written = self.oscalls.write_fd(fd, line)  # one write below PIPE_BUF-sized chunks is not guaranteed: check
            while written < len(line):
                written += self.oscalls.write_fd(fd, line[written:])
        except OSError as exc:
            self.log.warning("spare_handover_failed", error=str(exc))
            self.oscalls.close_fd(fd)
            return self.dismiss("handover failed")
        self.oscalls.close_fd(fd)
        self.spare = None
        self.handed = sp
        self._release(sp)
        if GO_LOG in go:  # a booted spare's boot wrote to boot.log; from the go on it writes to the job log
            sp.handle.state["log_path"] = go[GO_LOG]
        # the attempt's output starts here: what the dead trainer wrote after the spare started is not the
        # attempt's (its exit reason and a CUDA out-of-memory are read from this offset on, exit_tail.py)
        log_path = sp.handle.state.get("log_path")
        if log_path:
            try:
                sp.handle.state["log_offset"] = self.oscalls.file_size(log_path)
            except OSError:
                pass
        return sp.handle, sp.token

    def dismiss(self, why: str) -> list[SpareEffect]:
        """The spare is to go (why: its spare_stopped event's reason): its kill, for the interpreter."""
        return [] if self.spare is None else [KillSpare(self.spare.handle, why)]

    def killed(self, kill: KillSpare, error: Exception | None = None) -> None:
        """The interpreter killed a spare (`error`: the runtime's failure to): dropped, said, its staging gone."""
        if error is not None:
            self.log.warning("spare_kill_failed", error=str(error))
        if self.spare is not None and self.spare.handle is kill.handle:
            self._drop(self.spare)
        self._event("spare_stopped", pid=kill.handle.pid, reason=kill.reason)
        remove_staging(kill.leftover)

    def _release(self, sp: _Spare) -> None:
        """Our end of its FIFO and the FIFO's name: after the go (the line is in the pipe) or when it is dropped."""
        if sp.keepalive is not None:
            try:
                self.oscalls.close_fd(sp.keepalive)
            except OSError:
                pass
            sp.keepalive = None
        sp.control.unlink(missing_ok=True)

    def _attempts_events_dir(self) -> Path:
        """Where the attempts' side channels are (trainer_command.shim_events_path): a container spare needs it mounted, the
        go hands it the attempt's events file there (an owner's are made for them one by one, starter.py; for a
        numeric container.user the launch pipeline hands the dir over)."""
        d = trainer_command.shim_events_path(self.state_dir, self.cfg, 1).parent
        d.mkdir(parents=True, exist_ok=True)
        return d

    def _drop(self, sp: _Spare) -> None:
        if self.spare is sp:
            self.spare = None
        self._release(sp)
        remove_staging(sp.staging)  # died or killed unused: nothing of its boot may stay
        self.releasing.add(self.runtime, sp.handle)  # kept until reaped: a killed child is a zombie until then

    def handed_to(self, token: str | None) -> tuple[ShimEvents, str, float] | None:
        """The spare a previous supervisor handed the attempt with this launch token (the attempt keeps the spare's
        token, and its events file is named by it): (its events, its mode, 0.0: the go's time is not known), for the
        observer to hold a starting attempt adopted after a restart to the hand-over's deadlines; None if none."""
        path = self.state_dir / "spare" / self.cfg.name / f"events-{token}.jsonl"
        if not token or not path.is_file():
            return None
        said = ShimEvents(path).poll()
        booted = any(e.get("event") == ShimEvent.SPARE_READY and e.get("mode") == "booted" for e in said)
        return ShimEvents(path), "booted" if booted else "imports", 0.0

    def dismiss_leftover(self, token: str | None) -> list[SpareEffect]:
        """A spare from a previous supervisor (it exits by itself when its parent dies; make sure): its kill, and
        its staging (a booted one's boot, unused) removed once it is dead."""
        finder = getattr(self.runtime, "find", None)
        if not token or finder is None:
            return []
        handle, staging = finder(self.cfg, token), self.state_dir / "spare" / self.cfg.name / token
        if handle is not None:
            return [KillSpare(handle, "left by the previous supervisor", leftover=staging)]
        remove_staging(staging)
        return []

    # ---- read side -------------------------------------------------------------------------
    @property
    def token(self) -> str | None:
        return self.spare.token if self.spare else None

    def status(self) -> SpareStatus:
        sp = self.spare
        if sp is None:
            return SpareStatus(state="off" if self.off_reason else "none", reason=self.off_reason)
        rss = sp.rss_bytes
        gpu = self._gpu_bytes_of(sp.handle.pid)  # live, from NVML through the GPU collector, when it is up
        return SpareStatus(state="ready" if sp.ready else "starting", pid=sp.handle.pid, mode=sp.mode,
                           mode_reason=self.mode_reason if sp.mode == "imports" else None,
                           rss_bytes=rss if rss is not None else sp.facts.get("rss_bytes"),
                           preload_seconds=sp.facts.get("preload_seconds"),
                           cuda_memory_bytes=gpu if gpu is not None else sp.facts.get("cuda_memory_bytes"))

    # ---- booted spares ----------------------------------------------------------------------
    def _mode(self, program: Program) -> tuple[Mode, str | None]:
        """Booted or imports-only for the spare about to start, and why not booted (spare_mode.py's rule)."""
        setting = spare_setting(self.cfg.spare)
        rooms = None
        if setting == "auto" and self.cfg.workflow == "rsl_rl":
            pids = list(self.trainer_pids()) if self.trainer_pids is not None else []
            if self.cfg.device.startswith("cuda"):
                rooms = gpu_rooms(self.cfg, pids, self.gpu_snapshot() if self.gpu_snapshot is not None else None)
            else:
                rooms = host_room(self.oscalls.meminfo(), _tree_rss_bytes(pids[0], self.oscalls) if pids else None)
        return choose_mode(setting, self.cfg, program.shim and not program.plain_spare, rooms, self.booted_off)

    def _boot_failed(self, sp: _Spare) -> dict[str, Any]:
        """A booted spare died before it was ready: booted spares off for this job; its boot output's tail."""
        tail = ""
        if sp.staging is not None:
            try:  # O_NOFOLLOW: an owner's staging is theirs (issue 32), a link there must not be read as root
                with open(sp.staging / "boot.log", "rb", opener=lambda p, fl: os.open(p, fl | os.O_NOFOLLOW)) as f:
                    f.seek(max(0, os.fstat(f.fileno()).st_size - BOOT_LOG_TAIL))
                    tail = f.read().decode("utf-8", "replace")
            except OSError:
                pass
        self.booted_off = "a booted spare died during its boot: imports-only from now on (its output: spare_exited)"
        return {"boot_output": tail}

    def _gpu_bytes_of(self, pid: int | None) -> int | None:
        snap = self.gpu_snapshot() if self.gpu_snapshot is not None else None
        found = [p.used_bytes for p in (snap.processes if snap is not None else ())
                 if pid is not None and p.pid == pid and p.used_bytes is not None]
        return sum(found) if found else None


def remove_staging(staging: Path | None) -> None:
    if staging is not None:
        shutil.rmtree(staging, ignore_errors=True)


def sweep_staging(base: Path) -> None:
    """Remove booted spares' staging dirs under a job's spare dir (named by their 32-hex token)."""
    try:
        entries = list(base.iterdir())
    except OSError:
        return
    for entry in entries:
        if entry.is_dir() and not entry.is_symlink() and len(entry.name) == 32 and \
                all(c in "0123456789abcdef" for c in entry.name):
            remove_staging(entry)


def _tree_rss_bytes(pid: int | None, procfs: ProcFs = HOST_OS) -> int | None:
    """Resident memory of a process and its descendants (a launcher such as `uv run` starts Python as a child)."""
    own = _rss_bytes(pid, procfs)
    if own is None or pid is None:
        return own
    return own + sum(_rss_bytes(p, procfs) or 0 for p in process_tree(pid, procfs) if p != pid)


def _rss_bytes(pid: int | None, procfs: ProcFs = HOST_OS) -> int | None:
    if pid is None:
        return None
    try:
        for line in procfs.read_proc(pid, "status").decode(errors="replace").splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None




def keeper_idle(keeper: SpareKeeper) -> bool:
    """No spare, none prepared, none released: for a job whose state and config stay as they are, the keeper's `tick`
    decides nothing more than it did the last time (issue 39: the runner skips it for a settled job). A function
    beside the class, not a property, to keep SpareKeeper under the 350-line rule."""
    return keeper.spare is None and keeper._preparing is None and not keeper.releasing
