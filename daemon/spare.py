"""A warm spare trainer per job: the expensive, state-free start-up done ahead, waiting to take over.

A spare is the job's own launcher + the launcher shim in `--isaacd-spare` mode (trainer/shim.py): it imports
torch and rsl_rl (and the modules in `spare_preload`), creates the CUDA context on the job's device, reports
`spare_ready` on its own side channel, and blocks on a FIFO. At a crash the runner hands it the attempt's
command line, environment and working directory as one JSON line (`go`); from then on it is the attempt's
trainer, found and adopted like any other (its launch token is the attempt's). A new spare is started once the
new trainer is training. Costs: one idle Python process with torch imported (RSS in `isaacd status` and
`isaacd_job_spare_memory_bytes`) and, on a GPU, one CUDA context of GPU memory.

A spare never trains unasked and never writes into run dirs: it exits by itself when its parent (this
supervisor) dies or its FIFO is closed, and the runner kills it when the job comes to rest (stopped,
completed, failed). Only where it fits: process runtime, one rank, the shim on (for skrl and rl_games, which run
without it, the shim file only hosts the spare: at go it runs the train script as plain Python would).
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from isaacd_trainer.shim_protocol import (GO_ARGV, GO_ATTEMPT_ENV, GO_CWD, GO_ENV, GO_PLAIN, SPARE_CONTROL_ENV,
                                          SPARE_DEVICE_ENV, SPARE_FLAG, SPARE_PLAIN_ENV, SPARE_PRELOAD_ENV, ShimEvent)

from . import launch
from .config import JobConfig
from .jobs.model import JobState
from .logs import log
from .oscalls import HOST_OS, OsCalls, ProcFs
from .runtimes.base import Handle, LaunchSpec, Runtime
from .workflows.launcher import Program
from .observations.shim_events import ShimEvents

RETRY_MIN, RETRY_MAX = 5.0, 300.0  # a spare that keeps dying is retried less and less often
BUILTIN_PRELOAD = ["isaacd_trainer.cli", "isaacd_trainer.train_v2", "isaacd_trainer.runtime",
                   "isaacd_trainer.envs.cartpole", "hydra"]
# what Isaac Lab's skrl / rl_games train scripts import that holds no state (a module that is missing is reported
# in spare_ready's errors, not fatal); rsl_rl's runners are imported (and patched) for every rsl_rl spare
LIBRARY_PRELOAD = {"skrl": ["skrl.agents.torch.ppo", "skrl.trainers.torch", "hydra"],
                   "rl_games": ["rl_games.torch_runner", "rl_games.common.a2c_common", "hydra"]}


def spare_fits(job: JobConfig, program: Program | None) -> str | None:
    """Why this job cannot have a spare, or None."""
    if job.runtime != "process":
        return f'runtime = "{job.runtime}": spares run on the process runtime only'
    if job.ranks > 1:
        return "several ranks: torchrun starts them, a spare cannot stand in"
    if program is None or program.spare_head is None:
        return "the launcher shim is off (shim = false), or a raw command"
    return None


def go_message(argv: list[str], cwd: Path, plain: bool, attempt_env: dict[str, str]) -> dict[str, Any]:
    """The go line's object: the attempt's command line and working directory, and of its environment what
    differs from the spare's (the attempt's side channel, the snapshot settings, the W&B run)."""
    carried = (*GO_ATTEMPT_ENV, *launch.WANDB_ENV)
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


class SpareKeeper:
    """Keeps at most one spare for one job: starts it, watches it, hands it over, kills it."""

    def __init__(self, cfg: JobConfig, runtime: Runtime, state_dir: Path, event: Callable[..., None],
                 oscalls: OsCalls = HOST_OS):
        self.cfg, self.runtime, self.state_dir, self._event = cfg, runtime, state_dir, event
        self.oscalls = oscalls
        self.spare: _Spare | None = None
        self.retry_at = 0.0
        self._retry_delay = RETRY_MIN
        self.off_reason: str | None = None
        self.log = log.bind(job=cfg.name)

    def enabled(self, program: Program | None) -> bool:
        if self.cfg.spare is False:
            self.off_reason = "spare = false"
            return False
        self.off_reason = spare_fits(self.cfg, program)
        return self.off_reason is None

    # ---- life -----------------------------------------------------------------------------
    def tick(self, state: JobState, program: Program | None, now: float) -> None:
        sp = self.spare
        if sp is not None:
            for ev in sp.events.poll():
                if ev.get("event") == ShimEvent.SPARE_READY:
                    sp.ready = True
                    sp.facts = {k: ev.get(k) for k in ("preload_seconds", "rss_bytes", "device", "cuda_memory_bytes")}
                    self._retry_delay = RETRY_MIN
                    self._event("spare_ready", pid=sp.handle.pid, **sp.facts)
            status = self.runtime.poll(sp.handle)
            if status is not None:
                self._drop(sp)
                self._event("spare_exited", pid=sp.handle.pid, detail=status.describe(),
                            retry_in_seconds=round(self._retry_delay, 1))
                self.retry_at, self._retry_delay = now + self._retry_delay, min(self._retry_delay * 2, RETRY_MAX)
                return
        at_rest = state in (JobState.STOPPED, JobState.COMPLETED, JobState.FAILED)
        if at_rest or not self.enabled(program):
            if self.spare is not None:
                self.kill("the job is " + state.value if at_rest else (self.off_reason or "spare off"))
            return
        # start one behind a trainer that is training: never compete with a trainer's own start-up
        if self.spare is None and state == JobState.RUNNING and now >= self.retry_at and program is not None:
            self._start(program, now)

    def _start(self, program: Program, now: float) -> None:
        token = uuid.uuid4().hex
        base = self.state_dir / "spare" / self.cfg.name
        base.mkdir(parents=True, exist_ok=True)
        control = base / f"control-{token}.fifo"
        events = base / f"events-{token}.jsonl"
        try:
            self.oscalls.mkfifo(control, 0o600)
        except OSError as exc:
            self.log.warning("spare_not_started", error=str(exc))
            self.retry_at = now + RETRY_MAX
            return
        env = launch.trainer_env(self.cfg, events, token)
        env[SPARE_CONTROL_ENV] = str(control)
        env[SPARE_DEVICE_ENV] = self.cfg.device
        preload = (BUILTIN_PRELOAD if self.cfg.workflow == "builtin" else LIBRARY_PRELOAD.get(self.cfg.workflow, [])) \
            + list(self.cfg.spare_preload)
        env[SPARE_PRELOAD_ENV] = ",".join(preload)
        if program.plain_spare:
            env[SPARE_PLAIN_ENV] = "1"  # skrl / rl_games: no rsl_rl to import, no shim after go
        assert program.spare_head is not None
        spec = LaunchSpec(job=self.cfg, argv=program.spare_head + [SPARE_FLAG], trainer_args=[], env=env,
                          cwd=launch.workdir(self.cfg, self.state_dir),
                          log_path=self.state_dir / "logs" / f"{self.cfg.name}.log", token=token)
        try:
            handle = self.runtime.start(spec)
        except Exception as exc:  # noqa: BLE001 - a spare that cannot start is no reason to touch the job
            control.unlink(missing_ok=True)
            self._event("spare_exited", detail=f"failed to start: {exc}", retry_in_seconds=RETRY_MAX)
            self.retry_at = now + RETRY_MAX
            return
        self.spare = _Spare(handle, token, control, ShimEvents(events), now)
        self._event("spare_started", pid=handle.pid)

    def ready_token(self) -> str | None:
        sp = self.spare
        return sp.token if sp is not None and sp.ready else None

    def take(self, go: dict[str, Any]) -> tuple[Handle, str] | None:
        """Hand the attempt to a ready spare: (its handle, its launch token), or None to launch cold."""
        sp = self.spare
        if sp is None or not sp.ready or self.runtime.poll(sp.handle) is not None:
            return None
        line = (json.dumps(go) + "\n").encode()
        try:
            fd = self.oscalls.open_fd(sp.control, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:  # ENXIO: nobody reads the FIFO any more (the spare is going away)
            self.log.warning("spare_handover_failed", error=str(exc))
            self.kill("handover failed")
            return None
        try:
            written = self.oscalls.write_fd(fd, line)  # one write below PIPE_BUF-sized chunks is not guaranteed: check
            while written < len(line):
                written += self.oscalls.write_fd(fd, line[written:])
        except OSError as exc:
            self.log.warning("spare_handover_failed", error=str(exc))
            self.oscalls.close_fd(fd)
            self.kill("handover failed")
            return None
        self.oscalls.close_fd(fd)
        self.spare = None
        sp.control.unlink(missing_ok=True)
        # the attempt's output starts here: what the dead trainer wrote after the spare started is not the
        # attempt's (its exit reason and a CUDA out-of-memory are read from this offset on, joblogs.py)
        log_path = sp.handle.state.get("log_path")
        if log_path:
            try:
                sp.handle.state["log_offset"] = self.oscalls.file_size(log_path)
            except OSError:
                pass
        return sp.handle, sp.token

    def kill(self, why: str) -> None:
        sp = self.spare
        if sp is None:
            return
        try:
            self.runtime.kill(sp.handle)
        except Exception as exc:  # noqa: BLE001
            self.log.warning("spare_kill_failed", error=str(exc))
        self._drop(sp)
        self._event("spare_stopped", pid=sp.handle.pid, reason=why)

    def _drop(self, sp: _Spare) -> None:
        if self.spare is sp:
            self.spare = None
        sp.control.unlink(missing_ok=True)
        try:
            self.runtime.cleanup(sp.handle)
        except Exception:  # noqa: BLE001
            pass

    def kill_leftover(self, token: str | None) -> None:
        """A spare from a previous supervisor (it exits by itself when its parent dies; make sure)."""
        finder = getattr(self.runtime, "find", None)
        if not token or finder is None:
            return
        handle = finder(self.cfg, token)
        if handle is not None:
            self.runtime.kill(handle)
            self._event("spare_stopped", pid=handle.pid, reason="left by the previous supervisor")

    # ---- read side -------------------------------------------------------------------------
    @property
    def token(self) -> str | None:
        return self.spare.token if self.spare else None

    def status(self) -> dict[str, Any]:
        sp = self.spare
        if sp is None:
            return {"state": "off" if self.off_reason else "none", "reason": self.off_reason}
        rss = _rss_bytes(sp.handle.pid, self.oscalls)
        return {"state": "ready" if sp.ready else "starting", "pid": sp.handle.pid,
                "rss_bytes": rss if rss is not None else sp.facts.get("rss_bytes"),
                "preload_seconds": sp.facts.get("preload_seconds"),
                "cuda_memory_bytes": sp.facts.get("cuda_memory_bytes")}


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


