"""The queue hook's quotas (daemon/scheduling/hook.py, owners.py, issue 32): from the `[access]` in force, each
owner's limits and groups read through the user database (a fake one here), admins held by none."""

from __future__ import annotations

from dataclasses import dataclass

from isaacd.config.access import AccessConfig
from isaacd.config.queue import QueueConfig
from isaacd.config.schema import Config
from isaacd.config.users import UnknownUser, User
from isaacd.scheduling.hook import HostQueue
from isaacd.scheduling.owners import Owners
from isaacd.jobs.queue_entry import QueueEntry, Request
from isaacd.status.signals import JobSignals
from test_queue_config import job, snapshot

GiB = 2**30
PEOPLE = {"alice": User(1001, 1001, "alice", "/home/alice", ("alice", "lab"), (1001, 2000)),
          "carol": User(1003, 1003, "carol", "/home/carol", ("carol", "isaacd-admin"), (1003, 2001))}


class Lookups:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, name: str) -> User:
        self.calls.append(name)
        if name not in PEOPLE:
            raise UnknownUser(name)
        return PEOPLE[name]


def sig(name: str, owner: str | None, placement: tuple[int, ...] = (), order: float = 1.0) -> JobSignals:
    entry = QueueEntry(name, Request(1, None), priority=0, submitted_at=order, preemptible=True, waiting=not placement,
                       placement=placement, placed_at=0.0 if placement else None, owner=owner)
    return JobSignals(name, job(name=name, gpus=1), False, 0, None, None, None, None, queue=entry)


@dataclass
class InForce:
    config: Config


def test_alice_at_her_quota_waits_an_admins_and_the_supervisors_jobs_do_not():
    lookups = Lookups()
    access = AccessConfig.model_validate({"defaults": {"gpus": 1}})
    q = HostQueue(QueueConfig(), lambda: snapshot({0: 40, 1: 40, 2: 40, 3: 40}), access, "isaacd-admin",
                  Owners(lookups, me="root"))
    signals = [sig("a1", "alice", (0,)), sig("a2", "alice", order=1), sig("c2", "carol", (1,)),
               sig("c3", "carol", order=2), sig("r1", None, order=3), sig("r2", "root", order=4)]
    placed = {name: cmd.gpus for name, cmd in q.tick(10.0, signals)}
    assert set(placed) == {"c3", "r1"}  # two GPUs free, in order past a2: neither admin's job is held by a quota
    assert q.waiting["r2"].reason.startswith("needs 1 GPU (a whole GPU); 0 free")  # root's: no room, no quota
    assert q.waiting["a2"].reason.startswith("alice's quota: 1 of 1 GPUs in use (this job needs 1)")
    q.tick(11.0, signals)
    assert lookups.calls == ["alice", "carol"]  # looked up once a minute, not each tick; root never


def test_a_group_quota_and_a_reload_of_access_apply_at_the_next_tick():
    access = AccessConfig.model_validate({"defaults": {}, "groups": {"lab": {"gpus": 2}}})
    q = HostQueue(QueueConfig(), lambda: snapshot({0: 40, 1: 40, 2: 40}), access, None, Owners(Lookups(), me="root"))
    signals = [sig("a1", "alice", (0,)), sig("a2", "alice", (1,)), sig("a3", "alice", order=1)]
    assert q.tick(10.0, signals) == []
    assert q.waiting["a3"].reason.startswith("group lab's quota: 2 of 2 GPUs in use")
    running = InForce(Config())  # started: the config in force is read each tick, so a reload's [access] holds
    q.start(running)
    assert [name for name, _ in q.tick(11.0, signals)] == ["a3"]
    running.config = Config.model_validate({"access": {"defaults": {"gpus": 2}}})
    assert q.tick(12.0, signals) == [] and q.waiting["a3"].reason.startswith("alice's quota: 2 of 2 GPUs")
