"""Issue 32, who may do what on the control socket, through a real `isaacd run` (root) and its real socket, with real
Unix users made here (useradd/groupadd; removed afterwards; unique names so parallel workers never collide).

Each client is a process of its own, run as that user (uid, gid and groups set by the kernel before exec): the
system's Python 3.11 running the isaacd client from the source tree with the venv's packages (the venv's
interpreter lies under root's home, which other users cannot enter). The users:
- alice and bob, members of the socket group; dana, of the admin group too; carol, of neither.
The jobs are `command = ["sleep", ...]` trainers (a shell that prints a secret for one): what is under test is the
socket, not training, and a sleeping job costs nothing on a 2-core host. Jobs run as root until the run-as-owner
work lands (tests/test_run_as_owner.py tests that); a plain command runs as either.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import textwrap
import uuid
from pathlib import Path

import pytest

import helpers
from helpers import BIN, SupervisorProc, write_config, wait_for

PY3 = Path("/usr/bin/python3")
ROOT = Path(__file__).resolve().parents[1]
SITE = Path(BIN).parent / "lib" / "python3.11" / "site-packages"  # pydantic for `isaacd logs`, which reads the config
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                       reason="needs root and useradd: the test makes real Unix users and connects as each of them"),
    pytest.mark.skipif(not PY3.exists(), reason="needs /usr/bin/python3 (3.11) to run the client as other users"),
]
CLIENT = "import sys; from isaacd.cli.main import main; sys.exit(main(sys.argv[1:]))"
QUIET = "".join(f"\n[jobs.watchdogs.{w}]\nenabled = false\n" for w in (
    "no_progress", "duty_cycle", "loss_stagnation", "reward_plateau", "divergence", "gpu_temperature", "xid"))
FORGE = textwrap.dedent("""
    import sys
    from isaacd.control import request
    sock, job, uid, user = sys.argv[1:]
    for req in ({"cmd": "reload", "uid": 0, "user": "root"},
                {"cmd": "stop", "job": job, "uid": int(uid), "user": user}):
        try:
            print(request(sock, req))
        except RuntimeError as exc:
            print("refused:", exc)
""")
FLOOD = textwrap.dedent("""
    import json, sys, threading
    from isaacd.control import request
    sock, home = sys.argv[1], sys.argv[2]
    out = []
    def one(i):
        name = f"flood{i % 12}"  # 12 names: the rest are refused as already submitted
        text = (f'[[jobs]]\\nname = "{name}"\\nautostart = false\\ncommand = ["sh", "-c", "sleep 1000"]\\n'
                f'log_root = "{home}/flood"\\nspare = false\\n')
        try:
            request(sock, {"cmd": "submit", "text": text, "source": f"{home}/{name}.toml"}, timeout=60)
            out.append("ok")
        except RuntimeError as exc:
            out.append("busy" if "busy" in str(exc) else "refused: " + str(exc)[:150])
        except Exception as exc:
            out.append(f"{type(exc).__name__}: {exc}")
    threads = [threading.Thread(target=one, args=(i,)) for i in range(48)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def users():
    tag = uuid.uuid4().hex[:6]
    groups = {"socket": f"i32s{tag}", "admin": f"i32z{tag}"}
    names = {"alice": f"i32a{tag}", "bob": f"i32b{tag}", "carol": f"i32c{tag}", "dana": f"i32d{tag}"}
    member = {"alice": [groups["socket"]], "bob": [groups["socket"]], "carol": [],
              "dana": [groups["socket"], groups["admin"]]}
    with helpers.unix_users(groups, names, member) as made:
        yield made


@pytest.fixture
def base():
    """A directory every user may traverse (pytest's tmp_path lies under a root-only /tmp/pytest-of-root), with the
    isaacd source reachable as a package for the users' clients."""
    d = Path(tempfile.mkdtemp(prefix="isaacd-i32-", dir="/tmp"))
    d.chmod(0o755)
    (d / "py").mkdir(mode=0o755)
    (d / "py" / "isaacd").symlink_to(ROOT / "daemon")
    (d / "py" / "isaacd_trainer").symlink_to(ROOT / "trainer")
    yield d
    shutil.rmtree(d, ignore_errors=True)


class As:
    """`isaacd ...` as one user: a process of theirs, talking to the supervisor's socket."""

    def __init__(self, who: pwd.struct_passwd, base: Path):
        self.who, self.base = who, base
        self.config, self.socket = base / "isaacd.toml", base / "run" / "isaacd.sock"

    def run(self, argv: list[str], timeout: float = 90) -> subprocess.CompletedProcess[str]:
        w = self.who
        return subprocess.run(argv, user=w.pw_uid, group=w.pw_gid, extra_groups=os.getgrouplist(w.pw_name, w.pw_gid),
                              env={"PYTHONPATH": f"{self.base / 'py'}:{SITE}", "HOME": w.pw_dir, "USER": w.pw_name,
                                   "PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"},
                              cwd=w.pw_dir, capture_output=True, text=True, timeout=timeout)

    def isaacd(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run([str(PY3), "-c", CLIENT, "--config", str(self.config), "--socket", str(self.socket), *args])

    def ok(self, *args: str) -> str:
        res = self.isaacd(*args)
        assert res.returncode == 0, f"{self.who.pw_name}: isaacd {' '.join(args)} -> {res.returncode}: {res.stderr}"
        return res.stdout

    def refused(self, *args: str) -> str:
        """The one line a refusal prints (exit 1), without the "isaacd: " prefix."""
        res = self.isaacd(*args)
        assert res.returncode != 0, f"{self.who.pw_name}: isaacd {' '.join(args)} was not refused: {res.stdout}"
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
        return lines[0].removeprefix("isaacd: ")

    def python(self, code: str, *args: str) -> str:
        res = self.run([str(PY3), "-c", code, *args], timeout=180)
        assert res.returncode == 0, res.stderr
        return res.stdout

    def job_file(self, name: str, **over: object) -> Path:
        """A job file in the user's home: a sleeping command, its log_root in their home ([access] areas)."""
        fields = {"command": ["sh", "-c", "sleep 1000"], "log_root": f"{self.who.pw_dir}/logs-{name}", "spare": False,
                  "stop_timeout": 5.0, **over}
        body = "\n".join(f"{k} = {json.dumps(v)}" for k, v in fields.items() if not isinstance(v, dict))
        tables = "".join(f"\n[jobs.{k}]\n" + "\n".join(f"{kk} = {json.dumps(vv)}" for kk, vv in v.items())
                         for k, v in fields.items() if isinstance(v, dict))
        path = Path(self.who.pw_dir) / f"{name.replace('/', '_')}.toml"
        path.write_text(f'[[jobs]]\nname = "{name}"\n{body}\n{tables}\n{QUIET}')
        os.chown(path, self.who.pw_uid, self.who.pw_gid)
        return path


def host_config(base: Path, users: dict) -> Path:
    cfg = write_config(base, '\n[[jobs]]\nname = "sys"\ncommand = ["sh", "-c", "sleep 1000"]\nlog_root = "logs"\n'
                             'spare = false\nstop_timeout = 5.0\n' + QUIET)
    cfg.write_text(cfg.read_text().replace(
        '[supervisor]\n', f'[supervisor]\njobs_dir = "jobs.d"\nsocket_group = "{users["socket"]}"\n'
                          f'admin_group = "{users["admin"]}"\n').replace('control_socket = "isaacd.sock"',
                                                                         'control_socket = "run/isaacd.sock"'))
    cfg.chmod(0o644)
    return cfg


def test_who_may_do_what_through_the_real_socket(users, base):
    alice, bob, carol, dana = (As(users[n], base) for n in ("alice", "bob", "carol", "dana"))
    a = users["alice"].pw_name
    sp = SupervisorProc(host_config(base, users))
    sp.socket = base / "run" / "isaacd.sock"
    sp.start()
    try:
        _the_socket_is_the_groups(sp, users, carol)
        token = f"tok-{uuid.uuid4().hex}"
        job = f"{a}-g1"
        out = alice.ok("submit", str(alice.job_file(job, environment={"API_TOKEN": token},
                                                    command=["sh", "-c", "echo token is $API_TOKEN; sleep 1000",
                                                             token])))  # also in argv: the `started` event has it
        assert "submitted as" in out
        f = base / "jobs.d" / f"{job}.toml"
        assert (f.stat().st_uid, stat.S_IMODE(f.stat().st_mode)) == (users["alice"].pw_uid, 0o600)
        row = wait_for(lambda: (x := sp.job(job))["pid"] and token in json.dumps(x) and x, 30, what="alice's job up")
        assert row["owner"] == a

        # alice acts on her own job; each command is in its events with her name and uid
        alice.ok("restart", job)
        pid = wait_for(lambda: (x := sp.job(job))["pid"] not in (None, row["pid"]) and x["pid"], 30, what="restart")
        mine = [e for e in sp.events(job) if e["event"] == "operator_command"]
        assert [(e["command"], e["user"], e["uid"]) for e in mine] == [
            ("submit", a, users["alice"].pw_uid), ("restart", a, users["alice"].pw_uid)]
        assert token in alice.ok("logs", job)  # her trainer's output, read for her by the supervisor

        # bob against alice's job: each refused in one line naming her and who may act; her job goes on
        admins = f"an admin (group {users['admin']})"
        for cmd, done, act in (("stop", "stopped", "stop it"), ("restart", "restarted", "restart it"),
                               ("cancel", "cancelled", "cancel it"), ("logs", "shown", "read its logs")):
            assert bob.refused(cmd, job) == f"not {done}: {job} is {a}'s job; only {a} or {admins} may {act}"
        assert bob.refused("stop", "sys") == f"not stopped: sys is root's job; only {admins} may stop it"
        assert bob.refused("reload").startswith("not reloaded: only an admin (root or a member of group ")
        theirs = bob.job_file("bobs-for-alice", owner=a)
        assert "jobs[0].owner: only an admin" in bob.refused("submit", str(theirs))
        assert not (base / "jobs.d" / "bobs-for-alice.toml").exists()
        # what a user who is no admin may not ask for (access/limits.py) comes back through the socket, naming the key
        outside = bob.refused("submit", str(bob.job_file("outside", log_root=str(base / "state"))))
        assert outside.startswith("not submitted: ") and "jobs[0].log_root" in outside, outside

        # a forged identity in the request changes nothing: the kernel's uid is the caller
        forged = bob.python(FORGE, str(bob.socket), job, str(users["alice"].pw_uid), a)
        b = users["bob"]
        assert f"refused: not reloaded: only an admin (root or a member of group {users['admin']}) may reload the " \
               f"config; you are {b.pw_name} (uid {b.pw_uid})" in forged
        assert f"refused: not stopped: {job} is {a}'s job" in forged

        # another user's secrets: bob sees alice's job, never her environment; the admin does
        seen_by_bob = json.loads(bob.ok("status", "--json"))
        bobs_row = next(j for j in seen_by_bob["jobs"] if j["name"] == job)
        assert bobs_row["state"] == sp.job(job)["state"] and token not in json.dumps(seen_by_bob)
        assert "<hidden>" in json.dumps(bobs_row)  # where her output quoted it
        bobs_events = bob.ok("events", job, "--json")
        assert token not in bobs_events and "<hidden>" in bobs_events
        assert token in alice.ok("events", job, "--json")
        table = bob.ok("status").splitlines()
        assert table[1].split()[:2] == ["JOB", "OWNER"] and f"{job}  {a}" in "\n".join(table), table
        assert token in dana.ok("status", "--json") and token in alice.ok("status", "--json")

        # a job name with ../ is refused naming the key; nothing is written outside jobs.d
        evil = bob.job_file("../evil")
        assert "name: must be 1-63 chars" in bob.refused("submit", str(evil))
        assert not (base / "evil.toml").exists() and sorted(p.name for p in (base / "jobs.d").iterdir()) == \
            [f"{job}.toml"]

        # a file in jobs.d of bob's naming alice as owner: the reload is refused naming it, nothing running touched
        sneak = base / "jobs.d" / "sneak.toml"
        sneak.write_text(f'[[jobs]]\nname = "sneak"\nowner = "{a}"\ncommand = ["sh", "-c", "sleep 1000"]\n')
        os.chown(sneak, b.pw_uid, b.pw_gid)
        res = dana.isaacd("reload")
        assert res.returncode == 2 and f"{sneak}: jobs[0].owner: only an admin may give a job another owner" \
            in res.stderr, res.stderr
        sneak.unlink()
        assert "sneak" not in [j["name"] for j in sp.status()["jobs"]] and sp.job(job)["pid"] == pid

        _a_flood_of_submits_leaves_the_others_be(sp, bob, alice, job, pid)

        # [access] status = "own" (an admin's reload): bob sees only his jobs, alice's events are not his to read
        sp.config.write_text(sp.config.read_text() + '\n[access]\nstatus = "own"\n')
        assert "reloaded" in dana.ok("reload")
        names = {j["name"] for j in json.loads(bob.ok("status", "--json"))["jobs"]}
        assert names and all(n.startswith("flood") for n in names), names
        assert bob.refused("events", job) == (f'not shown: {job} is {a}\'s job; with [access] status = "own" only '
                                              f"{a} or {admins} may read its events")
        assert {j["name"] for j in json.loads(alice.ok("status", "--json"))["jobs"]} == {job}
        assert sp.job(job)["pid"] == pid and sp.job("sys")["pid"]

        # an admin acts on anyone's job, and is written down as who did
        d = users["dana"]
        assert token in dana.ok("events", job, "--json")
        dana.ok("stop", job)
        wait_for(lambda: sp.job(job)["state"] == "stopped", 30, what="alice's job stopped by the admin")
        assert [(e["command"], e["user"], e["uid"]) for e in sp.events(job) if e["event"] == "operator_command"][-1] \
            == ("stop", d.pw_name, d.pw_uid)

        # issue 37: cancelled, her job has ended; its events and logs stay hers to read (and the admins'), as before
        alice.ok("cancel", job)
        shown = alice.ok("events", job)
        assert shown.startswith(f"{job} has ended: cancelled by {a} at "), shown[:300]
        assert token in alice.ok("events", job, "--json")
        assert bob.refused("events", job) == (f'not shown: {job} is {a}\'s job; with [access] status = "own" only '
                                              f"{a} or {admins} may read its events")
        assert bob.refused("logs", job) == f"not shown: {job} is {a}'s job; only {a} or {admins} may read its logs"
        logs = alice.isaacd("logs", job)  # read for her by the supervisor from the archive (root's state dir)
        assert logs.returncode == 0 and token in logs.stdout and logs.stderr.startswith(f"{job} has ended"), logs
        assert [e["name"] for e in json.loads(alice.ok("history", "--json"))] == [job]
        assert json.loads(bob.ok("history", "--json")) == []  # status = "own": not his to see
    finally:
        sp.stop()


def _the_socket_is_the_groups(sp: SupervisorProc, users: dict, carol: As) -> None:
    import grp

    gid = grp.getgrnam(users["socket"]).gr_gid
    sock, d = sp.socket.stat(), sp.socket.parent.stat()
    assert (stat.S_IMODE(sock.st_mode), sock.st_gid, sock.st_uid) == (0o660, gid, 0)
    assert (stat.S_IMODE(d.st_mode), d.st_gid) == (0o750, gid)
    res = carol.isaacd("status")  # not in the socket group: the kernel refuses the connection
    assert res.returncode == 3 and "permission denied" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def _a_flood_of_submits_leaves_the_others_be(sp: SupervisorProc, bob: As, alice: As, job: str, pid: int) -> None:
    """48 submits at once from one bob process (at most 4 of his connections are served at a time): alice's status
    answers all along, her job and root's keep running."""
    flood = subprocess.Popen(
        [str(PY3), "-c", FLOOD, str(bob.socket), bob.who.pw_dir], user=bob.who.pw_uid, group=bob.who.pw_gid,
        extra_groups=os.getgrouplist(bob.who.pw_name, bob.who.pw_gid), cwd=bob.who.pw_dir,
        env={"PYTHONPATH": f"{bob.base / 'py'}:{SITE}", "PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    answered = 0
    while flood.poll() is None:
        rows = {j["name"]: j for j in json.loads(alice.ok("status", "--json"))["jobs"]}
        assert rows[job]["pid"] == pid
        answered += 1
    out, err = flood.communicate()
    outcomes = json.loads(out.strip().splitlines()[-1]) if out.strip() else err
    assert isinstance(outcomes, list) and len(outcomes) == 48 and "ok" in outcomes, outcomes
    # each either submitted, refused as a second submit of its name, or told the supervisor was busy (not acted on)
    assert all(o in ("ok", "busy") or "is already submitted" in o for o in outcomes), outcomes
    submitted = sorted(n for n in (j["name"] for j in sp.status()["jobs"]) if n.startswith("flood"))
    assert len(submitted) == outcomes.count("ok") and len(set(submitted)) == len(submitted)  # each name once
    assert answered >= 1 and sp.job(job)["pid"] == pid and sp.job("sys")["state"] in ("starting", "running"), \
        sp.events("sys")


def test_a_socket_group_that_does_not_exist_is_one_line_naming_the_key(tmp_path):
    group = f"i32n{uuid.uuid4().hex[:6]}"
    cfg = write_config(tmp_path, "")
    cfg.write_text("jobs = []\n" + cfg.read_text().replace("[supervisor]\n",
                                                            f'[supervisor]\nsocket_group = "{group}"\n'))
    res = subprocess.run([str(BIN / "isaacd"), "run", "--config", str(cfg)], capture_output=True, text=True,
                         timeout=60)
    lines = [ln for ln in res.stderr.splitlines() if not ln.startswith("{")]  # the JSON log lines aside
    assert res.returncode == 2 and lines == [
        f'isaacd: {cfg}: [supervisor] socket_group: no group "{group}" on this host (getent group {group}); create '
        f"it (groupadd {group}) or remove the key"], res.stderr
    assert not (tmp_path / "isaacd.sock").exists()
