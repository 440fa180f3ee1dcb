"""Carries out a LaunchPlan (planner.py): the attempt and its token are saved before anything is spawned, the
ready spare takes the attempt over (or the runtime starts it cold), and the handle is saved right after. A launch
that cannot be saved, or that the runtime fails to start, is answered with a `LaunchRefused` for the machine."""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path
from typing import Callable

from ..runtimes import trainer_command
from ..jobs.messages import LaunchRefused, TrainerConfigError
from ..runtimes.base import ExitStatus, Handle, LaunchSpec, Runtime
from ..runtimes.container_spec import container_args
from .spare import SpareKeeper, go_message
from .spare_effects import SpareEffect
from .crashpoint import crash_point
from .observer import AttemptObserver
from .planner import LaunchPlan, started_event
from .record import JobRecord
from .setting import JobSetting
from .start_fault import start_fault


class AttemptStarter:
    """The launch's last step, inside the runner's effect interpreter (`_apply` → `_launch` → planner → starter):
    the interpreter's own acts are handed in, `spawn` (the runtime's start) and `apply_spare` (a spare's kill)."""

    def __init__(self, setting: JobSetting, runtime: Runtime, record: JobRecord, observer: AttemptObserver,
                 spares: SpareKeeper, *, spawn: Callable[[LaunchSpec], Handle],
                 apply_spare: Callable[[list[SpareEffect]], None]):
        self.setting, self.runtime, self.record, self.observer, self.spares = setting, runtime, record, observer, spares
        self.spawn, self.apply_spare = spawn, apply_spare

    def start(self, plan: LaunchPlan) -> LaunchRefused | None:
        record, attempt, spec = self.record, plan.attempt, plan.spec
        record.history.attempts.append(attempt)
        if plan.spare_token and self.spares.spare is not None:
            attempt.handle = dict(self.spares.spare.handle.state)  # the spare becomes this attempt's trainer
        if not record.persist():
            # a trainer we could not find again after a crash would be a duplicate waiting to happen
            record.never_started(attempt, "not started: state not saved")
            return LaunchRefused(f"not starting: {record.persist_error}", crash_loop=False)
        crash_point("launch.after_intent")
        handle = self._hand_to_spare(plan) if plan.spare_token else None
        warm = handle is not None
        if plan.spare_token and handle is None:  # the spare went away: a cold start, under a token of its own
            attempt.token, attempt.handle = uuid.uuid4().hex, {}
            spec = replace(spec, token=attempt.token, env={**spec.env, trainer_command.LAUNCH_TOKEN_ENV: attempt.token})
            if not record.persist():
                record.never_started(attempt, "not started: state not saved")
                return LaunchRefused(f"not starting: {record.persist_error}", crash_loop=False)
        if handle is None:
            try:
                handle = self.spawn(spec)
            except Exception as exc:  # noqa: BLE001 - any launch failure is a failed attempt, not a crash of ours
                fault = start_fault(exc, spec.argv[0] if spec.argv else "", self.runtime.name,
                                    "command" if self.setting.cfg.command else "launcher")
                record.event("start_failed", attempt=attempt.number, error=str(exc),
                             **({"kind": fault.kind, "program": fault.subject} if fault else {}))
                self.observer.record_exit(attempt, ExitStatus(code=None, detail=f"failed to start: {exc}"))
                # one no retry fixes (a program its user may not execute, or that is not there) fails the job at once
                error = None if fault is None else TrainerConfigError(fault.kind, fault.what, fault.line, fault.key,
                                                                      fault.fix(self.setting.cfg.name))
                return LaunchRefused(f"failed to start: {exc}", config_error=error)
        crash_point("launch.after_effect")
        attempt.handle = dict(handle.state)
        handed = self.spares.handed if warm else None  # held to the hand-over's deadlines (attempt/deadlines.py)
        self.observer.started(handle, plan.shim_events, plan.run_dirs_before,
                              spare=(handed.events, handed.mode, handed.go_wall) if handed is not None else None)
        record.persist()
        contract = self.setting.resolved.workflow.contract if self.setting.resolved else None
        record.event("started", **started_event(plan, handle.pid, self.setting.cfg, contract, warm))
        return None

    def _hand_to_spare(self, plan: LaunchPlan) -> Handle | None:
        """Give the attempt's command line to the ready spare; its handle, or None to start cold."""
        resume, cfg = plan.attempt.resume_from or {}, self.setting.cfg
        # a container spare is handed the command line and cwd the attempt's container would have run
        args = container_args(cfg, plan.args) if cfg.in_container else plan.args
        cwd = Path(trainer_command.container_workdir(cfg)) if cfg.in_container else plan.spec.cwd
        taken = self.spares.take(go_message(plan.program.go_argv(args), cwd, plan.program.plain_spare, plan.spec.env),
                                 attempt_args=plan.args, checkpoint=resume.get("path"))  # a booted spare needs both
        if isinstance(taken, list):  # no spare took it (one that could not is killed first)
            self.apply_spare(taken)
            return None
        self.persist_spare_token()
        return taken[0]

    def persist_spare_token(self) -> None:
        history = self.record.history
        if history.spare_token != self.spares.token:
            history.spare_token = self.spares.token
            self.record.persist()
