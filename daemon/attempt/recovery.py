"""What a supervisor (re)start finds, said to the machine as messages: nothing here signals, kills or launches.

The open attempt's trainer is looked for by its saved handle, or by the token saved before its spawn. What was
found (`Found`) means what `jobs.machine.recovered` says: a trainer alive is adopted (`Adopted`: the machine
re-sends a stop that was in flight), a launch no trainer carries the token of is replayed (`LaunchUnfinished`), a
trainer gone meanwhile ended (`Exited`, "lost"), a job at rest because of a supervisor shutdown resumes (`Start`),
one not to start by itself is stopped (`Stop`). Here only the history fact that goes with the answer is written
(the attempt watched again, closed as never started, or closed as lost). Replays are
idempotent: a stop is re-signalled only if the trainer never saw it (runner._apply), a launch redone only if no
trainer carries its token."""

from __future__ import annotations

from ..jobs.machine import recovered
from ..jobs.messages import Adopted, Exited, Found, LaunchUnfinished, Message
from ..jobs.model import JobState
from ..runtimes.base import ExitStatus, Handle, Runtime
from .spare import SpareKeeper
from ..history.store import Attempt
from .observer import AttemptObserver
from .record import JobRecord
from .setting import JobSetting


def recovery_messages(setting: JobSetting, runtime: Runtime, record: JobRecord, observer: AttemptObserver,
                      spares: SpareKeeper) -> list[Message]:
    m, history = record.model, record.history
    attempt = history.current
    open_attempt = attempt if attempt is not None and attempt.exit is None else None
    # a trainer is looked for only where the model says one may run (JobState.active): adopting is a runtime call
    handle = (find_trainer(runtime, setting, record, open_attempt)
              if open_attempt is not None and m.state.active else None)
    found = Found(trainer_alive=handle is not None, spawned=open_attempt is not None and bool(open_attempt.handle),
                  attempted=attempt is not None, autostart=setting.cfg.autostart)
    msg = recovered(m, found)  # what it means is the machine's to say; the history fact that goes with it is here
    if isinstance(msg, Adopted) and open_attempt is not None and handle is not None:
        # a hand-over the previous supervisor began is held to its deadlines from here (a spare frozen with the go)
        spare = spares.handed_to(open_attempt.token) if m.state == JobState.STARTING else None
        observer.adopt(open_attempt, handle, spare)
        record.event("adopted", attempt=open_attempt.number, pid=handle.pid, run_dir=open_attempt.run_dir)
    elif isinstance(msg, LaunchUnfinished) and open_attempt is not None:
        # the launch was decided and its attempt saved, but no trainer carries its token
        record.never_started(open_attempt, "never started: the supervisor stopped during the launch")
    elif isinstance(msg, Exited) and open_attempt is not None:
        observer.record_exit(open_attempt, ExitStatus(detail=msg.description))
    return [] if msg is None else [msg]


def leftover_spare(record: JobRecord) -> str | None:
    """The token of a spare the previous supervisor left, one that never took an attempt over (the runner has it
    killed through its interpreter before recovery speaks), or None."""
    history = record.history
    attempt = history.current
    if history.spare_token and (attempt is None or attempt.token != history.spare_token):
        return history.spare_token
    return None


def find_trainer(runtime: Runtime, setting: JobSetting, record: JobRecord, attempt: Attempt) -> Handle | None:
    """The attempt's trainer if it still runs: adopted by its saved handle, or found by its launch token."""
    if attempt.runtime != runtime.name:
        return None
    if attempt.handle:
        return runtime.adopt(setting.cfg, attempt.handle)
    finder = getattr(runtime, "find", None)
    if attempt.token and finder is not None:
        handle = finder(setting.cfg, attempt.token)
        if handle is not None:
            attempt.handle = dict(handle.state)
            record.persist()
        return handle
    return None
