"""Issue 32, jobs run as their owner: the pure parts and the thin filesystem layer, without a trainer.

- os_seam/owned_dirs.py on a real filesystem (as root, handing to uid 65534 `nobody`, no user made): what it makes
  and hands over, the symlinks it follows (only those root alone can change) and those it refuses, a third user's
  directory refused;
- access/owner.py: whom a job runs as, its HOME/USER/LOGNAME, the container's --user in all three renderings;
- the process runtime and the spare keeper on the fake kernel (os_fakes.FakeOs): the spawn carries the owner, `find`
  looks for the owner's uid, the spare's FIFO and events file are handed to the owner and its spawn runs as them.
"""

from __future__ import annotations

import json
import os
import pwd
import stat
from pathlib import Path

import pytest

from backup_fakes import fake_checkpoint
from test_attempt_planner import World
from test_backup import events, make, validator

from isaacd.attempt.reset import set_runs_aside
from isaacd.attempt.setting import JobSetting
from isaacd.attempt.spare import SpareKeeper
from isaacd.backup.manifest import Manifest
from isaacd.backup.restore import restore_newest
from isaacd.backup.uploader import Run
from isaacd.attempt.spare_effects import StartSpare
from isaacd.config.schema import parse_config
from isaacd.history.store import Attempt, JobHistory
from isaacd.jobs.messages import LaunchRefused
from isaacd.jobs.model import JobState
from isaacd.os_seam.oscalls import RunAs
from isaacd.os_seam.owned_dirs import OwnershipRefused, create_owned_file, hand_over, make_owned_dir
from isaacd.runtimes.base import LaunchSpec, RuntimeFailure
from isaacd.runtimes.container_spec import ContainerSpec
from isaacd.runtimes.process import TOKEN_ENV, ProcessRuntime
from isaacd.runtimes.quadlet import render_quadlet, render_service
from isaacd.access.owner import OwnerProblem, container_user, inside_log_root, job_run_as, owner_env
from isaacd.workflows import resolve

from os_fakes import FakeOs

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
NOBODY = 65534
OWNER = RunAs(1234, 1235, (1235, 2000), "alice", "/home/alice")


def job_of(toml: str, tmp_path: Path):  # noqa: ANN201
    return parse_config(toml, "test", tmp_path).jobs[0]


# ---- owned_dirs on a real filesystem --------------------------------------------------------------
@pytest.fixture()
def root_dir(tmp_path: Path) -> Path:
    """A root-owned directory no one else may write (tmp_path's own parents are root's 0700)."""
    d = tmp_path / "r"
    d.mkdir(mode=0o755)
    return d


@needs_root
def test_a_new_dir_and_its_new_parents_in_the_users_area_are_the_users(root_dir: Path):
    area = root_dir / "data-alice"
    area.mkdir()
    os.chown(area, NOBODY, NOBODY)
    make_owned_dir(area / "logs" / "rsl_rl" / "exp", NOBODY, NOBODY, "nobody")
    for p in (area / "logs", area / "logs" / "rsl_rl", area / "logs" / "rsl_rl" / "exp"):
        assert p.stat().st_uid == NOBODY, p
    assert stat.S_IMODE((area / "logs" / "rsl_rl" / "exp").stat().st_mode) == 0o750
    # made in a root directory: the parents stay root's, only the directory asked for is handed over
    make_owned_dir(root_dir / "state" / "caches" / "j", NOBODY, NOBODY, "nobody")
    assert (root_dir / "state").stat().st_uid == 0 and (root_dir / "state" / "caches").stat().st_uid == 0
    assert (root_dir / "state" / "caches" / "j").stat().st_uid == NOBODY


@needs_root
def test_a_symlink_the_user_could_plant_is_never_followed(root_dir: Path):
    area = root_dir / "home"
    area.mkdir()
    os.chown(area, NOBODY, NOBODY)
    secret = root_dir / "etc"
    (secret / "exp").mkdir(parents=True)
    (area / "logs").symlink_to(secret)  # in the user's own directory: they could have put it there
    with pytest.raises(OwnershipRefused, match=r"logs is a symlink in a directory that someone other than root"):
        make_owned_dir(area / "logs" / "exp", NOBODY, NOBODY, "nobody")
    with pytest.raises(OwnershipRefused, match="is a symlink"):
        hand_over(area / "logs", NOBODY, NOBODY, "nobody")
    assert secret.stat().st_uid == 0 and (secret / "exp").stat().st_uid == 0
    # a file in the user's dir replaced by a link: create_owned_file refuses (O_EXCL | O_NOFOLLOW), hands nothing
    (area / "events.jsonl").symlink_to(secret / "passwd")
    (secret / "passwd").write_text("root:x:0:0\n")
    with pytest.raises(OwnershipRefused, match="is a symlink"):
        create_owned_file(area / "events.jsonl", NOBODY, NOBODY, "nobody")
    assert (secret / "passwd").stat().st_uid == 0 and (secret / "passwd").read_text() == "root:x:0:0\n"


@needs_root
def test_a_symlink_only_root_can_change_is_followed(root_dir: Path):
    real = root_dir / "real"
    real.mkdir()
    (root_dir / "data").symlink_to(real)  # in a root directory, 0755: the admin's
    make_owned_dir(root_dir / "data" / "alice", NOBODY, NOBODY, "nobody")
    assert (real / "alice").stat().st_uid == NOBODY and real.stat().st_uid == 0


@needs_root
def test_a_third_users_directory_is_refused_and_roots_is_handed_over(root_dir: Path):
    theirs = root_dir / "bobs"
    theirs.mkdir()
    os.chown(theirs, 4242, 4242)
    with pytest.raises(OwnershipRefused, match=r"belongs to uid 4242, not to nobody"):
        make_owned_dir(theirs, NOBODY, NOBODY, "nobody")
    assert theirs.stat().st_uid == 4242
    left = root_dir / "left-by-a-root-run"
    left.mkdir()
    left.chmod(0o755)
    make_owned_dir(left, NOBODY, NOBODY, "nobody")
    assert left.stat().st_uid == NOBODY and stat.S_IMODE(left.stat().st_mode) == 0o750
    fifo = root_dir / "control.fifo"
    os.mkfifo(fifo, 0o600)
    assert hand_over(fifo, NOBODY, NOBODY, "nobody") and fifo.stat().st_uid == NOBODY
    assert hand_over(root_dir / "missing", NOBODY, NOBODY, "nobody") is False
    create_owned_file(root_dir / "job.log", NOBODY, NOBODY, "nobody")
    st = (root_dir / "job.log").stat()
    assert st.st_uid == NOBODY and stat.S_IMODE(st.st_mode) == 0o640


# ---- whom a job runs as ---------------------------------------------------------------------------
def test_a_job_without_an_owner_or_of_root_runs_as_the_supervisor(tmp_path: Path):
    assert job_run_as(job_of('[[jobs]]\nname = "a"\n', tmp_path)) is None
    assert job_run_as(job_of('[[jobs]]\nname = "a"\nowner = "root"\n', tmp_path)) is None
    me = pwd.getpwuid(os.getuid()).pw_name
    assert job_run_as(job_of(f'[[jobs]]\nname = "a"\nowner = "{me}"\n', tmp_path)) is None


def test_an_unknown_owner_is_a_problem_naming_the_user(tmp_path: Path):
    with pytest.raises(OwnerProblem, match='"nosuchuser32" is no user on this host'):
        job_run_as(job_of('[[jobs]]\nname = "a"\nowner = "nosuchuser32"\n', tmp_path))


@needs_root
def test_an_owners_job_runs_with_all_their_groups(tmp_path: Path):
    ra = job_run_as(job_of('[[jobs]]\nname = "a"\nowner = "nobody"\n', tmp_path))
    pw = pwd.getpwnam("nobody")
    assert ra == RunAs(pw.pw_uid, pw.pw_gid, tuple(ra.gids), "nobody", pw.pw_dir)
    assert ra.gids[0] == pw.pw_gid and set(ra.gids) == set(os.getgrouplist("nobody", pw.pw_gid))


def test_the_owners_home_user_and_logname_unless_the_job_sets_them():
    env = {"HOME": "/root", "USER": "root", "LOGNAME": "root", "PATH": "/usr/bin"}
    assert owner_env(env, None, {}) == env
    assert owner_env(env, OWNER, {}) == {"HOME": "/home/alice", "USER": "alice", "LOGNAME": "alice", "PATH": "/usr/bin"}
    assert owner_env({**env, "HOME": "/scratch"}, OWNER, {"HOME": "/scratch"})["HOME"] == "/scratch"


def test_the_container_runs_as_the_owner_whatever_container_user_says(tmp_path: Path):
    job = job_of('[[jobs]]\nname = "a"\nruntime = "podman"\n[jobs.container]\nimage = "img"\nuser = "0:0"\n', tmp_path)
    assert container_user(job, None) == "0:0"  # a root job: the admin's container.user
    assert container_user(job, OWNER) == "1234:1235"
    ls = LaunchSpec(job=job, argv=[], trainer_args=[], env={}, cwd=Path("/"), log_path=Path("/tmp/x.log"),
                    run_as=OWNER)
    cs = ContainerSpec.from_launch(ls, "tok", 1)
    # Hydra writes outputs/ in the cwd, the image's workdir is root's: the owner's host dir is mounted there
    assert ("/outputs", "/workspace/isaacd/outputs", "") in cs.volumes
    assert "\nUser=1234:1235\n" in render_quadlet(cs)
    assert "--user 1234:1235" in render_service(cs)
    assert cs.libpod_create_body()["user"] == "1234:1235"


# ---- the process runtime and the spare on the fake kernel ----------------------------------------
def test_the_trainer_is_spawned_as_its_owner_and_found_under_the_owners_uid(tmp_path: Path):
    kernel = FakeOs()
    kernel.add(1, pid=100)
    job = job_of(f'[[jobs]]\nname = "p"\nlog_root = "{tmp_path}/logs"\n', tmp_path)
    rt = ProcessRuntime(kernel)
    rt.start(LaunchSpec(job=job, argv=["python3", "train.py"], trainer_args=[], env={}, cwd=tmp_path,
                        log_path=tmp_path / "p.log", token="t1", run_as=OWNER))
    assert kernel.spawns[0].run_as == OWNER
    # a trainer of uid 1234 is not ours (1000) for a job without an owner: never adopted by mistake
    assert rt.find(job, "t1") is None


@needs_root
def test_find_looks_for_the_owners_uid(tmp_path: Path):
    kernel = FakeOs()
    kernel.add(1, pid=100)
    job = job_of(f'[[jobs]]\nname = "p"\nowner = "nobody"\nlog_root = "{tmp_path}/logs"\n', tmp_path)
    lost = kernel.add(1, env={TOKEN_ENV: "t1"}, uid=NOBODY)
    assert ProcessRuntime(kernel).find(job, "t1").pid == lost.pid


@needs_root
def test_an_owners_spare_has_its_fifo_and_events_file_and_runs_as_them(tmp_path: Path):
    kernel = FakeOs()
    job = job_of(f'[[jobs]]\nname = "s"\nowner = "nobody"\nlog_root = "{tmp_path}/logs"\n', tmp_path)
    keeper = SpareKeeper(job, runtime=None, state_dir=tmp_path / "state", event=lambda *a, **k: None,  # type: ignore[arg-type]
                         oscalls=kernel)
    program = resolve(job).program(in_container=False)
    (start,) = keeper.tick(JobState.RUNNING, program, now=100.0)
    assert isinstance(start, StartSpare)
    pw = pwd.getpwnam("nobody")
    handed = {Path(p).name.split("-")[0]: (uid, gid) for p, uid, gid in kernel.handed}
    # its FIFO and events file, and (issue 38: the launch pipeline a cold start runs too) the job's dirs: the owner's
    assert handed["control"] == handed["events"] == (pw.pw_uid, pw.pw_gid)
    assert set(handed.values()) == {(pw.pw_uid, pw.pw_gid)}
    assert start.spec.run_as is not None and start.spec.run_as.uid == pw.pw_uid
    assert start.spec.env["HOME"] == pw.pw_dir and start.spec.env["USER"] == "nobody"
    # the keepalive and the go open the FIFO without following a link put in its place
    assert all(flags & os.O_NOFOLLOW for _path, flags in kernel.open_fds.values())


# ---- the backup of an owner's job: what lands is theirs, only theirs is uploaded -------------------
@needs_root
def test_an_owners_upload_takes_only_their_own_files_never_a_link_or_anothers(tmp_path: Path):

    run = tmp_path / "logs" / "rsl_rl" / "cp" / "2026-01-01_00-00-00_cp"
    os.chown(fake_checkpoint(run / "model_2.pt", 2), NOBODY, NOBODY)
    bobs = fake_checkpoint(tmp_path / "bob" / "model_9.pt", 4)  # root's (or bob's) file, readable only by them
    (run / "model_4.pt").symlink_to(bobs)  # the owner points a checkpoint name at it
    os.chown(fake_checkpoint(run / "model_6.pt", 6), 4242, 4242)  # a file of a third user's in the owner's dir
    up, notes, prefix = make(tmp_path, keep=0)
    up.owner_uid = NOBODY
    up.set_runs([Run(run)])
    up.one_pass()
    files = {e["file"] for e in json.loads((prefix / "manifest.json").read_text())["checkpoints"]}
    assert files == {"model_2.pt"}
    skipped = {Path(e["path"]).name: e["problem"] for e in events(notes)["backup_skipped"]}
    assert skipped == {"model_4.pt": "a symlink in the owner's run dir",
                       "model_6.pt": f"not a file of the job's owner (uid 4242, the owner's is {NOBODY})"}
    assert not (prefix / run.name / "model_4.pt").exists() and not (prefix / run.name / "model_6.pt").exists()


@needs_root
def test_an_owners_restore_lands_as_theirs_and_never_through_their_links(tmp_path: Path):

    run = tmp_path / "old" / "2026-01-01_00-00-00_cp"
    fake_checkpoint(run / "model_2.pt", 2, pad=2000)
    up, notes, prefix = make(tmp_path)
    up.set_runs([Run(run)])
    up.one_pass()
    manifest = Manifest.from_bytes("cp", (prefix / "manifest.json").read_bytes())
    area = tmp_path / "area"
    area.mkdir()
    os.chown(area, NOBODY, NOBODY)
    owner = RunAs(NOBODY, NOBODY, (NOBODY,), "nobody", "/")
    got = restore_newest(up.store, manifest, area / "exp", None, notes, validator, owner)
    assert got is not None and got.downloaded and got.checkpoint.path == area / "exp" / run.name / "model_2.pt"
    st = got.checkpoint.path.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (NOBODY, 0o640)
    assert (area / "exp" / run.name).stat().st_uid == NOBODY
    assert got.checkpoint.path.read_bytes() == (run / "model_2.pt").read_bytes()
    assert not list(area.rglob(".*isaacd-restore*"))
    # the owner's experiment dir is a link to a root directory: refused, nothing written there
    root_dir = tmp_path / "rootdir"
    root_dir.mkdir()
    (area / "exp2").symlink_to(root_dir)
    with pytest.raises(OwnershipRefused, match="exp2 is a symlink"):
        restore_newest(up.store, manifest, area / "exp2", None, notes, validator, owner)
    assert list(root_dir.iterdir()) == []


def test_an_owners_run_dir_is_read_only_inside_their_log_root(tmp_path: Path):
    """The run dir an owner's trainer reports is read (TensorBoard, checkpoints) and swept by root only inside the
    job's log_root, links resolved: never another user's run."""
    logs, bob = tmp_path / "logs", tmp_path / "bob" / "run"
    (logs / "rsl_rl" / "cp" / "run1").mkdir(parents=True)
    bob.mkdir(parents=True)
    (logs / "rsl_rl" / "cp" / "evil").symlink_to(bob)
    owned = job_of(f'[[jobs]]\nname = "a"\nowner = "nobody"\nlog_root = "{logs}"\n', tmp_path)
    assert inside_log_root(owned, logs / "rsl_rl" / "cp" / "run1")
    assert not inside_log_root(owned, logs / "rsl_rl" / "cp" / "evil")
    assert not inside_log_root(owned, bob) and not inside_log_root(owned, logs / ".." / "bob" / "run")
    assert inside_log_root(job_of(f'[[jobs]]\nname = "a"\nlog_root = "{logs}"\n', tmp_path), bob)  # an admin's job


@needs_root
def test_a_reset_sets_an_owners_runs_aside_in_a_folder_of_theirs(tmp_path: Path):
    """`isaacd reset` moves the run dirs into `<experiment>.reset-<time>`: for an owner's job that folder is theirs
    (made by root in their log_root, they could not clear it otherwise)."""
    logs = tmp_path / "logs"
    job = job_of(f'[[jobs]]\nname = "cp"\nowner = "nobody"\nlog_root = "{logs}"\n', tmp_path)
    setting = JobSetting.of(job)
    run = setting.resolved.workflow.experiment_dir(job) / "2026-01-01_00-00-00"
    run.mkdir(parents=True)
    for d in (logs, *(p for p in run.parents if p.is_relative_to(logs)), run):
        os.chown(d, NOBODY, NOBODY)
    history = JobHistory(name="cp", attempts=[Attempt(number=1, started_at=0.0, reason="initial", run_dir=str(run))])
    done = set_runs_aside(setting, history, 0.0)
    assert done.folder is not None and done.folder.stat().st_uid == NOBODY
    assert (done.folder / run.name).is_dir() and not run.exists()


# ---- the planner and the starter for an owner's job ------------------------------------------------
@needs_root
def test_an_owners_launch_runs_every_rank_as_them_and_makes_their_dirs(tmp_path: Path):
    """A two-rank job (torchrun starts the ranks, as its own children: the same user) of nobody's: the plan's spec runs
    as nobody with their HOME, its log_root, experiment dir, workdir and job log are theirs, and the starter makes the
    attempt's events file theirs. A Ray job with an owner is refused naming `owner`."""
    pw = pwd.getpwnam("nobody")
    w = World(tmp_path, '[[jobs]]\nname = "cp"\nowner = "nobody"\nmax_iterations = 10\nlog_root = "logs"\n'
                        'device = "cuda:0"\ngpus = [0, 1]\nspare = false\n')
    plan = w.plan()
    assert plan.spec.run_as is not None and plan.spec.run_as.uid == pw.pw_uid and w.cfg.ranks == 2
    assert "torch.distributed.run" in plan.spec.argv
    assert plan.spec.env["HOME"] == pw.pw_dir and plan.spec.env["USER"] == "nobody"
    logs = tmp_path / "logs"
    for d in (logs, logs / "rsl_rl", w.setting.resolved.workflow.experiment_dir(w.cfg), plan.spec.cwd,
              w.state_dir / "logs" / "cp.log"):
        assert d.stat().st_uid == pw.pw_uid, d
    assert w.starter().start(plan) is None
    assert Path(plan.shim_events).stat().st_uid == pw.pw_uid
    ray = World(tmp_path / "r", '[ray]\naddress = "auto"\n[[jobs]]\nname = "cp"\nowner = "nobody"\nruntime = "ray"\n')
    refused = ray.plan()
    assert isinstance(refused, LaunchRefused) and refused.reason.startswith('cannot start: owner: runtime = "ray"')


def test_a_program_the_owner_may_not_run_says_so(tmp_path: Path):
    kernel = FakeOs()
    kernel.spawn_error = PermissionError(13, "Permission denied", "/root/venv/bin/python")
    job = job_of(f'[[jobs]]\nname = "p"\nlog_root = "{tmp_path}/logs"\n', tmp_path)
    spec = LaunchSpec(job=job, argv=["/root/venv/bin/python"], trainer_args=[], env={}, cwd=tmp_path,
                      log_path=tmp_path / "p.log", run_as=OWNER)
    with pytest.raises(RuntimeFailure, match=r"^/root/venv/bin/python: permission denied for alice, who runs the job"):
        ProcessRuntime(kernel).start(spec)


def test_an_owners_trainer_never_inherits_the_supervisors_credentials():
    supervisor = {"PATH": "/usr/bin", "LANG": "C.UTF-8", "AWS_SECRET_ACCESS_KEY": "root-key", "HOME": "/root",
                  "CUDA_MODULE_LOADING": "LAZY", "SSH_AUTH_SOCK": "/tmp/ssh-root"}
    attempt = {**supervisor, "ISAACD_SHIM_EVENTS": "/var/lib/isaacd/e.jsonl", "WANDB_PROJECT": "mine",
               "PYTHONUNBUFFERED": "1"}
    env = owner_env(attempt, RunAs(1001, 1001, (1001,), "alice", "/home/alice"), {"WANDB_PROJECT": "mine"},
                    supervisor_env=supervisor)
    assert env == {"PATH": "/usr/bin", "LANG": "C.UTF-8", "CUDA_MODULE_LOADING": "LAZY",
                   "ISAACD_SHIM_EVENTS": "/var/lib/isaacd/e.jsonl", "WANDB_PROJECT": "mine", "PYTHONUNBUFFERED": "1",
                   "HOME": "/home/alice", "USER": "alice", "LOGNAME": "alice"}
    assert owner_env(attempt, None, {}) is attempt  # a job of the supervisor's own user: as before
