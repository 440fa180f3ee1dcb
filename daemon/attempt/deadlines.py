"""The waits of a launch and their deadlines (issue 28): which one a starting attempt is on, since when, how long it
may last. Pure: the observer (observer.py) feeds it what it saw and asks; the machine decides what an overdue wait
means (jobs/machine.py `_launch_overdue`); `isaacd status` shows the wait (attempt/job_status.py, render.py).

A starting attempt waits, in order, on:

* ``runtime_start``: the runtime to report the trainer's process (a podman/systemd container is created and started
  on the runtime's worker thread; the process runtime has its pid at once). Not while a placing runtime (ray) says
  it waits for room: that is a queue, not a hang.
* ``spare_ack``: a spare handed the attempt acknowledging the go line (its ``spare_go`` event). A parked spare reads
  the line the moment it is written (it sleeps in poll(2) on the FIFO): milliseconds. One that does not is frozen
  (SIGSTOP, a driver call that never returns after the GPU fault that killed the trainer, swapped out).
* ``spare_first_step``: the spare, acknowledged, reporting its first training step (the shim's
  ``first_iteration``, or a new TensorBoard step). A booted spare only loads the checkpoint first: a few of the
  job's iterations. An imports-only spare builds the environment first, as a cold start does.

Before an attempt exists, its launch may wait on:

* ``launch_preparation``: the launch's preparation (daemon/launch/: the resume point's deep check, the owner's
  directories, the environment) on its worker thread (launch/worker.py): milliseconds, unless a disk hangs (NFS).
  Bounded by ``runtime_start_timeout``; past it the launch is refused as a crash (backoff, the crash-loop window).
* ``launcher_probe``: a pip-installed Isaac Lab's launcher answering isaacd's version probe (workflows/installed.py,
  on a thread of its own; the planner's `WaitingForLauncher`). Bounded by ``runtime_start_timeout`` too (a launcher
  is part of starting the trainer); the probe's own timeout (60 s) usually ends it first, with the probe's error.

A cold start's first step has no deadline here: how long an Isaac Sim boot takes is the no_progress watchdog's
business (its timeout counts from the attempt's start).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config.schema import LaunchDeadlines

RUNTIME_START, SPARE_ACK, SPARE_FIRST_STEP = "runtime_start", "spare_ack", "spare_first_step"
LAUNCHER_PROBE, LAUNCH_PREPARATION = "launcher_probe", "launch_preparation"
LABELS = {RUNTIME_START: "the runtime to start the trainer", SPARE_ACK: "the spare's ack of the go",
          SPARE_FIRST_STEP: "the spare's first step",
          LAUNCHER_PROBE: "the launcher's answer to isaacd's Isaac Lab version probe",
          LAUNCH_PREPARATION: "the launch's preparation"}
COLD_STARTUP_FACTOR = 2.0  # an imports-only spare's first step: this many of the job's last cold start-ups on top
# the runtimes whose start is bounded: ray reports the trainer's pid only once its node has pulled and started the
# container, and a pull of an Isaac Lab image may take longer than any fixed bound (its placing and launching phases
# show in `status` as `waiting`)
BOUNDED_START_RUNTIMES = ("process", "podman", "systemd")


@dataclass(frozen=True)
class LaunchWait:
    """One wait of a starting attempt: what, since when (monotonic), and its bound (None: no deadline here)."""

    what: str
    since: float
    bound: float | None

    @property
    def label(self) -> str:
        return LABELS.get(self.what, self.what)

    def waited(self, now: float) -> float:
        return max(0.0, now - self.since)

    def overdue(self, now: float) -> bool:
        return self.bound is not None and self.waited(now) > self.bound


@dataclass
class Handover:
    """What is known of one hand-over to a spare (the observer keeps it for the attempt the spare became)."""

    mode: str  # "booted" or "imports"
    go_mono: float  # when the go line was written (monotonic)
    go_wall: float  # the same, wall clock: the spare's spare_go event carries its own wall time
    first_step_bound: float | None  # seconds after the ack (first_step_bound below)
    acked_mono: float | None = None
    ack_seconds: float | None = None  # the spare's spare_go time minus the go's: the latency a bench reads


def first_step_bound(d: LaunchDeadlines, mode: str, iteration_seconds: float | None,
                     cold_startup_seconds: float | None) -> float | None:
    """Seconds from the ack to the first step: a few of the job's iterations (never under the floor); an imports-only
    spare also builds the environment, so it gets the job's last cold start-up on top (unknown: no deadline)."""
    steps = d.spare_first_step_min
    if iteration_seconds is not None and iteration_seconds > 0:
        steps = max(steps, d.spare_first_step_iterations * iteration_seconds)
    if mode == "booted":
        return steps
    if cold_startup_seconds is None:
        return None
    return steps + COLD_STARTUP_FACTOR * cold_startup_seconds


def current_wait(d: LaunchDeadlines, started_mono: float, has_pid: bool, placing: bool,
                 handover: Handover | None, stepped: bool) -> LaunchWait | None:
    """The wait a starting attempt is on, or None (placing, training, or a cold start's boot). `has_pid`: the
    runtime reported the trainer's process (pass True for a runtime whose start is not bounded here)."""
    if stepped or placing:
        return None
    if handover is not None:
        if handover.acked_mono is None:
            return LaunchWait(SPARE_ACK, handover.go_mono, d.spare_ack_timeout)
        return LaunchWait(SPARE_FIRST_STEP, handover.acked_mono, handover.first_step_bound)
    if not has_pid:
        return LaunchWait(RUNTIME_START, started_mono, d.runtime_start_timeout)
    return None


def probe_wait(d: LaunchDeadlines, since: float) -> LaunchWait:
    """A launch waiting for its launcher's answer to the version probe since `since` (monotonic)."""
    return LaunchWait(LAUNCHER_PROBE, since, d.runtime_start_timeout)


def preparation_wait(d: LaunchDeadlines, since: float) -> LaunchWait:
    """A launch whose preparation (launch/worker.py) has run on its thread since `since` (monotonic)."""
    return LaunchWait(LAUNCH_PREPARATION, since, d.runtime_start_timeout)


def preparation_overdue_reason(wait: LaunchWait, now: float) -> str:
    """The one line a launch whose preparation ran past its bound is refused with (a crash: backoff, window)."""
    return (f"the launch's preparation (the resume point's check, the job's directories) did not finish in "
            f"{wait.waited(now):.1f} s (bound {wait.bound:g} s, [jobs.launch] runtime_start_timeout): a hung disk? "
            "not started")


def probe_overdue_reason(wait: LaunchWait, launcher: list[str], now: float) -> str:
    """The one line a launch whose launcher's probe ran past its bound is refused with (a crash: backoff, window)."""
    return (f"launcher {' '.join(launcher)!r} did not answer isaacd's Isaac Lab version probe in "
            f"{wait.waited(now):.1f} s (bound {wait.bound:g} s, [jobs.launch] runtime_start_timeout); not started")


def overdue_reason(wait: LaunchWait, now: float) -> str:
    """The one line an overdue wait ends the attempt with."""
    bound = f"{wait.bound:g} s" if wait.bound is not None else "no bound"
    if wait.what == RUNTIME_START:
        return f"the runtime did not start the trainer within {bound} (runtime_start_timeout); killed"
    key = "spare_ack_timeout" if wait.what == SPARE_ACK else "spare_first_step_*"
    return (f"spare hand-over timed out: no {'ack of the go' if wait.what == SPARE_ACK else 'first step'} in "
            f"{wait.waited(now):.1f} s (bound {bound}, [jobs.launch] {key}); killed, starting cold")


def iteration_seconds(prev: tuple[int, float] | None, step: int, wall: float) -> float | None:
    """Seconds per iteration between two TensorBoard steps (step, wall time), or None when they say nothing."""
    if prev is None or step <= prev[0] or wall < prev[1]:
        return None
    return (wall - prev[1]) / (step - prev[0])
