"""Issue 39, the supervisor at rest: a publish sends a job's row through the job_status hooks (watchdogs, queue,
best announcer) again only when its runner's row is another object or a hook says the job's part may have changed
(status/publishing.py); 1,000 queued rows through three hooks at every tick was a third of the supervisor's CPU at
rest. What a user must still see: every change in the very next status, never a stale row."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from job_fakes import FakeClock
from test_queue_config import snapshot
from test_queue_pass_reuse import entry as queue_entry, sig as queue_sig
from test_quota_hook import Lookups

from isaacd.config.queue import QueueConfig
from isaacd.scheduling.hook import HostQueue
from isaacd.scheduling.owners import Owners
from isaacd.status.publishing import REMAKE_SECONDS, Publishing
from isaacd.status.types import JobStatus, QueueStatus, Status


class _Runner:
    def __init__(self, name: str) -> None:
        self.row = JobStatus(name=name, state="queued")
        self.setting: Any = None

    def snapshot(self, wm: float | None = None) -> JobStatus:
        return self.row


@dataclass
class _Hooks:
    job_status: list = field(default_factory=list)
    row_changes: list = field(default_factory=list)
    status: list = field(default_factory=list)


class _Host(Publishing):
    def __init__(self, names: list[str], hooks: _Hooks) -> None:
        self.clock = FakeClock()
        self.runners = {n: _Runner(n) for n in names}
        self.hooks = hooks
        self.sweeps = None
        self._snapshot = Status()
        self._rows = {}
        self._rows_made_at = float("-inf")

    def publish(self) -> dict[str, JobStatus]:
        self._publish()
        return {j.name: j for j in self._snapshot.jobs}


class _Tagger:
    """A job_status hook that stamps each row with its own count of the rows it made, and says what changed."""

    def __init__(self) -> None:
        self.made: list[str] = []
        self.changed: set[str] | None = set()

    def job_status(self, row: JobStatus) -> JobStatus:
        self.made.append(row.name)
        return replace(row, state_reason=f"made {len(self.made)}")

    def rows_changed(self) -> set[str] | None:
        said, self.changed = self.changed, set()
        return said


def host(names: list[str], with_changes: bool = True) -> tuple[_Host, _Tagger]:
    tagger = _Tagger()
    hooks = _Hooks(job_status=[tagger.job_status], row_changes=[tagger.rows_changed] if with_changes else [])
    return _Host(names, hooks), tagger


def test_an_unchanged_row_is_the_last_publishs_and_no_hook_is_asked_for_it():
    h, tagger = host(["a", "b", "c"])
    first = h.publish()  # the first publish: every row made
    assert sorted(tagger.made) == ["a", "b", "c"]
    second = h.publish()
    assert tagger.made == ["a", "b", "c"] and all(second[n] is first[n] for n in "abc")


def test_a_job_a_hook_names_goes_through_every_hook_again_and_shows_the_change_at_once():
    h, tagger = host(["a", "b", "c"])
    first = h.publish()
    tagger.changed = {"b"}
    second = h.publish()
    assert tagger.made[3:] == ["b"] and second["b"].state_reason == "made 4"
    assert second["a"] is first["a"] and second["c"] is first["c"]


def test_a_runners_new_row_goes_through_every_hook_again():
    h, tagger = host(["a", "b"])
    h.publish()
    h.runners["a"].row = JobStatus(name="a", state="starting")
    second = h.publish()
    assert tagger.made[2:] == ["a"] and second["a"].state == "starting" and second["a"].state_reason == "made 3"


def test_every_row_is_made_when_a_hook_cannot_say_what_changed():
    h, tagger = host(["a", "b"], with_changes=False)  # no reporter for the hook (a test's or an extension's hooks)
    h.publish()
    h.publish()
    assert sorted(tagger.made) == ["a", "a", "b", "b"]
    h, tagger = host(["a", "b"])
    h.publish()
    tagger.changed = None  # the hook says: anything may have changed
    h.publish()
    assert sorted(tagger.made) == ["a", "a", "b", "b"]


def test_a_hook_whose_report_fails_gets_every_row_made_and_the_publish_goes_on():
    h, tagger = host(["a", "b"])
    h.publish()

    def broken() -> set[str]:
        raise RuntimeError("boom")
    h.hooks.row_changes = [broken]
    assert set(h.publish()) == {"a", "b"} and sorted(tagger.made) == ["a", "a", "b", "b"]


def test_every_row_is_made_again_after_the_remake_interval():
    h, tagger = host(["a"])
    h.publish()
    h.clock.advance(REMAKE_SECONDS - 0.5)
    h.publish()
    assert tagger.made == ["a"]
    h.clock.advance(1.0)
    h.publish()
    assert tagger.made == ["a", "a"]


def test_a_job_gone_leaves_no_row_behind():
    h, tagger = host(["a", "b"])
    h.publish()
    del h.runners["b"]
    assert set(h.publish()) == {"a"} and set(h._rows) == {"a"}


def queue() -> HostQueue:
    return HostQueue(QueueConfig(min_run_seconds=60), lambda: snapshot({0: 40}), owners=Owners(Lookups(), me="root"))


def test_the_queue_names_the_jobs_whose_place_changed_and_no_other():
    q = queue()
    first, second = queue_entry("first", order=1.0), queue_entry("second", order=2.0)  # first is placed, second waits
    q.tick(100.0, [queue_sig(first), queue_sig(second)])
    assert q.rows_changed() is None  # its first report: every row's wall-clock times are made
    q.tick(100.2, [queue_sig(first), queue_sig(second)])
    assert q.rows_changed() == set()  # the same pass: nothing of any row moved
    third = queue_entry("third", order=3.0)
    q.tick(100.4, [queue_sig(first), queue_sig(second), queue_sig(third)])
    assert q.rows_changed() == {"third"}  # a new job waits behind second: second's place and reason are the same
    urgent = queue_entry("urgent", priority=5, order=4.0)
    q.tick(100.6, [queue_sig(first), queue_sig(second), queue_sig(third), queue_sig(urgent)])
    # urgent takes the GPU: first waits now, second and third move down; urgent, placed, has no place to show
    assert q.rows_changed() == {"first", "second", "third"}
    row = JobStatus(name="second", state="queued", queue=QueueStatus(request="100 GiB on 1 GPU"))
    assert q.job_status(row).queue.position == 2


def test_the_queue_remakes_every_row_when_the_wall_clock_steps(monkeypatch):
    q = queue()
    q.tick(100.0, [queue_sig(queue_entry("first", order=1.0))])
    q.rows_changed()
    assert q.rows_changed() == set()
    import isaacd.scheduling.hook as hook
    real = hook.time.time
    monkeypatch.setattr(hook.time, "time", lambda: real() + 3600.0)  # the wall clock stepped an hour
    assert q.rows_changed() is None
