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
