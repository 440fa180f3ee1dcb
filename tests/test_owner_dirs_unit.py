"""Issue 38: a launch's preparation for a job's owner goes through the OS seam, all of it, so the fake kernel
(os_fakes.FakeOs) sees every directory made, every file handed over and the state dir opened, and nothing on disk
changes hands. The one place the owner is resolved (`JobSetting.owner`), and the host's own `open_state_dir` on a
real filesystem (no root needed: the test's own files).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from isaacd.access.owner import OwnerProblem
from isaacd.attempt import setting as setting_module
from isaacd.attempt.setting import JobSetting
from isaacd.caches.compile_caches import CacheDir
from isaacd.config.schema import parse_config
from isaacd.os_seam.oscalls import HostOs, RunAs
from isaacd.history.store import job_log_path
from isaacd.os_seam.owner_dirs import STATE_PRIVATE, STATE_REACHED, prepare_owned
from isaacd.runtimes.container_spec import hand_dirs_to_container_user

from os_fakes import FakeOs

OWNER = RunAs(1234, 1235, (1235, 2000), "alice", "/home/alice")


def job_of(toml: str, tmp_path: Path):  # noqa: ANN201
    return parse_config(toml, "test", tmp_path).jobs[0]


def _prepare(kernel, job, state, exp, workdir, caches):  # noqa: ANN001, ANN202
    """A launch's owner-dirs step as the pipeline calls it (launch/steps.py owners_directories)."""
    return prepare_owned(kernel, OWNER, state, job.log_root, exp, workdir, [c.host for c in caches],
                         job_log_path(state, job.name))


def owners_job(tmp_path: Path):  # noqa: ANN201
    return job_of(f'[[jobs]]\nname = "cp"\nlog_root = "{tmp_path}/logs"\n', tmp_path)


def owners_dirs(tmp_path: Path) -> tuple[Path, Path, Path, list[CacheDir]]:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    exp = tmp_path / "logs" / "rsl_rl" / "cp"
    return state, exp, state / "work" / "cp", [CacheDir("warp", state / "caches" / "cp" / "warp", None)]


def test_an_owners_launch_prepares_every_directory_through_the_seam_and_nothing_changes_hands(tmp_path: Path):
    kernel = FakeOs()
    state, exp, workdir, caches = owners_dirs(tmp_path)
    assert _prepare(kernel, owners_job(tmp_path), state, exp, workdir, caches) is None
    assert kernel.opened_state_dirs == [str(state)]
    logs = tmp_path / "logs"
    assert kernel.handed == [(str(p), 1234, 1235) for p in (
        logs, logs / "rsl_rl", exp, workdir, workdir / "outputs", caches[0].host, state / "logs" / "cp.log")]
    # the fake made them (the launch goes on with them) but the kernel changed no owner and no mode
    me = os.getuid()
    assert all(p.stat().st_uid == me for p in (tmp_path, *tmp_path.rglob("*")))
    assert stat.S_IMODE(state.stat().st_mode) == 0o700


@pytest.mark.parametrize("where, key", [("exp", "log_root"), ("cache", "compile_cache"), ("log", "state_dir")])
def test_a_path_the_seam_refuses_names_its_key_and_nothing_after_it_is_handed(tmp_path: Path, where: str, key: str):
    kernel = FakeOs()
    state, exp, workdir, caches = owners_dirs(tmp_path)
    refused = {"exp": exp, "cache": caches[0].host, "log": state / "logs" / "cp.log"}[where]
    kernel.ownership_refusals[str(refused)] = "is a symlink in a directory that someone other than root can change"
    problem = _prepare(kernel, owners_job(tmp_path), state, exp, workdir, caches)
    assert problem == f"{key}: {refused}: is a symlink in a directory that someone other than root can change"
    assert kernel.handed[-1][0] != str(refused) and str(refused) not in [p for p, _, _ in kernel.handed]


def test_the_container_users_dirs_are_chowned_through_the_seam(tmp_path: Path):
    """The owner the caller resolved gets the dirs (hand_over); else a numeric container.user (lchown, a missing path
    skipped); else nobody: no chown at all."""
    there, missing = tmp_path / "logs", tmp_path / "not-yet"
    there.mkdir()
    img = '[[jobs]]\nname = "c"\nruntime = "podman"\n[jobs.container]\nimage = "img"\n'
    kernel = FakeOs()
    hand_dirs_to_container_user(kernel, job_of(img + 'user = "1000:1001"\n', tmp_path), None, [there, missing])
    assert kernel.chowned == [(str(there), 1000, 1001)] and kernel.handed == []
    kernel = FakeOs()
    hand_dirs_to_container_user(kernel, job_of(img + 'user = "1000"\n', tmp_path), OWNER, [there])
    assert kernel.handed == [(str(there), 1234, 1235)] and kernel.chowned == []  # the owner's uid wins
    kernel = FakeOs()
    hand_dirs_to_container_user(kernel, job_of(img, tmp_path), None, [there])
    assert kernel.handed == [] and kernel.chowned == []


def test_the_owner_is_resolved_once_per_config_in_force(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    asked: list[str] = []

    def job_run_as(cfg):  # noqa: ANN001, ANN202
        asked.append(cfg.owner)
        if cfg.owner == "ghost":
            raise OwnerProblem('"ghost" is no user on this host')
        return OWNER

    monkeypatch.setattr(setting_module, "job_run_as", job_run_as)
    setting = JobSetting(job_of('[[jobs]]\nname = "a"\nowner = "alice"\n', tmp_path))
    assert setting.owner() == OWNER and setting.owner() == OWNER and asked == ["alice"]
    setting.reconfigure(job_of('[[jobs]]\nname = "a"\nowner = "alice"\n', tmp_path))  # a reload: a new config
    assert setting.owner() == OWNER and asked == ["alice", "alice"]
    setting.reconfigure(job_of('[[jobs]]\nname = "a"\nowner = "ghost"\n', tmp_path))
    for _ in range(2):  # a problem is never kept: a user created meanwhile is found at the next ask
        with pytest.raises(OwnerProblem, match="ghost"):
            setting.owner()
    assert asked == ["alice", "alice", "ghost", "ghost"]


def test_the_hosts_state_dir_opening_lets_an_owner_reach_their_folders_only(tmp_path: Path):
    state = tmp_path / "state"
    (state / "jobs").mkdir(parents=True, mode=0o755)
    (state / "logs").mkdir(mode=0o755)
    (state / "logs" / "cp.log").write_text("out\n")
    (state / "logs" / "cp.log").chmod(0o644)
    (state / "supervisor.json").write_text("{}")
    (state / "supervisor.json").chmod(0o644)
    (state / "elsewhere").symlink_to(tmp_path)
    state.chmod(0o700)
    HostOs().open_state_dir(state, STATE_REACHED, STATE_PRIVATE)

    def mode(p: Path) -> int:
        return stat.S_IMODE(p.lstat().st_mode)
    assert mode(state) == 0o711 and mode(state / "jobs") == 0o700
    assert all(mode(state / name) == 0o711 for name in STATE_REACHED)
    assert mode(state / "logs" / "cp.log") == 0o640 and mode(state / "supervisor.json") == 0o640
    assert mode(tmp_path) != 0o711  # a link in the state dir is not followed
