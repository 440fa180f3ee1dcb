"""One writer per bucket prefix (issue 28): the lease's decision (pure), and the lease, the manifest's
compare-and-swap writes and the fingerprint check on real files through fsspec's file://.

The two-supervisor stories with real `isaacd run` processes are in tests/test_backup_share.py."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
from backup_fakes import fake_checkpoint

from isaacd.config.backup import BackupConfig
from isaacd.backup.keeper import Fetching, JobBackup
from isaacd.backup.lease import Identity, Lease, Verdict, decide, machine_id
from isaacd.backup.notes import Notes
from isaacd.backup.objects import Conflict, ObjectStore
from isaacd.backup.uploader import Run, Uploader
from isaacd.observations.checkpoints import RSL_RL_LAYOUT

ME = Identity("m-a", "/var/lib/isaacd", "inst-1", "gpu-1", 10)
NOW = 1_000_000.0


def lease(machine: str = "m-a", state_dir: str = "/var/lib/isaacd", instance: str = "inst-1",
          expires: float = NOW + 60) -> dict:
    return {"holder": {"machine_id": machine, "state_dir": state_dir, "instance": instance}, "expires": expires}


@pytest.mark.parametrize("doc, force, want", [
    (None, False, Verdict.TAKE),
    (lease(), False, Verdict.RENEW),
    (lease(instance="inst-0"), False, Verdict.RETAKE),  # this machine and state dir, restarted: at once
    (lease(instance="inst-0", expires=NOW - 1), False, Verdict.RETAKE),
    (lease("m-b", instance="x"), False, Verdict.REFUSE),
    (lease("m-a", state_dir="/srv/other", instance="x"), False, Verdict.REFUSE),  # a second supervisor here
    (lease("m-b", instance="x"), True, Verdict.FORCE),
    (lease("m-b", instance="x", expires=NOW), False, Verdict.EXPIRED),
    ({}, False, Verdict.EXPIRED),  # unreadable: nobody can be shown to hold it
    ({"holder": "junk", "expires": "soon"}, False, Verdict.EXPIRED),
])
def test_the_lease_decision(doc, force, want):
    assert decide(doc, NOW, ME, force) is want


def test_machine_id_can_be_set_for_two_supervisors_on_one_machine(monkeypatch):
    monkeypatch.setenv("ISAACD_MACHINE_ID", "host-b")
    assert machine_id() == "host-b"
    monkeypatch.delenv("ISAACD_MACHINE_ID")
    etc = Path("/etc/machine-id")
    if etc.is_file() and etc.read_text().strip():
        assert machine_id() == etc.read_text().strip()
    else:
        assert machine_id() != "host-b"


def _lease(tmp_path: Path, who: str, seconds: float = 30.0) -> tuple[Lease, Notes]:
    cfg = BackupConfig(url=f"file://{tmp_path / 'bucket'}", lease_seconds=seconds)
    notes = Notes()
    return Lease(ObjectStore(cfg, "cp"), Identity(who, f"/state/{who}", f"i-{who}", who, 1), None, seconds,
                 notes), notes


def test_a_file_lease_is_taken_once_refused_to_another_and_taken_over_when_expired_or_by_the_operator(tmp_path):
    a, a_notes = _lease(tmp_path, "host-a", seconds=3)
    b, b_notes = _lease(tmp_path, "host-b", seconds=3)
    # both decide "take" on an empty prefix at once: the exclusive create lets exactly one win
    results: list[bool] = []
    threads = [threading.Thread(target=lambda x=x: results.append(x.ensure())) for x in (a, b)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert sorted(results) == [False, True]
    holder, other = (a, b) if a.holds() else (b, a)
    assert not other.ensure() and "host-" in (other.refusal() or "") and "another name" in other.refusal()
    # the holder renews; the other still may not
    assert holder.ensure() and not other.ensure()
    # expired: taken over, an event naming the previous holder; the old holder learns it at its next step
    doc = json.loads((tmp_path / "bucket" / "cp" / "lease.json").read_text())
    os.utime(tmp_path / "bucket" / "cp" / "lease.json")
    doc["expires"] = doc["heartbeat"] - 1
    (tmp_path / "bucket" / "cp" / "lease.json").write_text(json.dumps(doc))
    assert other.ensure() and other.holds()
    notes = b_notes if other is b else a_notes
    taken = [f for e, f in notes.take() if e == "backup_lease_taken_over"]
    assert taken and taken[0]["how"] == "expired" and holder.me.machine_id in taken[0]["previous"]
    assert not holder.ensure() and not holder.holds()
    lost = [e for e, _ in (a_notes if holder is a else b_notes).take() if e == "backup_lease_lost"]
    assert lost
    # the operator's word takes it back at once, live or not
    holder.takeover()
    assert holder.ensure() and not other.ensure()


def test_a_racer_whose_conditional_write_was_let_through_but_overwritten_does_not_hold_the_lease(tmp_path):
    """A store whose check-then-write races (SeaweedFS under load let 2 of 6 If-Match writers through): host-b's
    write lands right after host-a's, both answered 200. host-a reads its copy back, finds host-b's, and does not
    hold the lease; host-b does."""
    a, _ = _lease(tmp_path, "host-a")
    b, _ = _lease(tmp_path, "host-b")
    real = a.store.write_if

    def let_through_then_overwritten(key, data, tag):
        out = real(key, data, tag)
        b.store.write_bytes(key, json.dumps(b._doc(time.time(), None, None)).encode())
        return out

    a.store.write_if = let_through_then_overwritten
    assert a.ensure() is False and not a.holds() and a.store.conditional
    assert b.ensure() and b.holds() and not a.ensure()


def test_a_stale_tag_never_overwrites_a_document(tmp_path):
    store = ObjectStore(BackupConfig(url=f"file://{tmp_path / 'b'}"), "cp")
    tag = store.write_if("doc.json", b"1", None)
    with pytest.raises(Conflict):
        store.write_if("doc.json", b"x", None)
    new = store.write_if("doc.json", b"2", tag)
    with pytest.raises(Conflict):
        store.write_if("doc.json", b"3", tag)
    assert store.read_tagged("doc.json") == (b"2", new)


FP = {"workflow": "builtin", "library": "rsl_rl", "task": "Isaacd-Cartpole-v0", "experiment": "cp",
      "isaaclab": 3, "checkpoint_format": "rsl_rl 4.x/5.x (actor_state_dir + critic_state_dict)"}


def test_a_manifest_rewrite_never_drops_this_writers_entries(tmp_path):
    cfg = BackupConfig(url=f"file://{tmp_path / 'bucket'}", keep=0)
    up = Uploader(ObjectStore(cfg, "cp"), cfg, RSL_RL_LAYOUT, Notes(), fingerprint=FP)
    run = tmp_path / "logs" / "2026-01-01_00-00-00_cp"
    fake_checkpoint(run / "model_2.pt", 2)
    up.set_runs([Run(run)])
    up.one_pass()
    path = tmp_path / "bucket" / "cp" / "manifest.json"
    doc = json.loads(path.read_text())
    assert [e["iteration"] for e in doc["checkpoints"]] == [2] and doc["fingerprint"] == FP
    doc["checkpoints"] = []  # an old isaacd (no lease) rewrote it without our entry
    path.write_text(json.dumps(doc))
    fake_checkpoint(run / "model_4.pt", 4)
    up.one_pass()
    assert sorted(e["iteration"] for e in json.loads(path.read_text())["checkpoints"]) == [2, 4]


def test_a_restore_from_another_tasks_manifest_is_refused_naming_both(tmp_path):
    cfg = BackupConfig(url=f"file://{tmp_path / 'bucket'}")
    other_fp = {**FP, "task": "Isaacd-Pendulum-v0"}
    writer = JobBackup(cfg, "cp", RSL_RL_LAYOUT, fingerprint=other_fp)
    run = tmp_path / "other-host" / "2026-01-01_00-00-00_cp"
    fake_checkpoint(run / "model_4.pt", 4)
    writer.uploader.set_runs([Run(run)])
    writer.uploader.one_pass()

    def restore(fp: dict) -> tuple[object, list]:
        keeper = JobBackup(cfg, "cp", RSL_RL_LAYOUT, fingerprint=fp)
        exp = tmp_path / f"exp-{len(fp)}-{fp['task']}"
        got = keeper.restore(None, exp)
        while isinstance(got, Fetching):
            time.sleep(0.05)
            got = keeper.restore(None, exp)
        return got, keeper.take_notes()

    got, notes = restore(FP)
    assert got is None
    (refused,) = [f for e, f in notes if e == "backup_restore_refused"]
    assert "Isaacd-Cartpole-v0" in refused["ours"] and "Isaacd-Pendulum-v0" in refused["theirs"]
    assert refused["differs"] == ["task"]
    # ...and nothing of this job is mixed into that manifest: its uploads are paused, saying why
    mine = JobBackup(cfg, "cp", RSL_RL_LAYOUT, fingerprint=FP)
    fake_checkpoint(tmp_path / "mine" / "r" / "model_6.pt", 6)
    mine.uploader.set_runs([Run(tmp_path / "mine" / "r")])
    mine.uploader.one_pass()
    assert "another experiment" in (mine.uploader.blocked or "") and "Isaacd-Pendulum-v0" in mine.uploader.blocked
    # num_envs and seed are not in the fingerprint: the same task resumes (a format not yet known is no difference)
    got, _ = restore({**other_fp, "checkpoint_format": None})
    assert got is not None and got.iteration == 4


def test_status_and_metrics_name_the_holder_and_the_fix():
    """What an operator reads while another supervisor holds the prefix: the status line and /metrics."""
    from metrics_fakes import fake_job, fake_status
    from prometheus_client import generate_latest

    from isaacd.metrics import build_registry
    from isaacd.cli.render import format_status

    now = time.time()
    job = fake_job("cp", now=now)
    refused = {"state": "refused", "holder": "host gpu-7 (machine-id host-a, state dir /var/lib/isaacd, pid 812)",
               "expires": now + 100, "conditional": True, "fix": "give this job another name"}
    job["backup"] = {**job["backup"], "error": None, "blocked": "s3://b/isaacd/cp is held by another supervisor: "
                     "host gpu-7 (machine-id host-a, ...). Fix: give this job another name", "lease": refused}
    text = format_status({**fake_status([job]), "gpus": None}, now=now)
    assert "backup PAUSED: s3://b/isaacd/cp is held by another supervisor: host gpu-7" in text, text

    def held(status: dict) -> list[str]:
        out = generate_latest(build_registry(lambda: status, None, process_metrics=False)).decode()
        return [line for line in out.splitlines() if line.startswith("isaacd_backup_lease_held")]

    assert held(fake_status([job])) == ['isaacd_backup_lease_held{job="cp"} 0.0']
    job["backup"] = {**job["backup"], "blocked": None, "lease": {**refused, "state": "held", "holder": None}}
    assert held(fake_status([job])) == ['isaacd_backup_lease_held{job="cp"} 1.0']
    assert "PAUSED" not in format_status({**fake_status([job]), "gpus": None}, now=now)
