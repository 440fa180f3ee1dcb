"""Issue 37: the README's three-person setup (an admin, alice, bob) on the shared-server install, Debian's own Python.

`scripts/install.sh --system` (made by scripts/test.sh before pytest, as root: ~45 s the first time, nothing on a
re-run) installs isaacd into $ISAACD_TEST_PREFIX (default /opt/isaacd-test) on /usr/bin/python3, with `isaacd` linked
in its link/ (as /usr/local/bin/isaacd is on a server). Everything here runs from that install, nothing from the
checkout's .venv: the root supervisor, and each person's `isaacd` as a process of theirs (real users made here). On a
scripted 2-GPU host, as the README says:
- the admin reloads the config and sees the queue; `isaacd doctor` finds the install usable by everyone;
- alice submits a built-in trainer job: it runs as her, with the install's Python, shim and trainer, and trains to
  its end (a few iterations), its checkpoints hers;
- bob's `isaacd stop` of her job is refused with the README's words.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

import helpers
from helpers import SupervisorProc, wait_for, write_config

PREFIX = Path(os.environ.get("ISAACD_TEST_PREFIX", "/opt/isaacd-test"))
LINK = PREFIX / "link" / "isaacd"  # what a user types: `isaacd`, on their PATH
pytestmark = [
    pytest.mark.slow,
    pytest.mark.shared_install,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                       reason="needs root and useradd: the test makes real Unix users and runs isaacd as each"),
    pytest.mark.skipif(not LINK.exists(), reason=f"{LINK} missing: scripts/test.sh makes the shared install as root "
                                                 "(scripts/install.sh --system into $ISAACD_TEST_PREFIX)"),
]
README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
QUIET = "".join(f"\n[jobs.watchdogs.{w}]\nenabled = false\n" for w in ("no_progress", "duty_cycle", "divergence"))


@pytest.fixture(scope="module")
def people():
    """admin (socket and admin groups), alice and bob (socket group), as the README's groupadd/usermod lines make
    them; unique names, removed after."""
    tag = uuid.uuid4().hex[:6]
    groups = {"socket_group": f"i37s{tag}", "admin_group": f"i37z{tag}"}
    names = {"admin": f"i37m{tag}", "alice": f"i37a{tag}", "bob": f"i37b{tag}"}
    member = {"admin": [groups["socket_group"], groups["admin_group"]], "alice": [groups["socket_group"]],
              "bob": [groups["socket_group"]]}
    with helpers.unix_users(groups, names, member) as made:
        yield made


@pytest.fixture
def base():
    """A directory every user may traverse (pytest's tmp_path lies under a root-only /tmp/pytest-of-root)."""
    d = Path(tempfile.mkdtemp(prefix="isaacd-i37-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


class Person:
    """`isaacd ...` typed by one user: the installed client, found on their PATH, as a process of theirs."""

    def __init__(self, who: pwd.struct_passwd, config: Path, socket: Path):
        self.who, self.config, self.socket = who, config, socket

    def isaacd(self, *args: str) -> subprocess.CompletedProcess[str]:
        w = self.who
        return subprocess.run(["isaacd", "--config", str(self.config), "--socket", str(self.socket), *args],
                              user=w.pw_uid, group=w.pw_gid, extra_groups=os.getgrouplist(w.pw_name, w.pw_gid),
                              env={"PATH": f"{LINK.parent}:/usr/bin:/bin", "HOME": w.pw_dir, "USER": w.pw_name},
                              cwd=w.pw_dir, capture_output=True, text=True, timeout=90)

    def ok(self, *args: str) -> str:
        res = self.isaacd(*args)
        assert res.returncode == 0, f"{self.who.pw_name}: isaacd {' '.join(args)} -> {res.returncode}: {res.stderr}"
        return res.stdout


def host_config(base: Path, people: dict) -> Path:
    """The README's /etc/isaacd/isaacd.toml: jobs_dir, socket_group, admin_group, [access] areas and a 2-GPU quota."""
    (base / "gpu.json").write_text(json.dumps({"gpus": 2}))
    cfg = write_config(base, "", '\n[access]\nareas = ["' + str(base / "data") + '/{user}"]\n'
                                 '[access.defaults]\ngpus = 2\n')
    cfg.write_text(cfg.read_text().replace(
        '[supervisor]\n', f'[supervisor]\njobs_dir = "jobs.d"\nsocket_group = "{people["socket_group"]}"\n'
                          f'admin_group = "{people["admin_group"]}"\n').replace(
        'control_socket = "isaacd.sock"', 'control_socket = "run/isaacd.sock"').replace(
        '[gpu]\nsource = "none"\n', '[gpu]\nsource = "scripted"\nscript = "gpu.json"\nsample_interval = 0.2\n'))
    cfg.chmod(0o644)
    return cfg


def test_the_readmes_three_people_on_the_shared_install(people, base, monkeypatch):
    assert os.path.realpath(PREFIX / "bin" / "python") == os.path.realpath("/usr/bin/python3")  # Debian's own
    assert "sudo scripts/install.sh --system" in README
    cfg = host_config(base, people)
    monkeypatch.setattr(helpers, "BIN", PREFIX / "bin")  # the root supervisor from the install, as its unit runs it
    sp = SupervisorProc(cfg)
    sp.socket = base / "run" / "isaacd.sock"
    sp.start()
    admin, alice, bob = (Person(people[n], cfg, sp.socket) for n in ("admin", "alice", "bob"))
    a = people["alice"].pw_name
    try:
        assert "reloaded" in admin.ok("reload")
        # alice's area, handed out by the admin as /data/alice; her job file in her home
        area = base / "data" / a
        area.mkdir(parents=True)
        os.chown(area, people["alice"].pw_uid, people["alice"].pw_gid)
        job = Path(people["alice"].pw_dir) / "g1.toml"
        job.write_text(f'[[jobs]]\nname = "g1-flat"\ngpu_memory = "12GiB"\ndevice = "cpu"\nnum_envs = 16\n'
                       f'max_iterations = 4\nsave_interval = 2\nlog_root = "{area}/g1"\nspare = false\n'
                       f'extra_args = ["agent.num_steps_per_env=8"]\n{QUIET}')
        os.chown(job, people["alice"].pw_uid, people["alice"].pw_gid)
        assert "submitted as" in alice.ok("submit", "g1.toml")

        res = bob.isaacd("stop", "g1-flat")  # the README: refused: "not stopped: g1-flat is alice's job; only ..."
        admins = f"an admin (group {people['admin_group']})"
        assert res.returncode != 0 and res.stderr.strip().splitlines() == [
            f"isaacd: not stopped: g1-flat is {a}'s job; only {a} or {admins} may stop it"], res.stderr
        queue = admin.ok("queue")
        assert "g1-flat" in queue, queue

        done = wait_for(lambda: (x := sp.job("g1-flat"))["state"] in ("completed", "failed") and x, 240,
                        what="alice's job trains to its end")
        assert done["state"] == "completed", (done["state_reason"], alice.ok("logs", "g1-flat")[-2000:])
        started = [e for e in sp.events("g1-flat") if e["event"] == "started"]
        python, shim = started[0]["argv"][:2]  # the install's Python (Debian's) and its shim, run by alice
        assert Path(python).parent == PREFIX / "bin"
        assert os.path.realpath(python) == os.path.realpath("/usr/bin/python3")
        assert shim.startswith(str(PREFIX / "lib")) and shim.endswith("/shim.py"), started[0]["argv"]
        ckpts = sorted((area / "g1").rglob("model_*.pt"))
        assert ckpts and all(p.stat().st_uid == people["alice"].pw_uid for p in ckpts)  # written by her trainer
        assert "completed" in alice.ok("status")

        # doctor, run as root from the install: every member may run the client, alice her job's trainer
        res = subprocess.run([str(LINK), "--config", str(cfg), "doctor", "--json"], capture_output=True, text=True,
                             timeout=120)
        checks = {c["name"]: c for c in json.loads(res.stdout)["checks"]}
        assert checks["install:client"]["status"] == "pass", checks["install:client"]
        assert checks["install:g1-flat"]["status"] == "pass", checks["install:g1-flat"]
    finally:
        sp.stop()
    assert stat.S_IMODE(PREFIX.stat().st_mode) == 0o755
    # `sudo isaacd install-units` from the install: its unit runs the install's isaacd, and nothing to warn about
    res = subprocess.run([str(LINK), "install-units", "--prefix", str(base / "root")], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    unit = (base / "root" / "etc/systemd/system/isaaclab-supervisor.service").read_text()
    assert f"\nExecStart={PREFIX}/bin/isaacd run --config /etc/isaacd/isaacd.toml\n" in unit
