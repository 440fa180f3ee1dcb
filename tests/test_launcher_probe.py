"""The launcher's Isaac Lab version probe off the tick (issue 38): `workflows/installed.py` `ProbeCache` runs each
probe on a thread of its own and hands the answer over under its lock; the tick only reads (`peek`), the client waits
(`ask`). The planner makes that job's launch wait (`WaitingForLauncher`), bounded by [jobs.launch]
runtime_start_timeout. A fake probe function here (no subprocess); tests/test_launcher_probe_e2e.py runs the real one
under a real `isaacd run`."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from job_fakes import FakeClock
from test_job_machine import Job

from isaacd.attempt.planner import LaunchPlan, LaunchPlanner, WaitingForLauncher
from isaacd.attempt.setting import JobSetting
from isaacd.config.schema import parse_config
from isaacd.history.store import JobHistory
from isaacd.jobs.machine import PROBE_STOPPED
from isaacd.jobs.messages import Awaited, Exited, LaunchRefused, LaunchWaited, ReasonClass
from isaacd.jobs.model import JobState, LaunchIntent, Origin, StopIntent, Then
from isaacd.observations.checkpoints import RSL_RL_LAYOUT
from isaacd.workflows import ProbePending, resolve, runs_workflow
from isaacd.workflows import installed
from isaacd.workflows.installed import Pending, Probe, ProbeCache


class FakeProbe:
    """Answers each launcher once its gate opens; counts the probes run."""

    def __init__(self, answers: dict[str, Probe]):
        self.answers = answers
        self.gates: dict[str, threading.Event] = {k: threading.Event() for k in answers}
        self.runs: list[tuple[str, str | None]] = []

    def __call__(self, launcher: tuple[str, ...], owner: str | None) -> Probe:
        self.runs.append((launcher[0], owner))
        assert threading.current_thread() is not threading.main_thread(), "a probe ran on the caller's thread"
        self.gates[launcher[0]].wait(10)
        return self.answers[launcher[0]]

    def open(self, launcher: str) -> None:
        self.gates[launcher].set()


def answered(cache: ProbeCache, launcher: str, owner: str | None = None) -> Probe:
    """Peek until the probe's thread has handed its answer over (the tick would ask again next tick)."""
    for _ in range(1000):
        got = cache.peek([launcher], owner)
        if not isinstance(got, Pending):
            return got
        threading.Event().wait(0.005)
    raise AssertionError("no answer")


def test_a_hanging_probe_holds_up_only_its_own_launcher():
    fake = FakeProbe({"slow": Probe("3.0.0"), "fast": Probe("3.1.0")})
    cache = ProbeCache(fake, clock=lambda: 7.0)
    assert cache.peek(["slow"], None) == Pending(7.0)  # started, never waited for
    assert cache.peek(["fast"], None) == Pending(7.0)
    fake.open("fast")
    assert answered(cache, "fast") == Probe("3.1.0")
    assert cache.peek(["slow"], None) == Pending(7.0)  # still hanging: fast did not wait for it
    fake.open("slow")
    assert answered(cache, "slow") == Probe("3.0.0")
    assert cache.peek(["slow"], None) == Probe("3.0.0") and sorted(fake.runs) == [("fast", None), ("slow", None)]


def test_an_answer_is_kept_per_launcher_and_owner_and_the_client_waits_for_it():
    fake = FakeProbe({"py": Probe("3.0.0")})
    cache = ProbeCache(fake)
    threading.Timer(0.05, fake.open, ("py",)).start()
    assert cache.ask(["py"], "alice") == Probe("3.0.0")  # check-config, doctor: waits
    assert cache.ask(["py"], "alice") == Probe("3.0.0") and cache.peek(["py"], "alice") == Probe("3.0.0")
    assert fake.runs == [("py", "alice")]
    assert cache.ask(["py"], "bob") == Probe("3.0.0") and fake.runs == [("py", "alice"), ("py", "bob")]


def test_a_launcher_that_could_not_be_run_is_said_once_then_asked_again():
    fake = FakeProbe({"gone": Probe(None, "gone does not exist")})
    fake.open("gone")
    cache = ProbeCache(fake)
    cache.peek(["gone"], None)
    assert answered(cache, "gone").error == "gone does not exist"
    assert isinstance(cache.peek(["gone"], None), Pending)  # maybe fixed by now: asked again
    assert answered(cache, "gone").error == "gone does not exist" and len(fake.runs) == 2


def test_a_reload_keeps_the_answers_it_still_names_asks_them_again_in_the_background_and_forgets_the_rest():
    fake = FakeProbe({"kept": Probe("3.0.0"), "dropped": Probe("3.1.0")})
    fake.open("kept"), fake.open("dropped")
    cache = ProbeCache(fake)
    cache.peek(["kept"], None), cache.peek(["dropped"], None)
    answered(cache, "kept"), answered(cache, "dropped")
    fake.gates["kept"].clear()  # the re-ask hangs: the answer from before is read meanwhile, nothing waits
    fake.answers["kept"] = Probe("3.2.0")
    cache.refresh([(["kept"], None)])
    assert cache.peek(["kept"], None) == Probe("3.0.0")
    fake.open("kept")
    for _ in range(1000):
        if cache.peek(["kept"], None) == Probe("3.2.0"):
            break
        threading.Event().wait(0.005)
    assert cache.peek(["kept"], None) == Probe("3.2.0")  # the upgraded venv, read again
    assert isinstance(cache.peek(["dropped"], None), Pending)  # no longer named: forgotten, asked afresh
    assert [r[0] for r in fake.runs].count("kept") == 2


# ---- the tick's side: resolve never waits, the planner makes that launch wait ----------------------------------
def pip_job(tmp_path: Path, extra: str = ""):  # noqa: ANN201
    toml = (f'[[jobs]]\nname = "pip"\nworkflow = "rsl_rl"\nlauncher = ["{sys.executable}"]\nlog_root = "logs"\n'
            f'spare = false\n{extra}')
    return parse_config(toml, "t.toml", tmp_path).jobs[0]


@pytest.fixture
def fake_probe(monkeypatch):  # noqa: ANN201
    fake = FakeProbe({sys.executable: Probe("3.0.0")})
    monkeypatch.setattr(installed, "_cache", ProbeCache(fake))
    return fake


def test_resolve_on_the_tick_raises_pending_and_the_client_gets_the_answer(tmp_path, fake_probe):
    job = pip_job(tmp_path)
    with pytest.raises(ProbePending) as exc:
        resolve(job, wait_probe=False)
    assert exc.value.key == "launcher" and exc.value.launcher == [sys.executable]
    setting = JobSetting.of(job)  # a runner made under the supervisor's lock: unresolved, not waiting
    assert setting.resolved is None and setting.probe_pending
    fake_probe.open(sys.executable)
    assert resolve(job).generation.label == "3.0"  # the client's way waits
    setting.resolve_answered()  # the runner's next tick
    assert setting.resolved is not None and not setting.probe_pending


def planner(tmp_path: Path, job, clock: FakeClock, said: list) -> LaunchPlanner:  # noqa: ANN001
    return LaunchPlanner(JobSetting.of(job), "process", tmp_path / "state", clock,
                         lambda name, **f: said.append((name, f)), lambda program: None, lambda: None)


def test_the_launch_waits_for_its_launchers_answer_then_is_planned(tmp_path, fake_probe):
    clock, said = FakeClock(), []
    p = planner(tmp_path, pip_job(tmp_path), clock, said)
    wait = p.plan(LaunchIntent(), JobHistory("pip"), 64)
    assert isinstance(wait, WaitingForLauncher) and sys.executable in wait.reason and "probe" in wait.reason
    clock.advance(5)
    assert isinstance(p.plan(LaunchIntent(), JobHistory("pip"), 64, waited=True), WaitingForLauncher)
    fake_probe.open(sys.executable)
    installed._cache.ask([sys.executable], None)
    assert isinstance(p.plan(LaunchIntent(), JobHistory("pip"), 64, waited=True), LaunchPlan) and said == []


def test_a_launcher_that_never_answers_ends_the_launch_at_the_launch_deadline_naming_it(tmp_path, fake_probe):
    clock, said = FakeClock(), []
    p = planner(tmp_path, pip_job(tmp_path, "[jobs.launch]\nruntime_start_timeout = 30\n"), clock, said)
    assert isinstance(p.plan(LaunchIntent(), JobHistory("pip"), 64), WaitingForLauncher)
    clock.advance(30)
    assert isinstance(p.plan(LaunchIntent(), JobHistory("pip"), 64, waited=True), WaitingForLauncher)
    clock.advance(0.5)
    refused = p.plan(LaunchIntent(), JobHistory("pip"), 64, waited=True)
    assert isinstance(refused, LaunchRefused) and refused.settle is None  # a crash: backoff, the crash-loop window
    assert sys.executable in refused.reason and "version probe" in refused.reason \
        and "runtime_start_timeout" in refused.reason
    assert said == [("launch_timeout", {"wait": "launcher_probe", "launcher": [sys.executable],
                                        "waited_seconds": 30.5, "bound_seconds": 30.0})]
    # the next launch (after its backoff) waits its own bound again
    assert isinstance(p.plan(LaunchIntent(), JobHistory("pip"), 64), WaitingForLauncher)
    fake_probe.open(sys.executable)


def test_a_runner_made_while_the_probe_runs_reads_its_runs_on_disk_without_waiting(tmp_path, fake_probe):
    """history/rebuild.py runs as a runner is made (a reload, under the supervisor's lock): it reads where the job's
    runs are and how its checkpoints count, which no Isaac Lab version changes."""
    job = pip_job(tmp_path)
    wf = runs_workflow(job)  # the gate is shut: the probe has not answered
    assert wf.experiment_dir(job) == tmp_path / "logs" / "rsl_rl" / job.experiment_name
    assert wf.run_dir_re(job).match("2026-01-01_00-00-00_pip") and wf.layout is RSL_RL_LAYOUT
    fake_probe.open(sys.executable)


def test_a_stop_while_the_launcher_is_asked_ends_the_wait_in_its_own_words():
    stop = StopIntent("operator stop", Origin.OPERATOR, Then.STOP, 0.0)
    waited = Job(JobState.STOPPING, stop=stop).send(LaunchWaited(on=Awaited.LAUNCHER))
    assert waited.m.state == JobState.STOPPED and waited.m.reason == "operator stop"
    exited = Job(JobState.STOPPING, stop=stop).send(Exited(PROBE_STOPPED, ReasonClass.OPERATOR, success=False))
    assert (waited.m, waited.effects) == (exited.m, exited.effects)  # a trainer that never started exited
