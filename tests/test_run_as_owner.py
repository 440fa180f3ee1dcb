"""Issue 32, jobs run as their owner, on real Unix users made here (useradd; removed afterwards; unique names so
parallel workers never collide).

One real supervisor (root) runs three jobs of the host config, whose `owner =` only an admin may set:
- alice's built-in trainer (real rsl_rl, CPU, through the shim) runs as alice (its /proc status Uid/Gid/Groups),
  so does its warm spare, and so does the spare that takes the attempt over after a SIGKILL; it trains to the end;
  its log_root, experiment dir and checkpoints are alice's;
- alice's `command` job, a small Python script, tries to create a file in bob's log_root: EACCES, nothing created;
  it reports its uid, groups and HOME; its compile cache is alice's;
- bob's job runs as bob, its log_root is bob's (0750), made by isaacd.
In Podman (real podman, rootful, the host's root filesystem as the image): alice's container runs as alice's uid.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import stat
import subprocess
import tempfile
import textwrap
import uuid
from pathlib import Path

import pytest

from helpers import SupervisorProc, builtin_job, wait_for, write_config
from test_podman_runtime import cleanup_containers, podman_url  # noqa: F401 - fixtures

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                                reason="needs root and useradd: the test makes real Unix users and runs jobs as them")

PROBE = textwrap.dedent("""
    import errno, os, sys, time
    target = os.path.join(sys.argv[1], "alice-was-here")
    for _ in range(600):  # bob's log_root: made by isaacd when bob's job starts
        if os.path.isdir(sys.argv[1]):
            break
        time.sleep(0.1)
    try:
        open(target, "x").close()
        print("probe: CREATED", target, flush=True)
    except OSError as exc:
        print("probe:", errno.errorcode.get(exc.errno, exc.errno), target, flush=True)
    print("probe: uid", os.getuid(), os.geteuid(), "gid", os.getgid(), "groups", sorted(os.getgroups()),
          "home", os.environ.get("HOME"), "user", os.environ.get("USER"), flush=True)
    time.sleep(1000)
""")


@pytest.fixture(scope="module")
def users():
    """alice and bob (with a shared extra group, to see supplementary groups), unique per run; removed after."""
    tag = uuid.uuid4().hex[:6]
    names = {"alice": f"i32a{tag}", "bob": f"i32b{tag}"}
    group = f"i32g{tag}"
    subprocess.run(["groupadd", group], check=True, capture_output=True)
    made = []
    try:
        for n in names.values():
            subprocess.run(["useradd", "-m", "-s", "/usr/sbin/nologin", "-G", group, n], check=True, capture_output=True)
            made.append(n)
        yield {k: pwd.getpwnam(v) for k, v in names.items()}
    finally:
        for n in made:
            subprocess.run(["userdel", "-r", n], capture_output=True)
        subprocess.run(["groupdel", group], capture_output=True)


@pytest.fixture(scope="module")
def user_python():
    """A Python the owners may run with this project's packages (torch, rsl_rl, isaacd_trainer): the project's .venv
    links to an interpreter under /root (0700 here), which no other user may execute. A job's trainer needs a Python
    its owner can run, as on a real server (a shared conda env, a venv under /opt): a venv of Debian's python3 whose
    site dir adds this one's."""
    d = Path(tempfile.mkdtemp(prefix="isaacd-i32-py-", dir="/tmp"))
    d.chmod(0o755)
    venv = d / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    site = next((venv / "lib").glob("python3.*/site-packages"))
    ours = next((Path(__file__).resolve().parents[1] / ".venv" / "lib").glob("python3.*/site-packages"))
    (site / "isaacd-project.pth").write_text(f"import site; site.addsitedir({str(ours)!r})\n")
    yield str(venv / "bin" / "python")
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def base():
    """A directory every user may traverse (pytest's tmp_path lies under a root-only /tmp/pytest-of-root)."""
    d = Path(tempfile.mkdtemp(prefix="isaacd-i32-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def area(base: Path, who: pwd.struct_passwd) -> Path:
    """A user's data area, as an admin hands out /data/<user>: theirs, others may traverse it."""
    d = base / who.pw_name
    d.mkdir()
    os.chown(d, who.pw_uid, who.pw_gid)
    d.chmod(0o755)
    return d


def proc_ids(pid: int) -> dict[str, list[int]]:
    """Uid, Gid (real, effective, saved, fs) and Groups of a live process, from /proc/<pid>/status."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("Uid", "Gid", "Groups"):
            out[key] = [int(x) for x in rest.split()]
    return out


def owned_by(path: Path, who: pwd.struct_passwd) -> bool:
    st = path.lstat()
    return st.st_uid == who.pw_uid and not stat.S_ISLNK(st.st_mode)


def test_jobs_run_as_their_owners_and_cannot_write_into_each_others_log_root(users, base, user_python):
    alice, bob = users["alice"], users["bob"]
    a_area, b_area = area(base, alice), area(base, bob)
    script = base / "probe.py"
    script.write_text(PROBE)
    bob_logs = b_area / "logs"
    trainer = builtin_job("own", owner=alice.pw_name, log_root=str(a_area / "logs"), max_iterations=16, launcher=[user_python],
                          save_interval=4, extra_args=["agent.num_steps_per_env=8"], spare="booted") \
        + "\n[jobs.watchdogs.divergence]\nenabled = false\n[jobs.watchdogs.no_progress]\nenabled = false\n"
    probe = builtin_job("probe", owner=alice.pw_name, log_root=str(a_area / "probe"),
                        command=["/usr/bin/python3", str(script), str(bob_logs)])
    bobs = builtin_job("bobs", owner=bob.pw_name, log_root=str(bob_logs), command=["sh", "-c", "exec sleep 1000"])
    sp = SupervisorProc(write_config(base, trainer + probe + bobs)).start()
    try:
        # alice's trainer, frozen once it trains, so its spare is ready long before the run would end
        j = wait_for(lambda: (x := sp.job("own"))["state"] == "running" and x["pid"] and x, 120, what="alice trains")
        first = j["pid"]
        ids = proc_ids(first)
        assert ids["Uid"] == [alice.pw_uid] * 4 and ids["Gid"] == [alice.pw_gid] * 4, ids
        assert sorted(ids["Groups"]) == sorted(os.getgrouplist(alice.pw_name, alice.pw_gid))  # initgroups
        os.killpg(first, signal.SIGSTOP)
        j = wait_for(lambda: (x := sp.job("own"))["spare"].get("state") == "ready" and x, 180, what="a ready spare")
        spare = j["spare"]["pid"]
        assert j["spare"]["mode"] == "booted"  # its boot wrote into a staging dir of alice's, its go reopens her log
        assert proc_ids(spare)["Uid"] == [alice.pw_uid] * 4 and proc_ids(spare)["Gid"] == [alice.pw_gid] * 4
        os.killpg(first, signal.SIGKILL)  # the spare (alice's) takes the attempt over, from its FIFO
        j = wait_for(lambda: (x := sp.job("own"))["pid"] not in (None, first) and x, 60, what="the spare's takeover")
        assert j["pid"] == spare
        started = [e for e in sp.events("own") if e["event"] == "started"][-1]
        assert started["warm_spare"] is True and started["attempt"] == 2
        assert proc_ids(spare)["Uid"] == [alice.pw_uid] * 4
        wait_for(lambda: sp.job("own")["state"] == "completed", 300, what="alice's job trains to the end")

        # her log_root, experiment dir and checkpoints are hers; 0750 where isaacd made them
        logs = a_area / "logs"
        assert owned_by(logs, alice) and stat.S_IMODE(logs.stat().st_mode) == 0o750
        ckpts = sorted(logs.rglob("model_*.pt"))  # <log_root>/rsl_rl/<experiment>/<run>/model_<i>.pt
        assert ckpts and all(owned_by(p, alice) for p in [logs / "rsl_rl", ckpts[0].parent.parent, *ckpts])
        assert owned_by(base / "state" / "work" / "own", alice)  # the trainer's cwd (Hydra writes outputs/ there)

        # alice's probe: EACCES in bob's log_root, nothing created; alice's uid, groups and HOME
        log = base / "state" / "logs" / "probe.log"
        text = wait_for(lambda: "probe: uid" in (t := log.read_text()) and t, 60, what="the probe's report")
        assert f"probe: EACCES {bob_logs}/alice-was-here" in text, text
        assert not (bob_logs / "alice-was-here").exists()
        groups = sorted(set(os.getgrouplist(alice.pw_name, alice.pw_gid)))
        assert (f"probe: uid {alice.pw_uid} {alice.pw_uid} gid {alice.pw_gid} groups {groups} "
                f"home {alice.pw_dir} user {alice.pw_name}") in text, text
        assert owned_by(log, alice) and stat.S_IMODE(log.stat().st_mode) & 0o007 == 0  # her output: not for others
        warp = base / "state" / "caches" / "probe" / "warp"
        assert owned_by(warp, alice) and stat.S_IMODE(warp.stat().st_mode) == 0o750
        # the root supervisor's signals reach alice's process: `isaacd stop` ends it
        probe_pid = sp.job("probe")["pid"]
        sp.cli("stop", "probe")
        wait_for(lambda: sp.job("probe")["state"] == "stopped", 30, what="alice's probe stopped by root")
        assert not Path(f"/proc/{probe_pid}").exists()

        # bob's job: bob's process, bob's log_root (0750: alice cannot even list it)
        b = wait_for(lambda: (x := sp.job("bobs"))["pid"] and x, 30, what="bob's job")
        assert proc_ids(b["pid"])["Uid"] == [bob.pw_uid] * 4
        assert owned_by(bob_logs, bob) and stat.S_IMODE(bob_logs.stat().st_mode) == 0o750
        # the histories stay root's alone though the state dir is now traversable for the owners' trainers
        assert stat.S_IMODE((base / "state").stat().st_mode) == 0o711
        assert stat.S_IMODE((base / "state" / "jobs").stat().st_mode) == 0o700
    finally:
        sp.stop()


def test_a_symlink_the_owner_planted_in_the_log_root_is_refused_naming_it(users, base):
    """alice points her log_root's rsl_rl dir at a root directory: the launch is refused naming log_root and the
    symlink, and the root directory is not handed to her."""
    alice = users["alice"]
    a_area = area(base, alice)
    victim = base / "root-owned"
    victim.mkdir()
    (victim / "cartpole").mkdir()
    logs = a_area / "logs"
    logs.mkdir()
    os.chown(logs, alice.pw_uid, alice.pw_gid)
    (logs / "rsl_rl").symlink_to(victim)
    os.lchown(logs / "rsl_rl", alice.pw_uid, alice.pw_gid)
    sp = SupervisorProc(write_config(base, builtin_job("own", owner=alice.pw_name, log_root=str(logs)))).start()
    try:
        j = wait_for(lambda: (x := sp.job("own"))["state"] == "failed" and x, 60, what="the refusal")
        assert "log_root" in j["state_reason"] and "rsl_rl is a symlink" in j["state_reason"], j["state_reason"]
        assert victim.stat().st_uid == 0 and (victim / "cartpole").stat().st_uid == 0
    finally:
        sp.stop()


@pytest.mark.podman
def test_an_owners_container_and_its_spare_run_as_the_owner(users, base, user_python, podman_url,  # noqa: F811
                                                             cleanup_containers):  # noqa: F811
    """Rootful Podman, the host's root filesystem as the image: alice's trainer container and its spare container
    run as her uid:gid (podman inspect, /proc), though the job's container.user says 0:0; the spare (its FIFO, events
    file and the attempt's events file made hers) takes the attempt over after a SIGKILL, as alice."""
    alice = users["alice"]
    a_area = area(base, alice)
    name = f"i32c{uuid.uuid4().hex[:6]}"
    cleanup_containers.append(name)
    # an explicit container.user is the admin's choice for a root job; an owner's job runs as the owner anyway
    job = builtin_job(name, runtime="podman", owner=alice.pw_name, log_root=str(a_area / "logs"),
                      launcher=[user_python], max_iterations=100000, save_interval=1, spare="imports",
                      extra_args=["agent.num_steps_per_env=8"],
                      container={"image": "/:O", "shm_size": "256m", "user": "0:0"})
    sp = SupervisorProc(write_config(base, job)).start()
    try:
        j = wait_for(lambda: (x := sp.job(name))["state"] == "running" and x["spare"].get("state") == "ready" and x,
                     180, what="alice's container training, with a ready spare container")
        trainer, spare = j["pid"], j["spare"]["pid"]
        for pid in (trainer, spare):
            ids = proc_ids(pid)
            assert ids["Uid"] == [alice.pw_uid] * 4 and ids["Gid"] == [alice.pw_gid] * 4, ids
        users_of = subprocess.run(["podman", "ps", "--filter", f"label=isaacd.job={name}", "--format", "{{.Names}}"],
                                  capture_output=True, text=True).stdout.split()
        for c in users_of:
            user = subprocess.run(["podman", "inspect", "-f", "{{.Config.User}}", c], capture_output=True,
                                  text=True).stdout.strip()
            assert user == f"{alice.pw_uid}:{alice.pw_gid}", (c, user)
        assert len(users_of) == 2  # the attempt's and the spare's
        os.kill(trainer, signal.SIGKILL)
        j = wait_for(lambda: (x := sp.job(name))["pid"] not in (None, trainer) and x["state"] == "running" and x,
                     60, what="the spare container's takeover")
        assert j["pid"] == spare and proc_ids(spare)["Uid"] == [alice.pw_uid] * 4
        assert [e for e in sp.events(name) if e["event"] == "started"][-1]["warm_spare"] is True
        ckpts = list((a_area / "logs").rglob("model_*.pt"))
        assert ckpts and all(owned_by(p, alice) for p in ckpts)  # written by the container as alice
    finally:
        sp.stop()
