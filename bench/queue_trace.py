#!/usr/bin/env python3
"""The queue of a shared 8-GPU host (issue 31), on a trace: isaacd's queue against plain FIFO.

A seeded trace of `--jobs` Isaac Lab training jobs is played, time-compressed, through a discrete-event simulation
of a scripted host of 8 x H200 (140 GiB each) that drives the real `isaacd.scheduling.scheduler.schedule()`: at
every event (a submission, a job's end, a preempted job's save completing, a minimum run time running out) the
simulation calls `schedule(jobs, gpus, now, limits)` with the jobs as `QueueEntry`s and the GPUs as `Gpu`s, applies
its placements and preemptions, and calls it again at the same instant until it has nothing more to say (the
supervisor's hook does the same, one pass a tick). Two policies run on the same trace, with the same packing:

  isaacd  the jobs' priority classes, `preemptible` as drawn: priorities, backfill of preemptible jobs behind a
          blocked one, preemption with a save (Limits(min_run_seconds=300)).
  fifo    the baseline: every job priority 0 and preemptible = false, ordered by submission alone, so nothing
          starts ahead of a blocked job and nothing is preempted (strict head-of-line FIFO).
  isaacd-exact  (a bound, printed per seed) isaacd with every estimate exact, a waiting job's from its submission
          (every job's length known, none wrong): what estimates could do under these rules.
  isaacd-one-priority  (a diagnosis, printed per seed) isaacd, estimates and all, with every job at one priority:
          what the priority classes cost the makespan.
  isaacd-noest  isaacd with no run-time estimate known (issue 42's "isaacd without estimates"): as issue 31's queue,
          but for a job not preemptible starting beside the room held for a blocked job's saving victims.
  isaacd-exact-longest-first  (a bound, printed per seed) isaacd-exact with, within each priority class, the
          longest job first (its whole run, known from its submission, as its order in place of its submission
          time): what ordering by length could do with knowledge isaacd does not have of a new experiment.

Per seed, `--tail N` (default 3) prints the N jobs that end last under isaacd: their class and length, whether isaacd
had an estimate of them while they waited, how often they were preempted, how many jobs of a higher class submitted
after them started before them, and their start and end under isaacd and FIFO (the makespan's cause, per seed).

isaacd's run-time estimates (issue 42, scheduling/estimates.py), as the simulation gives them to `schedule()` in
each entry (`ends_at`, `run_seconds`, `overran`); the fifo and isaacd-noest arms get none:
  * a running job, once RATE_AFTER iterations of its attempt are done (the estimator leaves out the first SKIP
    and needs MIN_INTERVALS intervals): its iterations left x its iteration time x a factor drawn per attempt,
    uniform 1 +- RATE_NOISE (the median of 20 intervals of a real trainer is not exact: an assumption). The
    simulated trainers run at a constant speed, so this estimate is near-exact here; a real one drifts as neighbours
    come and go (issue 31's H200 run: 0.55-0.75 x a job's rate alone when three share a GPU), which `estimate_error`
    events measure on a real host.
  * before that, and for a job waiting: the last completed run of the same kind (task, library, num_envs) in this
    simulation: its measured start-up and iteration time x the iterations left. Only the four Isaac Lab tasks recur
    (cartpole, cartpole-camera, g1-rough, shadow-hand); the others are each a new experiment, with no history. The
    history starts empty (a fresh host), and start-ups vary 20-60 s from job to job: the history's error.
  * a job that started ahead of a reservation on its estimate and still runs at it overran: a preemptible one is
    preempted if the blocked job needs its room (the scheduler's rule), one not preemptible is `overran` from then.
The estimates' error: for each completed attempt, took / said of its first estimate of each source.

What a preemption costs, as isaacd does it (trainer/shim.py's docstring, "Stop before the first iteration" and
"Save on stop"): a victim that has completed an iteration in this process finishes the iteration in flight (kept:
it is progress), saves `model_<N>.pt` and exits, SAVE_S = 5 s after that boundary (an assumption: the save, the
script's cleanup, the exit); one still booting or in its first iteration exits at once (1 s) with nothing to save
(its progress is its last checkpoint). Its
GPUs come free when it has exited; it goes back to the queue in its old place (same submission time) and pays its
start-up again when placed. Wasted GPU-seconds of preemptions = GPU-seconds (x ranks) that kept no iteration: a
boot (and partial first iteration) cut short, the save and exit, and each start-up paid again on a resume.
Iterations lost = iterations trained but in no checkpoint when a stop ended (a resume redoes them), summed from
the simulation's own counts; with the shim's contract it is 0 by construction, so it checks the scheduler never
kills a job outside that path (the real 0 is proven by the e2e tests on real trainers).

No warm spares are modelled (every job's `spare_bytes` = 0; the spare path is tests/test_scheduler.py's). The
scripted NVML reads each GPU's used memory as the sum of what the processes on it hold: a sized job exactly its
ask, a whole-GPU job its own footprint (drawn below), passed as `Gpu.used_bytes` as the hook does; `--asks-only`
passes None instead (only the asks count).

The trace (one `random.Random(seed)` per seed; kinds drawn by weight):

  kind             ranks  GPU memory per rank          iteration           iterations   weight
  cartpole         1      3.3 GB                       4096*16/510k s      150          0.10
  cartpole-camera  1      16.7 GB                      1024*64/32k s       200          0.05
  g1-rough         1      6.1 GB                       4096*24/82k s       5000         0.15
  shadow-hand      1      6.4 GB                       8192*16/170k s      3000         0.10
  large            1      12-40 GiB                    1-3 s               1000-3000    0.25
  whole            1      the whole GPU (uses 60-130)  2-4 s               1500-3000    0.25
  gang             2      12-40 GiB, or whole (half)   1-2 s               2000-4000    0.10

  Sources: VRAM of the first four at those env counts: Isaac Lab's docs/source/overview/reinforcement-learning/
  performance_benchmarks.rst ("Memory Consumption"); iteration = envs x num_steps_per_env / "Environment Step,
  Inference, and Train FPS" on one RTX 4090 (same page; an H200 is faster, which shortens every run alike);
  num_steps_per_env and max_iterations from the installed Isaac Lab 3.0 agents' configs (.venv-isaaclab3 .../
  isaaclab_tasks/core/cartpole/agents/rsl_rl_ppo_cfg.py:23-24 and :87-88, core/velocity/config/g1/agents/
  rsl_rl_ppo_cfg.py:13-14, core/reorient/config/shadow_hand/agents/rsl_rl_ppo_cfg.py:15-16). "large" (bigger
  scenes, cameras: the 1024-env camera cart-pole is already 16.7 GB), "whole" (e.g. 16x the envs of a 6.1 GB G1)
  and the gangs are the issue's brief, not measurements.
  Start-up (cold start, paid at every placement): uniform 20-60 s; the real Isaac Lab 3.0 on the H200 reaches
  its first iteration in 26 s with warm compile caches, 50 s with an empty Warp cache (docs/recovery.md,
  "Compile caches that survive a restart").
  Priority class: high 10 (15 %), normal 5 (50 %), low 0 (35 %). Preemptible: 85 % of jobs.
  Submissions: a Poisson stream, one every 150 s on average from t = 0 (a lab's day of submissions, front-loaded
  against several hours of work, so a queue forms).

Figures. Waits: "first" = submission to first placement; "queued" = that plus every stretch back in the queue
after a preemption (the goal is judged on "queued", the stricter). GPU-memory utilisation = time-weighted allocated
memory (a whole-GPU job allocates the whole GPU; bytes beyond a GPU's memory do not count) / capacity over the
makespan (t = 0, the first submission, to the last completion); also printed over the time some job waited. Each
seed is one trace; the summary is the median over the seeds of each figure, and each ratio isaacd / fifo is taken
on one seed's trace, then the median over the seeds. At every event and every pass the simulation checks from its
own books that no GPU holds more than its memory and counts each time one does. A run whose scheduler passes
exceed MAX_PASSES (schedule() acting for ever and nothing finishing) is cut short and reported as a livelock, its
unfinished jobs as not completed.

    .venv/bin/python bench/queue_trace.py                  # 5 seeds of 40 jobs: 0.2 s on this 2-core box
    .venv/bin/python bench/queue_trace.py --seeds 9 --json /tmp/queue.json
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import statistics
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from isaacd.scheduling.estimates import MIN_INTERVALS, SKIP
from isaacd.scheduling.scheduler import GiB, Gpu, Limits, QueueEntry, Request, schedule

GB = 10**9
GPUS = 8
GPU_BYTES = 140 * GiB
CLASSES = {"high": 10, "normal": 5, "low": 0}
CLASS_WEIGHTS = {"high": 0.15, "normal": 0.50, "low": 0.35}
PREEMPTIBLE_SHARE = 0.85
MEAN_GAP_S = 150.0
MIN_RUN_S = 300.0
SAVE_S = 5.0  # the shim's save at the boundary, then the script's cleanup and the process's exit (an assumption)
EARLY_EXIT_S = 1.0  # a stop before the first iteration: the shim exits at once (trainer/shim.py, docstring)
PASSES_PER_INSTANT = 50  # schedule() again at the same instant until it is quiet; more is a livelock
# schedule() calls in one simulation before it is called a livelock: 40 jobs take 130-200 (before f0a07d0 mended the
# scheduler, seed 4's preemption storm took 125 000 and ended; a 2-GPU host's livelock never ended)
MAX_PASSES = 200_000
POLICIES = ("isaacd", "fifo", "isaacd-noest")
EXACT = "isaacd-exact"  # isaacd with every estimate exact, every job's from its submission: what estimates could do
ONE_PRIORITY = "isaacd-one-priority"  # isaacd's queue with every job at one priority: what the classes cost
# isaacd with every estimate exact AND, within each priority class, the longest job first (its whole run, known from
# its submission, in place of its submission time as the order within its class): what the order could do with
# knowledge isaacd does not have for a new experiment (a diagnosis, not isaacd's rule)
LONGEST = "isaacd-exact-longest-first"
RATE_AFTER = SKIP + MIN_INTERVALS + 1  # iterations of an attempt before its own rate is known (estimates.py)
RATE_NOISE = 0.03  # the rate estimate's error, uniform +- this (an assumption)
HISTORY_KINDS = ("cartpole", "cartpole-camera", "g1-rough", "shadow-hand")  # the tasks that recur


@dataclass(frozen=True)
class Kind:
    name: str
    weight: float
    ranks: int
    mem_gib: tuple[float, float] | None  # per rank, a range (low == high: measured); None: the whole GPU
    iteration_s: tuple[float, float]
    iterations: tuple[int, int]
    whole_share: float = 0.0  # a gang: the share drawn as whole GPUs instead


KINDS = (
    Kind("cartpole", 0.10, 1, (3.3 * GB / GiB,) * 2, (4096 * 16 / 510_000,) * 2, (150, 150)),
    Kind("cartpole-camera", 0.05, 1, (16.7 * GB / GiB,) * 2, (1024 * 64 / 32_000,) * 2, (200, 200)),
    Kind("g1-rough", 0.15, 1, (6.1 * GB / GiB,) * 2, (4096 * 24 / 82_000,) * 2, (5000, 5000)),
    Kind("shadow-hand", 0.10, 1, (6.4 * GB / GiB,) * 2, (8192 * 16 / 170_000,) * 2, (3000, 3000)),
    Kind("large", 0.25, 1, (12.0, 40.0), (1.0, 3.0), (1000, 3000)),
    Kind("whole", 0.25, 1, None, (2.0, 4.0), (1500, 3000)),
    Kind("gang", 0.10, 2, (12.0, 40.0), (1.0, 2.0), (2000, 4000), whole_share=0.5),
)
WHOLE_FOOTPRINT_GIB = (60.0, 130.0)
STARTUP_S = (20.0, 60.0)


@dataclass(frozen=True)
class TraceJob:
    name: str
    kind: str
    submit_s: float
    ranks: int
    memory_bytes: int | None  # per rank; None: whole GPUs
    footprint_bytes: int  # what NVML reads per rank
    cls: str  # high / normal / low
    iterations: int
    iteration_s: float
    startup_s: float
    preemptible: bool

    @property
    def priority(self) -> int:
        return CLASSES[self.cls]


def make_trace(seed: int, n_jobs: int = 40) -> list[TraceJob]:
    """The same jobs for the same seed, whatever the policy."""
    rng = random.Random(seed)
    jobs: list[TraceJob] = []
    t = 0.0
    for i in range(n_jobs):
        kind = rng.choices(KINDS, [k.weight for k in KINDS])[0]
        whole = kind.mem_gib is None or rng.random() < kind.whole_share
        footprint_gib = rng.uniform(*WHOLE_FOOTPRINT_GIB) if whole else rng.uniform(*kind.mem_gib)  # type: ignore[misc]
        cls = rng.choices(list(CLASS_WEIGHTS), list(CLASS_WEIGHTS.values()))[0]
        jobs.append(TraceJob(
            name=f"j{i:02d}-{kind.name}", kind=kind.name, submit_s=round(t, 3), ranks=kind.ranks,
            memory_bytes=None if whole else int(footprint_gib * GiB), footprint_bytes=int(footprint_gib * GiB),
            cls=cls, iterations=rng.randint(*kind.iterations), iteration_s=rng.uniform(*kind.iteration_s),
            startup_s=rng.uniform(*STARTUP_S), preemptible=rng.random() < PREEMPTIBLE_SHARE))
        t += rng.expovariate(1.0 / MEAN_GAP_S)
    return jobs


# ---- the simulation ------------------------------------------------------------------------------------------------
@dataclass
class _Live:
    """One job as the simulated host sees it."""

    spec: TraceJob
    saved: int = 0  # iterations in its newest checkpoint (what a resume starts from)
    trained: int = 0  # iterations trained over all attempts (a resume redoes trained - saved of a stop)
    waiting: bool = False
    placement: tuple[int, ...] = ()
    running_since: float | None = None
    backfilled: bool = False
    stopping: bool = False
    attempt: int = 0
    boot_end: float = 0.0
    queued_since: float | None = None
    first_start: float | None = None
    wait_queued: float = 0.0
    preempted: int = 0
    completed_at: float | None = None
    placed_at: float = 0.0
    left_at_start: int = 0  # iterations left when this attempt started
    rate_factor: float = 1.0  # this attempt's rate estimate / its true iteration time
    said: dict[str, tuple[float, float]] = field(default_factory=dict)  # source -> (when, end): first of attempt
    overran: bool = False
    estimated: bool = False  # it had a run-time estimate when it was first placed (what a length order could use)
    last_start: float | None = None  # its last placement (a resume after a preemption)


@dataclass
class Result:
    policy: str
    utilisation: float  # time-weighted allocated GPU memory / capacity over the makespan
    utilisation_queued: float  # the same over the time some job waited in the queue (did GPU memory sit idle then?)
    makespan_s: float
    wait_first: dict[str, list[float]]  # class -> the jobs' waits, seconds
    wait_queued: dict[str, list[float]]
    preemptions: int
    backfills_preempted: int
    iterations_lost: int
    wasted_gpu_s: float
    overcommit_gpu_s: float = 0.0  # seconds a GPU held more than its memory, summed over the GPUs
    overcommits: list[str] = field(default_factory=list)  # each time a GPU came to hold more than its memory
    incomplete: list[str] = field(default_factory=list)  # jobs that did not end with exactly their iterations
    livelock: str | None = None  # why the simulation was cut short: schedule() kept acting and nothing finished
    estimate_errors: dict[str, list[float]] = field(default_factory=dict)  # source -> took / said per attempt
    overruns: int = 0  # a job still running at the reservation it started ahead of on its estimate
    ahead_on_estimate: int = 0  # starts ahead of a blocked job on an estimate that ended before its reservation
    strict_beside: int = 0  # starts ahead of a blocked job, not preemptible, beside its reservation
    # job -> (first start, last start, completion, times preempted, had an estimate when first placed): the tail's
    # diagnosis
    jobs: dict[str, tuple[float | None, float | None, float | None, int, bool]] = field(default_factory=dict)


class QueueSim:
    """Plays a trace through `schedule()` under one policy."""

    def __init__(self, trace: list[TraceJob], policy: str, limits: Limits = Limits(min_run_seconds=MIN_RUN_S),
                 nvml_used: bool = True, save_s: float = SAVE_S, gpus: int = GPUS,
                 max_passes: int = MAX_PASSES) -> None:
        if policy not in (*POLICIES, EXACT, ONE_PRIORITY, LONGEST):
            raise ValueError(f"policy {policy!r}: one of {', '.join(POLICIES)}, {EXACT}, {ONE_PRIORITY}, {LONGEST}")
        self.estimating, self.exact = policy in ("isaacd", EXACT, ONE_PRIORITY, LONGEST), policy in (EXACT, LONGEST)
        self.history: dict[str, tuple[float, float]] = {}  # kind -> (seconds per iteration, start-up) measured
        self.estimate_errors: dict[str, list[float]] = {"history": [], "rate": []}
        self.overruns = self.ahead_on_estimate = self.strict_beside = 0
        self._ticks: set[float] = set()
        self.policy, self.limits, self.nvml_used, self.save_s, self.n_gpus = policy, limits, nvml_used, save_s, gpus
        self.jobs = {j.name: _Live(j) for j in trace}
        self.events: list[tuple[float, int, str, str, int]] = []
        self._seq = 0
        self.now = 0.0
        self.alloc_integral = 0.0  # byte-seconds
        self.queued_alloc_integral = 0.0  # byte-seconds while some job waited
        self.queued_time = 0.0
        self.preemptions = 0
        self.backfills_preempted = 0
        self.lost = 0
        self.wasted = 0.0
        self.overcommits: list[str] = []
        self.overcommit_gpu_s = 0.0
        self.passes, self.max_passes = 0, max_passes
        self.livelock: str | None = None
        self._over: set[int] = set()  # the GPUs overcommitted now
        for j in trace:
            self._at(j.submit_s, "submit", j.name, 0)

    def _at(self, t: float, kind: str, name: str, attempt: int) -> None:
        self._seq += 1
        heapq.heappush(self.events, (t, self._seq, kind, name, attempt))

    # -- inputs of schedule() --
    def queued(self, live: _Live) -> QueueEntry:
        s = live.spec
        isaacd = self.policy != "fifo"
        order = -(s.startup_s + s.iterations * s.iteration_s) if self.policy == LONGEST else s.submit_s
        e = QueueEntry(s.name, Request(s.ranks, s.memory_bytes), s.priority if isaacd and self.policy !=
                       ONE_PRIORITY else 0, order,
                       s.preemptible if isaacd else False, live.waiting, live.placement, live.running_since,
                       live.backfilled, live.stopping)
        if not self.estimating:
            return e
        left = s.iterations - live.saved
        if live.placement:
            return QueueEntry(**{**e.__dict__, "ends_at": self._ends_at(live), "overran": live.overran})
        past = self.history.get(s.kind) if not self.exact else (s.iteration_s, s.startup_s)
        run = None if past is None else past[1] + left * past[0]
        return QueueEntry(**{**e.__dict__, "run_seconds": run, "overran": live.overran})

    def _ends_at(self, live: _Live) -> float | None:
        """A placed job's expected end as isaacd's estimator would say it now."""
        s = live.spec
        if self.exact:
            return live.boot_end + live.left_at_start * s.iteration_s
        if self.now >= live.boot_end + RATE_AFTER * s.iteration_s:
            return live.boot_end + live.left_at_start * s.iteration_s * live.rate_factor
        past = self.history.get(s.kind)
        if past is None:
            return None
        return max(live.placed_at + past[1], self.now) + live.left_at_start * past[0]

    def gpus(self) -> list[Gpu]:
        used = [0] * self.n_gpus
        for live in self.jobs.values():
            for i in live.placement:
                used[i] += live.spec.footprint_bytes
        return [Gpu(i, GPU_BYTES, used[i] if self.nvml_used else None) for i in range(self.n_gpus)]

    def allocated(self) -> tuple[int, list[int]]:
        """Bytes allocated (a whole GPU counts whole) per GPU from the simulation's own books, and their sum capped
        at each GPU's memory: an overcommitted byte is no use (a real GPU would answer it with a CUDA OOM), so it
        never raises the utilisation; `_check` reports it instead."""
        per = [0] * self.n_gpus
        for live in self.jobs.values():
            for i in live.placement:
                per[i] += GPU_BYTES if live.spec.memory_bytes is None else live.spec.memory_bytes
        return sum(min(b, GPU_BYTES) for b in per), per

    # -- the loop --
    def run(self) -> Result:
        while self.events and self.livelock is None:
            t = self.events[0][0]
            alloc = self.allocated()[0] * (t - self.now)
            self.overcommit_gpu_s += len(self._over) * (t - self.now)
            self.alloc_integral += alloc
            if any(j.waiting for j in self.jobs.values()):
                self.queued_alloc_integral += alloc
                self.queued_time += t - self.now
            self.now = t
            while self.events and self.events[0][0] == t:
                _, _, kind, name, attempt = heapq.heappop(self.events)
                getattr(self, f"_on_{kind}")(self.jobs.get(name), attempt)
            self._schedule()
            self._check()
        return self._result()

    def _schedule(self) -> None:
        for _ in range(PASSES_PER_INSTANT):
            self.passes += 1
            if self.passes > self.max_passes:
                self._livelocked(f"{self.max_passes} scheduler passes")
                return
            # the jobs the host knows now: submitted and not completed (the others hold nothing and ask nothing)
            active = [self.queued(j) for j in self.jobs.values() if j.waiting or j.placement]
            s = schedule(active, self.gpus(), self.now, self.limits)
            if s.spare_drops:
                raise AssertionError(f"spare drops with no spares modelled: {s.spare_drops}")
            if s.valid_until > self.now and math.isfinite(s.valid_until) and s.valid_until not in self._ticks:
                self._ticks.add(s.valid_until)  # the answer may change then (a reservation, an expected end)
                self._at(s.valid_until, "tick", "", 0)
            for p in s.placements:
                self._place(self.jobs[p.job], p.gpus, p.backfill)
                if p.backfill and p.deadline is None and not self.queued(self.jobs[p.job]).preemptible:
                    self.strict_beside += 1  # not preemptible, started ahead beside a reservation
                if p.deadline is not None:
                    self.ahead_on_estimate += 1
                    self._at(p.deadline + 1e-6, "deadline", p.job, self.jobs[p.job].attempt)
            for p in s.preemptions:
                self._preempt(self.jobs[p.victim])
            if not s.placements and not s.preemptions:
                return
            self._check()
        self._livelocked(f"{PASSES_PER_INSTANT} passes at one instant")

    def _livelocked(self, after: str) -> None:
        waiting = sorted(j.spec.name for j in self.jobs.values() if j.waiting)
        self.livelock = (f"cut short at t = {self.now:.0f} s after {after}, {self.preemptions} preemptions; waiting: "
                         f"{', '.join(waiting) or 'none'}")

    def _check(self) -> None:
        """After every event and every pass: does any GPU hold more than its memory (the simulation's own books)?"""
        per = self.allocated()[1]
        was, self._over = self._over, {i for i, b in enumerate(per) if b > GPU_BYTES}
        for i in sorted(self._over - was):
            holders = sorted(f"{j.spec.name}{' (stopping)' if j.stopping else ''}" for j in self.jobs.values()
                             if i in j.placement)
            self.overcommits.append(f"t={self.now:.0f}s GPU {i}: {per[i] / GiB:.1f} of {GPU_BYTES / GiB:.0f} GiB "
                                    f"({', '.join(holders)})")

    # -- events --
    def _on_submit(self, live: _Live, _attempt: int) -> None:
        live.waiting, live.queued_since = True, self.now

    def _on_min_run(self, _live: _Live, _attempt: int) -> None:
        pass  # nothing changes but the clock: schedule() may now preempt it

    def _on_tick(self, _live: _Live | None, _attempt: int) -> None:
        pass  # a deadline of the last answer (Schedule.valid_until): schedule() again

    def _on_rate(self, live: _Live, attempt: int) -> None:
        """The attempt's own rate is known from now: its first rate estimate (for the error)."""
        if attempt == live.attempt and live.placement and not live.stopping:
            end = self._ends_at(live)
            if end is not None:
                live.said.setdefault("rate", (self.now, end))

    def _on_deadline(self, live: _Live, attempt: int) -> None:
        """The reservation it started ahead of on its estimate: still running, its estimate proved wrong."""
        if attempt == live.attempt and live.placement and live.completed_at is None:
            self.overruns += 1
            if not live.spec.preemptible:
                live.overran = True

    def _on_end(self, live: _Live, attempt: int) -> None:
        if attempt != live.attempt or live.placement == ():
            return  # an attempt a preemption ended first
        live.trained += live.spec.iterations - live.saved
        live.saved = live.spec.iterations
        live.placement, live.running_since, live.stopping, live.completed_at = (), None, False, self.now
        if self.estimating:
            for source, (made, end) in live.said.items():
                if end > made:
                    self.estimate_errors[source].append((self.now - made) / (end - made))
            if live.spec.kind in HISTORY_KINDS:  # what its run measured, for the next of its kind
                self.history[live.spec.kind] = (live.spec.iteration_s * live.rate_factor, live.spec.startup_s)

    def _on_stopped(self, live: _Live, attempt: int) -> None:
        if attempt != live.attempt or live.completed_at is not None:
            return
        live.placement, live.running_since, live.backfilled, live.stopping = (), None, False, False
        live.waiting, live.queued_since = True, self.now

    def _place(self, live: _Live, gpus: tuple[int, ...], backfill: bool) -> None:
        s = live.spec
        if live.first_start is None:
            live.first_start = self.now
            live.estimated = self.estimating and self.queued(live).run_seconds is not None
        live.last_start = self.now
        live.wait_queued += self.now - (live.queued_since if live.queued_since is not None else self.now)
        if live.preempted:
            self.wasted += s.startup_s * s.ranks  # the start-up paid again on a resume
        live.attempt += 1
        live.waiting, live.queued_since, live.placement = False, None, gpus
        live.running_since, live.backfilled, live.stopping = self.now, backfill, False
        live.boot_end = self.now + s.startup_s
        live.placed_at, live.left_at_start, live.said = self.now, s.iterations - live.saved, {}
        live.rate_factor = random.Random(f"{s.name}/{live.attempt}").uniform(1 - RATE_NOISE, 1 + RATE_NOISE)
        if self.estimating:
            if (end := self._ends_at(live)) is not None:
                live.said["history"] = (self.now, end)
            if RATE_AFTER < live.left_at_start:
                self._at(live.boot_end + RATE_AFTER * s.iteration_s, "rate", s.name, live.attempt)
        self._at(live.boot_end + (s.iterations - live.saved) * s.iteration_s, "end", s.name, live.attempt)
        self._at(self.now + self.limits.min_run_seconds + 1e-6, "min_run", s.name, live.attempt)

    def _preempt(self, live: _Live) -> None:
        """The shim's stop: at once before the first iteration, else at the next boundary with a save."""
        s = live.spec
        self.preemptions += 1
        self.backfills_preempted += live.backfilled
        live.preempted += 1
        live.stopping = True
        done = 0 if self.now < live.boot_end else math.floor((self.now - live.boot_end) / s.iteration_s)
        left = s.iterations - live.saved
        if done == 0:  # booting, or in the first iteration: nothing to save, exits at once
            exit_at = self.now + EARLY_EXIT_S
            self.wasted += (exit_at - (live.running_since or self.now)) * s.ranks
            trained = kept = 0
        else:
            boundary = done + 1  # the iteration in flight completes: it is progress, not waste
            if boundary >= left:
                return  # it reaches max_iterations at that boundary: its end event completes it
            exit_at = live.boot_end + boundary * s.iteration_s + self.save_s
            self.wasted += self.save_s * s.ranks
            trained = boundary
            kept = boundary  # the shim saves model_<boundary>.pt at that very boundary
        live.trained += trained
        live.saved += kept
        self.lost += trained - kept
        self._at(exit_at, "stopped", s.name, live.attempt)

    def _result(self) -> Result:
        makespan = self.now if self.livelock else max((j.completed_at or 0.0) for j in self.jobs.values())
        first: dict[str, list[float]] = {c: [] for c in CLASSES}
        queued: dict[str, list[float]] = {c: [] for c in CLASSES}
        incomplete = []
        for j in self.jobs.values():
            # a job still waiting when a livelock cut the run short: its wait so far (a lower bound)
            first[j.spec.cls].append((self.now if j.first_start is None else j.first_start) - j.spec.submit_s)
            queued[j.spec.cls].append(j.wait_queued + (self.now - j.queued_since if j.queued_since is not None else 0))
            if j.completed_at is None or j.saved != j.spec.iterations:
                incomplete.append(f"{j.spec.name}: {j.saved} of {j.spec.iterations} iterations")
        lost = self.lost + sum(j.trained - j.spec.iterations for j in self.jobs.values() if j.completed_at)
        capacity = GPU_BYTES * self.n_gpus
        return Result(self.policy, self.alloc_integral / (capacity * makespan) if makespan else 0.0,
                      self.queued_alloc_integral / (capacity * self.queued_time) if self.queued_time else math.nan,
                      makespan, first, queued, self.preemptions, self.backfills_preempted, lost, self.wasted,
                      self.overcommit_gpu_s, self.overcommits, incomplete, self.livelock, self.estimate_errors,
                      self.overruns, self.ahead_on_estimate, self.strict_beside,
                      {n: (j.first_start, j.last_start, j.completed_at, j.preempted, j.estimated)
                       for n, j in self.jobs.items()})


def simulate(trace: list[TraceJob], policy: str, nvml_used: bool = True, gpus: int = GPUS,
             max_passes: int = MAX_PASSES) -> Result:
    return QueueSim(trace, policy, nvml_used=nvml_used, gpus=gpus, max_passes=max_passes).run()


# ---- figures -------------------------------------------------------------------------------------------------------
def percentile(xs: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); NaN for no values."""
    if not xs:
        return math.nan
    s = sorted(xs)
    k = (len(s) - 1) * q
    lo = math.floor(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def mean(xs: list[float]) -> float:
    return statistics.fmean(xs) if xs else math.nan


def figures(r: Result) -> dict[str, float]:
    out: dict[str, float] = {"utilisation": r.utilisation, "utilisation_queued": r.utilisation_queued,
                             "makespan_s": r.makespan_s,
                             "preemptions": r.preemptions, "backfills_preempted": r.backfills_preempted,
                             "iterations_lost": r.iterations_lost, "wasted_gpu_s": r.wasted_gpu_s,
                             "overcommits": len(r.overcommits), "overcommit_gpu_s": r.overcommit_gpu_s,
                             "incomplete": len(r.incomplete), "livelocked": float(r.livelock is not None),
                             "overruns": r.overruns, "ahead_on_estimate": r.ahead_on_estimate,
                             "strict_beside": r.strict_beside}
    for c in CLASSES:
        out[f"{c}_jobs"] = len(r.wait_first[c])
        for kind, waits in (("first", r.wait_first[c]), ("queued", r.wait_queued[c])):
            out[f"{c}_wait_{kind}_mean_s"] = mean(waits)
            out[f"{c}_wait_{kind}_p95_s"] = percentile(waits, 0.95)
    return out


def median_of(rows: list[dict[str, float]], key: str) -> float:
    vals = [r[key] for r in rows if not math.isnan(r[key])]
    return statistics.median(vals) if vals else math.nan


def ratio(a: float, b: float) -> float:
    if math.isnan(a) or math.isnan(b):
        return math.nan
    return a / b if b else (0.0 if a == 0 else math.inf)


def hms(s: float) -> str:
    if math.isnan(s):
        return "-"
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def print_policy(title: str, fig: dict[str, float]) -> None:
    print(f"  {title}")
    print(f"    GPU-memory utilisation {fig['utilisation'] * 100:5.1f} % over the makespan, "
          f"{fig['utilisation_queued'] * 100:5.1f} % while a job waited   makespan {hms(fig['makespan_s'])} "
          f"({fig['makespan_s']:.0f} s)")
    for c in CLASSES:
        print(f"    wait {c:<6} ({fig[f'{c}_jobs']:2.0f} jobs)  first start: mean "
              f"{fig[f'{c}_wait_first_mean_s']:6.0f} s"
              f"  p95 {fig[f'{c}_wait_first_p95_s']:6.0f} s   queued (incl. re-queued): mean "
              f"{fig[f'{c}_wait_queued_mean_s']:6.0f} s  p95 {fig[f'{c}_wait_queued_p95_s']:6.0f} s")
    print(f"    preemptions {fig['preemptions']:.0f} (of backfills {fig['backfills_preempted']:.0f})   iterations lost "
          f"{fig['iterations_lost']:.0f}   "
          f"wasted GPU-s of preemptions {fig['wasted_gpu_s']:.0f}")
    print(f"    a GPU overcommitted {fig['overcommits']:.0f} times, {fig['overcommit_gpu_s']:.0f} GPU-s in all   "
          f"jobs not completed {fig['incomplete']:.0f}")


def tail(trace: list[TraceJob], res: Result, fifo: Result, n: int) -> list[dict]:
    """The n jobs that end last under isaacd and why they started when they did: their class, length, whether isaacd
    had an estimate of them while they waited, how often they were preempted, and how many jobs of a higher class
    submitted after them started before them (the priority order), against their start under FIFO."""
    spec = {j.name: j for j in trace}
    ends = sorted(((end, name) for name, (_, _, end, _, _) in res.jobs.items() if end is not None), reverse=True)[:n]
    out = []
    for end, name in ends:
        j, (start, last, _, preempted, estimated) = spec[name], res.jobs[name]
        later_higher = sorted(o.name for o in trace if o.priority > j.priority and o.submit_s > j.submit_s and
                              (st := res.jobs[o.name][0]) is not None and start is not None and st < start)
        out.append({"job": name, "class": j.cls, "whole_gpu": j.memory_bytes is None, "preemptible": j.preemptible,
                    "run_s": j.startup_s + j.iterations * j.iteration_s, "submitted_s": j.submit_s,
                    "estimate_while_waiting": estimated, "isaacd_start_s": start, "isaacd_last_start_s": last,
                    "isaacd_end_s": end,
                    "preempted": preempted, "later_higher_started_before": later_higher,
                    "fifo_start_s": fifo.jobs[name][0], "fifo_end_s": fifo.jobs[name][2]})
    return out


def print_tail(rows: list[dict]) -> None:
    for t in rows:
        what = f"{t['class']}, {'a whole GPU' if t['whole_gpu'] else 'sized'}, runs {hms(t['run_s'])}"
        known = "an estimate" if t["estimate_while_waiting"] else "no estimate"
        again = f" (last at {hms(t['isaacd_last_start_s'])})" if t["preempted"] else ""
        print(f"        tail: {t['job']} ({what}; submitted at {hms(t['submitted_s'])}; {known} while it waited): "
              f"isaacd starts it at {hms(t['isaacd_start_s'])}{again}, ends {hms(t['isaacd_end_s'])}; preempted "
              f"{t['preempted']}x; started after {len(t['later_higher_started_before'])} jobs of a higher class "
              f"submitted after it | FIFO starts it at {hms(t['fifo_start_s'])}, ends {hms(t['fifo_end_s'])}")


def run_seed(seed: int, n_jobs: int, nvml_used: bool, n_tail: int = 0) -> dict:
    trace = make_trace(seed, n_jobs)
    res = {p: simulate(trace, p, nvml_used=nvml_used) for p in POLICIES}
    figs = {p: figures(r) for p, r in res.items()}
    exact = figures(simulate(trace, EXACT, nvml_used=nvml_used))
    one = figures(simulate(trace, ONE_PRIORITY, nvml_used=nvml_used))
    longest = figures(simulate(trace, LONGEST, nvml_used=nvml_used))
    i, f, n = figs["isaacd"], figs["fifo"], figs["isaacd-noest"]
    ratios = {"high_wait_queued": ratio(i["high_wait_queued_mean_s"], f["high_wait_queued_mean_s"]),
              "high_wait_first": ratio(i["high_wait_first_mean_s"], f["high_wait_first_mean_s"]),
              "utilisation": ratio(i["utilisation"], f["utilisation"]),
              "noest_high_wait_queued": ratio(n["high_wait_queued_mean_s"], f["high_wait_queued_mean_s"]),
              "noest_utilisation": ratio(n["utilisation"], f["utilisation"]),
              "exact_utilisation": ratio(exact["utilisation"], f["utilisation"]),
              "one_priority_utilisation": ratio(one["utilisation"], f["utilisation"]),
              "exact_longest_utilisation": ratio(longest["utilisation"], f["utilisation"])}
    print(f"seed {seed}: high wait mean isaacd {i['high_wait_queued_mean_s']:5.0f} s / fifo "
          f"{f['high_wait_queued_mean_s']:5.0f} s = {ratios['high_wait_queued']:.3f}; utilisation "
          f"{i['utilisation'] * 100:.1f} / {f['utilisation'] * 100:.1f} % = {ratios['utilisation']:.3f}; makespan "
          f"{hms(i['makespan_s'])} / {hms(f['makespan_s'])}; preemptions {i['preemptions']:.0f}; wasted "
          f"{i['wasted_gpu_s']:.0f} GPU-s; lost {i['iterations_lost']:.0f} / {f['iterations_lost']:.0f}; "
          f"GPU overcommitted {i['overcommits']:.0f} / {f['overcommits']:.0f} times")
    print(f"        without estimates: high wait {n['high_wait_queued_mean_s']:5.0f} s = "
          f"{ratios['noest_high_wait_queued']:.3f} x fifo; utilisation {n['utilisation'] * 100:.1f} % = "
          f"{ratios['noest_utilisation']:.3f} x fifo; makespan {hms(n['makespan_s'])}; preemptions "
          f"{n['preemptions']:.0f}; lost {n['iterations_lost']:.0f}; isaacd: {i['ahead_on_estimate']:.0f} "
          f"started ahead on an estimate, {i['overruns']:.0f} of them ran past the reservation; not preemptible "
          f"and started ahead beside a reservation {i['strict_beside']:.0f} (without estimates "
          f"{n['strict_beside']:.0f})")
    print(f"        with every estimate exact from submission: utilisation "
          f"{ratio(exact['utilisation'], f['utilisation']):.3f} x fifo, makespan {hms(exact['makespan_s'])}, "
          f"{exact['ahead_on_estimate']:.0f} started ahead on an estimate; every job at one priority: utilisation "
          f"{ratio(one['utilisation'], f['utilisation']):.3f} x fifo, makespan {hms(one['makespan_s'])}; every "
          f"estimate exact and the longest first within a class: utilisation "
          f"{ratios['exact_longest_utilisation']:.3f} x fifo, high wait "
          f"{ratio(longest['high_wait_queued_mean_s'], f['high_wait_queued_mean_s']):.3f} x fifo")
    tail_rows = tail(trace, res["isaacd"], res["fifo"], n_tail)
    print_tail(tail_rows)
    for p, r in res.items():
        if r.livelock:
            print(f"    {p}: LIVELOCK: {r.livelock}")
        for line in r.overcommits[:2]:
            print(f"    {p}: overcommitted: {line}")
        for line in r.incomplete[:5]:
            print(f"    {p}: not completed: {line}")
    return {"seed": seed, **figs, "ratios": ratios, "estimate_errors": res["isaacd"].estimate_errors, "tail": tail_rows,
            "overcommit_examples": {p: r.overcommits[:5] for p, r in res.items()},
            "not_completed": {p: r.incomplete for p, r in res.items()},
            "livelock": {p: r.livelock for p, r in res.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5, help="traces to run (seeds 1..N); the summary is their median")
    ap.add_argument("--jobs", type=int, default=40, help="jobs per trace")
    ap.add_argument("--json", type=Path, help="write the figures here")
    ap.add_argument("--asks-only", action="store_true",
                    help="pass Gpu.used_bytes = None (only the asks count) instead of the scripted NVML's used memory")
    ap.add_argument("--tail", type=int, default=3, metavar="N",
                    help="per seed, the N jobs that end last under isaacd: why they started when they did (0: none)")
    args = ap.parse_args(argv)
    if args.seeds < 1 or args.jobs < 1 or args.tail < 0:
        ap.error("--seeds and --jobs must be at least 1, --tail at least 0")
    print(f"queue trace: {args.jobs} jobs, {GPUS} x {GPU_BYTES / GiB:.0f} GiB, min_run_seconds {MIN_RUN_S:.0f}, "
          f"save and exit {SAVE_S:.0f} s, no spares, Gpu.used_bytes "
          f"{'None (asks only)' if args.asks_only else 'from the scripted NVML'}, seeds 1..{args.seeds}")
    per_seed = [run_seed(seed, args.jobs, not args.asks_only, args.tail) for seed in range(1, args.seeds + 1)]
    med = {p: {k: median_of([s[p] for s in per_seed], k) for k in per_seed[0][p]} for p in POLICIES}
    print(f"median over {args.seeds} seed(s), each figure on its own:")
    print_policy("isaacd (priorities, backfill by reservation on run-time estimates, preemption)", med["isaacd"])
    print_policy("fifo (baseline: one priority, no backfill, no preemption)", med["fifo"])
    print_policy("isaacd without estimates (issue 31's backfill: preemptible jobs only)", med["isaacd-noest"])
    errors = {src: [e for s in per_seed for e in s["estimate_errors"][src]] for src in ("history", "rate")}
    for src, xs in errors.items():
        what = ("history (a job's first estimate at its start, from the last run of its kind)" if src == "history"
                else "rate (its first estimate from its own iteration times)")
        if xs:
            print(f"estimate error, {what}: took / said median {statistics.median(xs):.3f}, p10 "
                  f"{percentile(xs, 0.1):.3f}, p90 {percentile(xs, 0.9):.3f}, within 10 % "
                  f"{sum(abs(x - 1) <= 0.1 for x in xs)} of {len(xs)} attempts")
    print(f"started ahead of a blocked job on an estimate: {sum(s['isaacd']['ahead_on_estimate'] for s in per_seed):.0f}; "
          f"of those still running at the reservation: {sum(s['isaacd']['overruns'] for s in per_seed):.0f}")
    # a ratio is taken on one trace (paired), then the median over the seeds: the medians above may come from
    # different seeds, and a ratio of those would compare two different traces
    ratios = {k: median_of([s["ratios"] for s in per_seed], k) for k in per_seed[0]["ratios"]}
    met_wait = sum(s["ratios"]["high_wait_queued"] <= 0.2 for s in per_seed)
    met_util = sum(s["ratios"]["utilisation"] >= 1.0 for s in per_seed)
    lost = max(s[p]["iterations_lost"] for s in per_seed for p in POLICIES)
    over = sum(s[p]["overcommits"] for s in per_seed for p in POLICIES)
    incomplete = sum(s[p]["incomplete"] for s in per_seed for p in POLICIES)
    print(f"high class mean wait isaacd / fifo (median of per-seed ratios): {ratios['high_wait_queued']:.3f} queued, "
          f"{ratios['high_wait_first']:.3f} first start  (goal <= 0.2; met in {met_wait} of {args.seeds} seeds)")
    def listed(key: str) -> str:
        """The median of a per-seed ratio, in how many seeds it is >= 1.0, and each seed's (up to 10 seeds)."""
        xs = [s["ratios"][key] for s in per_seed]
        each = f": {', '.join(format(x, '.3f') for x in xs)}" if len(xs) <= 10 else f", min {min(xs):.3f}"
        return f"{ratios[key]:.3f} (>= 1.0 in {sum(x >= 1.0 for x in xs)} of {len(xs)}{each})"

    print(f"utilisation isaacd / fifo (median of per-seed ratios): {listed('utilisation')}  (goal >= 1.0 in every "
          f"seed); without estimates {listed('noest_utilisation')}; every estimate exact "
          f"{listed('exact_utilisation')}; "
          f"every job at one priority {listed('one_priority_utilisation')}; every estimate exact and the longest "
          f"first within a class {listed('exact_longest_utilisation')}")
    print(f"iterations lost, most in any seed and policy: {lost:.0f}  (goal 0)")
    goals = {"high class wait <= 0.2 x FIFO (every seed)": met_wait == args.seeds,
             "utilisation >= FIFO (every seed)": met_util == args.seeds, "0 iterations lost": lost == 0}
    for name, met in goals.items():
        print(f"{'GOAL MET' if met else 'GOAL MISSED'}: {name}")
    checks = {"no GPU ever held more than its memory": over == 0, "every job completed its iterations": incomplete == 0}
    for name, ok in checks.items():
        print(f"{'CHECK PASSED' if ok else 'CHECK FAILED'}: {name}" +
              ("" if ok else f" ({over:.0f} times a GPU was overcommitted, {incomplete:.0f} jobs not completed)"))
    if args.json:
        doc = {"params": {"jobs": args.jobs, "seeds": args.seeds, "gpus": GPUS, "gpu_bytes": GPU_BYTES,
                          "min_run_seconds": MIN_RUN_S, "save_seconds": SAVE_S, "nvml_used": not args.asks_only,
                          "kinds": [asdict(k) for k in KINDS], "classes": CLASSES, "class_weights": CLASS_WEIGHTS,
                          "preemptible_share": PREEMPTIBLE_SHARE, "mean_gap_s": MEAN_GAP_S},
               "per_seed": per_seed, "median": med, "ratios": ratios, "goals": goals, "checks": checks}
        try:
            args.json.write_text(json.dumps(doc, indent=1) + "\n")
        except OSError as e:
            print(f"error: cannot write --json {args.json}: {e.strerror}; pick a writable path", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
