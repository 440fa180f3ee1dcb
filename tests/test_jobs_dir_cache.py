"""The job files' parse cache (config/jobs_dir.py DropInCache, schema._checked_drop_in; issue 39's scale goal): a
reload re-reads only what changed, and never keeps a stale or broken job."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from isaacd.config import jobs_dir
from isaacd.config.jobs_dir import DropInCache, DropInError, read_drop_ins
from isaacd.config.schema import ConfigError, load_config


def job(name: str, num_envs: int = 64) -> str:
    return f'[[jobs]]\nname = "{name}"\nnum_envs = {num_envs}\nlog_root = "logs"\n'


def counting(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    parsed: list[Path] = []
    real = jobs_dir.parse_drop_in

    def spy(text: str, path: Path, uid: int = 0) -> jobs_dir.DropIn:
        parsed.append(path)
        return real(text, path, uid)

    monkeypatch.setattr(jobs_dir, "parse_drop_in", spy)
    return parsed


def test_an_unchanged_file_is_parsed_once_a_changed_one_again(tmp_path, monkeypatch):
    parsed = counting(monkeypatch)
    cache = DropInCache()
    (tmp_path / "a.toml").write_text(job("a"))
    (tmp_path / "b.toml").write_text(job("b"))
    assert [d.name for d in read_drop_ins(tmp_path, cache)] == ["a", "b"]
    assert [d.name for d in read_drop_ins(tmp_path, cache)] == ["a", "b"]
    assert [p.name for p in parsed] == ["a.toml", "b.toml"]
    (tmp_path / "b.toml").write_text(job("b", num_envs=128))
    assert read_drop_ins(tmp_path, cache)[1].job["num_envs"] == 128
    assert [p.name for p in parsed] == ["a.toml", "b.toml", "b.toml"]


def test_a_file_replaced_with_the_same_size_and_mtime_is_read_again(tmp_path):
    cache = DropInCache()
    path = tmp_path / "a.toml"
    path.write_text(job("a", num_envs=64))
    st = path.stat()
    assert read_drop_ins(tmp_path, cache)[0].job["num_envs"] == 64
    # rewritten in place, same length, its mtime set back to the old one to the nanosecond (ctime moves on)
    path.write_text(job("a", num_envs=32))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns
    assert read_drop_ins(tmp_path, cache)[0].job["num_envs"] == 32
    # and replaced by a rename of another file (another inode), mtime set back too
    other = tmp_path / ".other"
    other.write_text(job("a", num_envs=16))
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(other, path)
    assert read_drop_ins(tmp_path, cache)[0].job["num_envs"] == 16


def test_a_broken_file_is_refused_every_time_and_never_kept(tmp_path):
    cache = DropInCache()
    path = tmp_path / "a.toml"
    path.write_text(job("a"))
    read_drop_ins(tmp_path, cache)
    path.write_text(job("a") + "oops = \n")
    for _ in range(2):
        with pytest.raises(DropInError, match="not valid TOML"):
            read_drop_ins(tmp_path, cache)
    path.write_text(job("a", num_envs=8))
    assert read_drop_ins(tmp_path, cache)[0].job["num_envs"] == 8


def test_a_removed_file_is_forgotten(tmp_path):
    cache = DropInCache()
    (tmp_path / "a.toml").write_text(job("a"))
    (tmp_path / "b.toml").write_text(job("b"))
    read_drop_ins(tmp_path, cache)
    (tmp_path / "b.toml").unlink()
    assert [d.name for d in read_drop_ins(tmp_path, cache)] == ["a"]
    assert list(cache._parsed) == [tmp_path / "a.toml"]


def host(tmp_path: Path) -> Path:
    cfg = tmp_path / "isaacd.toml"
    cfg.write_text('jobs = []\n[supervisor]\nstate_dir = "state"\ncontrol_socket = "s.sock"\njobs_dir = "jobs.d"\n'
                   '[gpu]\nsource = "none"\n')
    (tmp_path / "jobs.d").mkdir()
    return cfg


def test_a_reload_sees_each_change_of_a_validated_job_and_refuses_a_bad_one_every_time(tmp_path):
    cfg = host(tmp_path)
    path = tmp_path / "jobs.d" / "a.toml"
    path.write_text(job("a", num_envs=64))
    assert load_config(cfg).job("a").num_envs == 64
    assert load_config(cfg).job("a").num_envs == 64
    path.write_text(job("a", num_envs=128))
    assert load_config(cfg).job("a").num_envs == 128
    path.write_text(job("a", num_envs=-1))  # valid TOML, an invalid job: refused naming the file and the key
    for _ in range(2):
        with pytest.raises(ConfigError) as err:
            load_config(cfg)
        assert str(path) in str(err.value) and "num_envs" in str(err.value)
    path.write_text(job("a", num_envs=32))
    assert load_config(cfg).job("a").num_envs == 32


def test_two_files_with_one_name_are_still_refused_after_both_were_validated(tmp_path):
    cfg = host(tmp_path)
    (tmp_path / "jobs.d" / "a.toml").write_text(job("a"))
    (tmp_path / "jobs.d" / "b.toml").write_text(job("b"))
    load_config(cfg)
    (tmp_path / "jobs.d" / "b.toml").write_text(job("a"))
    with pytest.raises(ConfigError, match='"a" is already a job of'):
        load_config(cfg)


class Stat:
    """A stat(2) answer a test controls: the key a file keeps when it is changed twice within one clock tick."""

    def __init__(self, path: Path, ctime_ns: int):
        real = path.stat()
        self.st_dev, self.st_ino, self.st_size, self.st_uid, self.st_mode = \
            real.st_dev, real.st_ino, real.st_size, real.st_uid, real.st_mode
        self.st_mtime_ns = self.st_ctime_ns = ctime_ns


def test_a_file_rewritten_within_one_timestamp_tick_is_still_seen(tmp_path, monkeypatch):
    # the kernel stamps a file with a coarse clock: two writes of the same size within one tick leave every field
    # of the key as it was. A file that recent is compared by its bytes, until its stamp is old enough to trust.
    parsed = counting(monkeypatch)
    path = tmp_path / "a.toml"
    path.write_text(job("a", num_envs=64))
    t = 1_000 * 10**9
    now = [t]
    cache = DropInCache(stat=lambda p: Stat(Path(p), t), clock_ns=lambda: now[0])
    assert read_drop_ins(tmp_path, cache)[0].job["num_envs"] == 64
    path.write_text(job("a", num_envs=32))  # same size, and the stat above says the same key
    assert read_drop_ins(tmp_path, cache)[0].job["num_envs"] == 32
    assert read_drop_ins(tmp_path, cache)[0].job["num_envs"] == 32  # same bytes: read, not parsed again
    assert len(parsed) == 2
    now[0] = t + jobs_dir.RACY_NS  # its stamp is old now: any later change would move its ctime
    assert read_drop_ins(tmp_path, cache)[0].job["num_envs"] == 32
    path.write_text(job("a", num_envs=16))  # (a change the real ctime would show; this stat hides it)
    assert read_drop_ins(tmp_path, cache)[0].job["num_envs"] == 32
    assert len(parsed) == 2  # trusted by its key alone: neither read nor parsed


def test_a_file_given_to_another_user_is_that_users_job_at_the_next_reload(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("chown needs root")
    import pwd
    nobody = pwd.getpwnam("nobody")
    cfg = host(tmp_path)
    path = tmp_path / "jobs.d" / "a.toml"
    path.write_text(job("a"))
    assert load_config(cfg).job("a").owner == "root"
    os.chown(path, nobody.pw_uid, nobody.pw_gid)
    assert load_config(cfg).job("a").owner == "nobody"
    os.chown(path, 54321, 54321)  # no user on this host: refused naming the file and the fix, every time
    for _ in range(2):
        with pytest.raises(ConfigError, match=f"{path}: owned by uid 54321 is no user on this host; chown it"):
            load_config(cfg)


def test_each_owner_is_looked_up_once_a_reload_and_an_unchanged_job_not_validated_again(tmp_path, monkeypatch):
    from isaacd.config import schema
    cfg = host(tmp_path)
    for name in ("a", "b", "c"):
        (tmp_path / "jobs.d" / f"{name}.toml").write_text(job(name))
    lookups: list[int] = []
    checked: list[str] = []
    real_user, real_check = jobs_dir.user_by_uid, schema.check_job_table
    monkeypatch.setattr(jobs_dir, "user_by_uid", lambda uid: lookups.append(uid) or real_user(uid))
    monkeypatch.setattr(schema, "check_job_table", lambda job, src, ray=None: checked.append(src) or
                        real_check(job, src, ray))
    load_config(cfg)
    assert len(lookups) == 1 and len(checked) == 3
    load_config(cfg)
    assert len(lookups) == 2 and len(checked) == 3  # the owner asked again (a user may change), no job validated
    (tmp_path / "jobs.d" / "b.toml").write_text(job("b", num_envs=8))
    assert load_config(cfg).job("b").num_envs == 8
    assert checked[3:] == [str(tmp_path / "jobs.d" / "b.toml")]
