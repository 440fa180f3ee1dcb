"""Checkpoints in object storage through fsspec's file:// (issue 22): the whole path without a server.

Real files, real fsspec, the real uploader and restore code; the checkpoints are torch-shaped zips
(backup_fakes.fake_checkpoint) so the deep validation of the resume choice runs on them as on real ones.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from backup_fakes import fake_checkpoint

from isaacd.config.backup import BackupConfig
from isaacd.backup.keeper import Fetching, JobBackup
from isaacd.backup.manifest import Manifest
from isaacd.backup.notes import Notes
from isaacd.backup.objects import ObjectStore
from isaacd.backup.restore import restore_newest
from isaacd.backup.uploader import Run, Uploader, sha256_of
from isaacd.config.schema import ConfigError, parse_config
from isaacd.observations.checkpoints import RSL_RL_LAYOUT
from isaacd.workflows.validate import RSL_RL_4, VALIDATOR


def validator(c):  # noqa: ANN001, ANN201 - the resume choice's deep check, for the built-in trainer
    return VALIDATOR.problem(c, RSL_RL_4, "rsl_rl")


def make(tmp_path: Path, **over) -> tuple[Uploader, Notes, Path]:  # noqa: ANN003
    bucket = tmp_path / "bucket"
    cfg = BackupConfig(url=f"file://{bucket}", **over)
    notes = Notes()
    return Uploader(ObjectStore(cfg, "cp"), cfg, RSL_RL_LAYOUT, notes, validator), notes, bucket / "cp"


def manifest_of(prefix: Path) -> dict:
    return json.loads((prefix / "manifest.json").read_text())


def events(notes: Notes) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for name, fields in notes.take():
        out.setdefault(name, []).append(fields)
    return out


def test_complete_checkpoints_are_copied_with_a_manifest_and_a_half_written_one_is_not(tmp_path):
    run = tmp_path / "logs" / "rsl_rl" / "cp" / "2026-01-01_00-00-00_cp"
    fake_checkpoint(run / "model_0.pt", 0)
    fake_checkpoint(run / "model_2.pt", 2, pad=5000)
    data = fake_checkpoint(run / "model_4.pt", 4, pad=5000).read_bytes()
    (run / "model_4.pt").write_bytes(data[: len(data) // 2])  # torch.save killed mid-write
    up, notes, prefix = make(tmp_path, keep=0)
    up.set_runs([Run(run)])
    up.one_pass()

    doc = manifest_of(prefix)
    got = {e["file"]: e for e in doc["checkpoints"]}
    assert set(got) == {"model_0.pt", "model_2.pt"}
    for name, e in got.items():
        obj = prefix / run.name / name
        assert obj.read_bytes() == (run / name).read_bytes()
        assert e["sha256"] == sha256_of(run / name) and e["size"] == obj.stat().st_size
        assert e["run"] == run.name and e["iteration"] == int(name[6:-3]) and e["time"] > 0
    assert not list(prefix.rglob("*isaacd-upload*")), "a temporary upload name was left in the bucket"
    st = up.status()
    assert st.last_upload.iteration == 2 and st.error is None and st.uploads_total == 2
    assert st.lag_iterations == 0 and st.bytes_total == sum(e["size"] for e in got.values())

    fake_checkpoint(run / "model_4.pt", 4, pad=5000)  # the save completes
    up.one_pass()
    assert {e["iteration"] for e in manifest_of(prefix)["checkpoints"]} == {0, 2, 4}
    assert not events(notes)  # nothing went wrong: nothing for the journal


def test_keep_prunes_old_objects_and_snapshots_are_rate_limited(tmp_path):
    run = tmp_path / "run"
    for i in (0, 2, 4):
        fake_checkpoint(run / f"model_{i}.pt", i)
    for i in (5, 6):
        fake_checkpoint(run / f"isaacd_snapshot_{i}.pt", i)
    up, _, prefix = make(tmp_path, keep=2, snapshot_min_seconds=3600.0)
    up.set_runs([Run(run)])
    up.one_pass()
    # the newest two: model_4 and the newest snapshot; model_0/model_2 never uploaded (they would be pruned)
    assert [e["file"] for e in manifest_of(prefix)["checkpoints"]] == ["isaacd_snapshot_6.pt", "model_4.pt"]
    assert not (prefix / run.name / "isaacd_snapshot_5.pt").exists()

    fake_checkpoint(run / "isaacd_snapshot_7.pt", 7)  # within snapshot_min_seconds of the last snapshot upload
    up.one_pass()
    assert "isaacd_snapshot_7.pt" not in {e["file"] for e in manifest_of(prefix)["checkpoints"]}
    assert up.status().lag_iterations == 1  # newest local 7, newest in the bucket 6
    fake_checkpoint(run / "model_8.pt", 8)  # a trainer checkpoint is never rate-limited
    up.one_pass()
    files = [e["file"] for e in manifest_of(prefix)["checkpoints"]]
    assert files == ["model_8.pt", "isaacd_snapshot_6.pt"]
    assert not (prefix / run.name / "model_4.pt").exists(), "keep = 2: the third-newest object is deleted"


def test_a_checkpoint_the_trainer_could_not_load_is_not_copied(tmp_path):
    run = tmp_path / "run"
    fake_checkpoint(run / "model_3.pt", 7)  # its iter says 7: not the checkpoint its name promises
    up, notes, prefix = make(tmp_path)
    up.set_runs([Run(run)])
    up.one_pass()
    assert not (prefix / run.name / "model_3.pt").exists()
    skipped = events(notes)["backup_skipped"]
    assert skipped[0]["iteration"] == 3 and "its iter is 7" in skipped[0]["problem"]


def test_a_resume_from_an_older_checkpoint_drops_the_abandoned_timeline_from_the_bucket(tmp_path):
    old, new = tmp_path / "2026-01-01_00-00-00_cp", tmp_path / "2026-01-02_00-00-00_cp"
    for i in (2, 4, 6):
        fake_checkpoint(old / f"model_{i}.pt", i)
    up, _, prefix = make(tmp_path)
    up.set_runs([Run(old)])
    up.one_pass()
    # rolled back to 2: the new run writes 3, 4; the old run's 4 and 6 are off the timeline now
    fake_checkpoint(new / "model_3.pt", 3)
    fake_checkpoint(new / "model_4.pt", 4)
    up.set_runs([Run(new, 2), Run(old, 0, 2)])
    up.one_pass()
    keys = [(e["run"], e["iteration"]) for e in manifest_of(prefix)["checkpoints"]]
    assert keys == [(new.name, 4), (new.name, 3), (old.name, 2)]
    assert not (prefix / old.name / "model_6.pt").exists() and not (prefix / old.name / "model_4.pt").exists()


def test_an_unwritable_target_is_retried_with_backoff_and_catches_up(tmp_path):
    run = tmp_path / "run"
    fake_checkpoint(run / "model_1.pt", 1)
    (tmp_path / "bucket").write_text("not a directory")  # the target refuses every write
    up, notes, prefix = make(tmp_path)
    up.set_runs([Run(run)])
    up.one_pass()
    up.one_pass()
    st = up.status()
    assert st.error and str(tmp_path / "bucket") in st.error and st.failures_total == 2
    assert st.retry_at is not None and st.last_upload is None
    failed = events(notes)["backup_failed"]
    assert len(failed) == 1, "the same error is said once, not at every retry"

    (tmp_path / "bucket").unlink()  # the store is back
    fake_checkpoint(run / "model_2.pt", 2)
    up.one_pass()
    st = up.status()
    assert st.error is None and st.retry_at is None and st.last_upload.iteration == 2
    assert {e["iteration"] for e in manifest_of(prefix)["checkpoints"]} == {1, 2}
    assert events(notes)["backup_recovered"][0]["last_iteration"] == 2


def test_restore_verifies_sha256_and_falls_back_to_the_previous_object(tmp_path):
    run = tmp_path / "logs" / "2026-01-01_00-00-00_cp"
    for i in (2, 4):
        fake_checkpoint(run / f"model_{i}.pt", i, pad=2000)
    up, notes, prefix = make(tmp_path)
    up.set_runs([Run(run)])
    up.one_pass()
    obj = prefix / run.name / "model_4.pt"
    data = bytearray(obj.read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit in the bucket
    obj.write_bytes(bytes(data))

    dest = tmp_path / "elsewhere"  # the disk is lost: another experiment dir
    manifest = Manifest.from_bytes("cp", (prefix / "manifest.json").read_bytes())
    got = restore_newest(up.store, manifest, dest, None, notes, validator)
    assert got is not None and got.checkpoint.iteration == 2 and got.downloaded
    assert got.checkpoint.path == dest / run.name / "model_2.pt"
    assert got.checkpoint.path.read_bytes() == (run / "model_2.pt").read_bytes()
    rejected = events(notes)["backup_object_rejected"]
    assert rejected[0]["iteration"] == 4 and "sha256 mismatch" in rejected[0]["problem"]
    assert not (dest / run.name / "model_4.pt").exists() and not list(dest.rglob(".*isaacd-restore*"))
    # a rollback bound: nothing at or below 1
    assert restore_newest(up.store, manifest, dest, 1, notes, validator) is None


def test_the_keeper_fetches_off_the_callers_thread(tmp_path):
    run = tmp_path / "run-a"
    fake_checkpoint(run / "model_6.pt", 6)
    cfg = BackupConfig(url=f"file://{tmp_path / 'bucket'}")
    first = JobBackup(cfg, "cp", RSL_RL_LAYOUT, validator)
    first.set_runs([Run(run)])  # its thread uploads
    first.close(drain_seconds=30)  # ...and makes one last pass before it ends
    assert first.uploader.status().last_upload.iteration == 6

    keeper = JobBackup(cfg, "cp", RSL_RL_LAYOUT, validator)
    exp = tmp_path / "new-disk"
    answer = keeper.restore(None, exp)
    assert isinstance(answer, Fetching)  # the launch waits; the caller is not blocked
    keeper._fetch.thread.join(30)
    got = keeper.restore(None, exp)
    assert got is not None and not isinstance(got, Fetching) and got.iteration == 6
    assert got.path == exp / "run-a" / "model_6.pt"
    restored = [f for n, f in keeper.take_notes() if n == "backup_restored"]
    assert restored and restored[0]["iteration"] == 6 and restored[0]["downloaded"] is True
    assert keeper.restore(None, exp) == got  # asked again (the attempt saved nothing newer): no new fetch


@pytest.mark.parametrize("backup, message", [
    ('url = "s3://AKIAEXAMPLE:hunter2secret@bucket/p"', "must not carry credentials"),
    ('url = "s3://bucket/p?secret_key=hunter2secret"', "must not carry credentials"),
    ('url = "ftp://host/p"', "not a supported backup URL"),
    ('url = "file://relative/dir"', "needs an absolute path"),
    ('url = "file:///mnt/b"\nendpoint_url = "http://127.0.0.1:9000"', "endpoint_url is for S3-compatible"),
    ('url = "s3://bucket/p"\nkeep = -1', "greater than or equal to 0"),
])
def test_bad_backup_config_names_file_key_and_fix_without_echoing_a_secret(tmp_path, backup, message):
    with pytest.raises(ConfigError) as exc:
        parse_config(f'[[jobs]]\nname = "cp"\n[jobs.backup]\n{backup}\n', "/etc/isaacd.toml", tmp_path)
    text = str(exc.value)
    assert text.startswith('/etc/isaacd.toml: jobs[0] (name = "cp").backup') and message in text, text
    assert "hunter2" not in text


def test_a_good_backup_config_is_per_job(tmp_path):
    cfg = parse_config('[[jobs]]\nname = "cp"\n[jobs.backup]\nurl = "s3://bucket/isaacd/"\n'
                       'endpoint_url = "http://127.0.0.1:9000"\nkeep = 3\n[[jobs]]\nname = "other"\n', "t", tmp_path)
    b = cfg.jobs[0].backup
    assert b is not None and b.url == "s3://bucket/isaacd" and b.keep == 3 and b.snapshot_min_seconds == 60.0
    assert cfg.jobs[1].backup is None
    assert "key" not in BackupConfig.model_fields and "secret" not in BackupConfig.model_fields


def test_status_and_metrics_show_the_last_upload_the_lag_and_the_error():
    """What an operator reads: the status line and the /metrics series (from a status row as the runner makes)."""
    import time

    from metrics_fakes import fake_job, fake_status
    from prometheus_client import generate_latest

    from isaacd.metrics import build_registry
    from isaacd.cli.render import format_status

    now = time.time()
    job = fake_job("anymal", now=now)
    text = format_status({**fake_status([job]), "gpus": None}, now=now)
    assert "anymal backup s3://bucket/isaacd/anymal: last upload iteration 90 (6m ago), lag 10 iterations" in text
    assert "backup ERROR since 60s ago: upload to ...: refused; retry in 30s" in text, text

    def samples(status: dict) -> dict[str, float]:
        text = generate_latest(build_registry(lambda: status, None, process_metrics=False)).decode()
        return {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
                if line.startswith("isaacd_backup_")}

    got = samples(fake_status([job]))
    assert got == {'isaacd_backup_last_success_timestamp_seconds{job="anymal"}': pytest.approx(now - 400.0),
                   'isaacd_backup_last_iteration{job="anymal"}': 90.0,
                   'isaacd_backup_lag_iterations{job="anymal"}': 10.0,
                   'isaacd_backup_bytes_total{job="anymal"}': 123456.0,
                   'isaacd_backup_failures_total{job="anymal"}': 4.0,
                   'isaacd_backup_lease_held{job="anymal"}': 1.0}
    no_backup = {**job, "backup": None}
    assert "backup" not in format_status({**fake_status([no_backup]), "gpus": None}, now=now)
    assert samples(fake_status([no_backup])) == {}


def test_an_s3_target_without_s3fs_is_refused_with_the_package_to_install(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "s3fs" else real(name, *a))
    with pytest.raises(ConfigError) as exc:
        parse_config('[[jobs]]\nname = "cp"\n[jobs.backup]\nurl = "s3://bucket/p"\n', "/etc/isaacd.toml", tmp_path)
    assert str(exc.value) == ('/etc/isaacd.toml: jobs[0] (name = "cp").backup.url: s3:// needs the s3fs package, '
                              "which is not installed in isaacd's environment: install s3fs (pip install "
                              "'isaacd[s3]')")


def test_rl_games_and_skrl_layouts_keep_their_paths_and_the_jobs_count(tmp_path):
    """rl_games' nn/last_*_ep_N_*.pth and skrl's checkpoints/agent_<timestep>.pt (timesteps restart per run: the
    job's count is the run's resume point + timestep // rollouts) go up and come back where the trainer wants them."""
    from isaacd.backup.remote import layout_for

    notes = Notes()
    for library, rel, offset, want in (("rl_games", "nn/last_cp_ep_12_rew_1.5.pth", 0, 12),
                                       ("skrl", "checkpoints/agent_160.pt", 30, 30 + 160 // 16)):
        run = tmp_path / library / "2026-01-01_00-00-00_cp"
        fake_checkpoint(run / rel, 0)
        cfg = BackupConfig(url=f"file://{tmp_path / 'bucket' / library}")
        up = Uploader(ObjectStore(cfg, "cp"), cfg, layout_for(library, 16), notes,
                      lambda c, lib=library: VALIDATOR.problem(c, None, lib))
        up.set_runs([Run(run, offset)])
        up.one_pass()
        (entry,) = manifest_of(tmp_path / "bucket" / library / "cp")["checkpoints"]
        assert (entry["file"], entry["iteration"]) == (rel, want), entry
        manifest = Manifest.from_bytes("cp", up.store.read_bytes("manifest.json"))
        got = restore_newest(up.store, manifest, tmp_path / "new-disk" / library, None, notes)
        assert got is not None and got.checkpoint.iteration == want
        assert got.checkpoint.path == tmp_path / "new-disk" / library / run.name / rel
    assert not notes.take()


def test_the_best_evaluated_checkpoint_is_uploaded_and_kept_past_keep_until_another_is_best(tmp_path):
    """Issue 41: the best checkpoint is never pruned from the bucket, whatever `keep` says; once another is best,
    the old one is pruned as `keep` says."""
    run = tmp_path / "run"
    for i in (0, 2, 4):
        fake_checkpoint(run / f"model_{i}.pt", i)
    up, _, prefix = make(tmp_path, keep=1)
    up.set_pinned(frozenset({0}))  # model_0 scored best
    up.set_runs([Run(run)])
    up.one_pass()
    assert sorted(e["file"] for e in manifest_of(prefix)["checkpoints"]) == ["model_0.pt", "model_4.pt"]
    assert (prefix / run.name / "model_0.pt").read_bytes() == (run / "model_0.pt").read_bytes()
    fake_checkpoint(run / "model_6.pt", 6)
    up.one_pass()
    assert sorted(e["file"] for e in manifest_of(prefix)["checkpoints"]) == ["model_0.pt", "model_6.pt"]
    assert (prefix / run.name / "model_0.pt").exists(), "the best was pruned"
    up.set_pinned(frozenset({6}))  # model_6 is the new best: model_0 goes at the next upload
    fake_checkpoint(run / "model_8.pt", 8)
    up.one_pass()
    assert sorted(e["file"] for e in manifest_of(prefix)["checkpoints"]) == ["model_6.pt", "model_8.pt"]
    assert not (prefix / run.name / "model_0.pt").exists()
