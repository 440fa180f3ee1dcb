"""Issue 37: can the people who use a shared server's install run it? `os_seam/reach.py`'s verdict over stat data (pure,
fake entries), its walk over a real tree (symlinks, `#!` lines), and `isaacd doctor`'s install check for a real user
made here, held against what the kernel does when that user runs the same files."""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from isaacd.cli import doctor_install
from isaacd.config.schema import parse_config
from isaacd.os_seam.reach import EXECUTE, OTHERS, READ, Entry, Need, Walk, Who, blocked, needs, walk
from isaacd.service.units import closed_to_others

DIR, FILE = stat.S_IFDIR, stat.S_IFREG
ALICE = Who("alice", 1001, (1001, 2000))


def entry(path: str, mode: int, uid: int = 0, gid: int = 0, acl: bool = False) -> Entry:
    return Entry(path, mode, uid, gid, acl)


def pyenv_walk(root_mode: int = 0o700) -> Walk:
    """A venv's python resolved to pyenv's interpreter under /root, as walk() sees it."""
    dirs = ["/", "/work", "/work/main", "/work/main/.venv", "/work/main/.venv/bin", "/root", "/root/.pyenv",
            "/root/.pyenv/versions", "/root/.pyenv/versions/3.11.7", "/root/.pyenv/versions/3.11.7/bin"]
    searched = tuple(entry(d, DIR | (root_mode if d == "/root" else 0o755)) for d in dirs)
    real = "/root/.pyenv/versions/3.11.7/bin/python3.11"
    return Walk("/work/main/.venv/bin/python", searched, entry(real, FILE | 0o755), real)


def test_a_python_under_a_0700_root_is_out_of_reach_naming_the_directory_the_user_and_the_interpreter():
    need = Need(pyenv_walk(), EXECUTE, "the interpreter of /work/main/.venv/bin/isaacd")
    b = blocked(need, ALICE)
    assert b is not None and b.line("alice") == ("/root is 0700: alice cannot reach "
                                                 "/root/.pyenv/versions/3.11.7/bin/python3.11 "
                                                 "(the interpreter of /work/main/.venv/bin/isaacd)")
    assert blocked(need, Who("root", 0, (0,))) is None
    assert blocked(Need(pyenv_walk(0o711), EXECUTE), ALICE) is None  # search without listing is enough


@pytest.mark.parametrize("mode, uid, gid, want, verb", [
    (0o750, 5, 2000, EXECUTE, None),  # through her group
    (0o750, 5, 3000, EXECUTE, "execute"),  # not her group, nothing for others
    (0o075, 1001, 5, EXECUTE, "execute"),  # her own, but the owner's bits say no (the kernel looks no further)
    (0o644, 5, 5, EXECUTE, "execute"),
    (0o644, 5, 5, READ, None),
    (0o711, 5, 5, READ | EXECUTE, "read"),  # a script must be readable too
    (0o700, 5, 5, EXECUTE, None),  # with a POSIX ACL: not judged from the bits
])
def test_the_file_itself_by_owner_group_and_others_bits(mode, uid, gid, want, verb):
    f = entry("/opt/x/bin/python", FILE | mode, uid, gid, acl=(mode == 0o700))
    w = Walk(f.path, (entry("/", DIR | 0o755), entry("/opt", DIR | 0o755), entry("/opt/x", DIR | 0o755),
                      entry("/opt/x/bin", DIR | 0o755)), f, f.path)
    b = blocked(Need(w, want), ALICE)
    assert (b.line("alice") if b else None) == (verb and f"/opt/x/bin/python is {mode:04o}: alice cannot {verb} it")


def test_root_cannot_execute_a_file_no_one_may_execute_and_a_missing_file_is_named():
    f = entry("/opt/x/run", FILE | 0o644)
    assert blocked(Need(Walk(f.path, (), f, f.path), EXECUTE), Who("root", 0, (0,))) is not None
    missing = blocked(Need(Walk("/opt/nope", (entry("/", DIR | 0o755),), None, "/opt/nope"), EXECUTE, "the client"),
                      OTHERS)
    assert missing is not None and missing.line("other users") == "/opt/nope does not exist (the client)"


@pytest.fixture
def tree():
    d = Path(tempfile.mkdtemp(prefix="isaacd-i37-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_walk_follows_a_venvs_symlinks_into_the_closed_directory_and_needs_follows_the_script_to_it(tree):
    """venv/bin/isaacd (#!venv/bin/python) -> python -> ../../home/py/bin/python3 -> python3.11, /home closed."""
    home = tree / "home"
    (home / "py" / "bin").mkdir(parents=True)
    real = home / "py" / "bin" / "python3.11"
    shutil.copy(sys.executable, real)
    (home / "py" / "bin" / "python3").symlink_to("python3.11")
    home.chmod(0o700)
    (tree / "venv" / "bin").mkdir(parents=True)
    (tree / "venv" / "bin" / "python").symlink_to("../../home/py/bin/python3")
    script = tree / "venv" / "bin" / "isaacd"
    script.write_text(f"#!{tree}/venv/bin/python\nprint('hi')\n")
    script.chmod(0o755)
    w = walk(str(tree / "venv" / "bin" / "python"))
    assert w.real == str(real) and w.target is not None and stat.S_ISREG(w.target.mode)
    assert [e.path for e in w.searched][-3:] == [str(home), str(home / "py"), str(home / "py" / "bin")]
    chain = needs(str(script), "the client")
    assert [n.walk.real for n in chain] == [str(script), str(real)] and chain[0].want == READ | EXECUTE
    b = blocked(chain[1], OTHERS)
    assert b is not None and b.line("other users") == f"{home} is 0700: other users cannot reach {real} " \
                                                       f"(the interpreter of {script})"
    # `isaacd install-units` warns in one line when the isaacd it writes into the unit is closed to other users
    assert closed_to_others(str(script)) == f"{home} is 0700: other users cannot reach {real} (the interpreter of " \
                                            f"{script})"
    env_script = tree / "venv" / "bin" / "tool"
    env_script.write_text("#!/usr/bin/env -S python3 -u\n")
    names = [n.walk.real for n in needs(str(env_script), path_var=str(home / "py" / "bin"))]
    assert names[0] == str(env_script) and names[-1] == str(real)  # env, then python3 on that PATH


# ---- doctor's install check, for a real user, against the kernel ---------------------------------------------------
@pytest.fixture(scope="module")
def member():
    """A real user in a group of their own (the socket group); removed after."""
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("needs root and useradd: the check is held against a real user running the files")
    tag = uuid.uuid4().hex[:6]
    group, name = f"i37g{tag}", f"i37a{tag}"
    subprocess.run(["groupadd", group], check=True, capture_output=True)
    try:
        subprocess.run(["useradd", "-m", "-s", "/usr/sbin/nologin", "-G", group, name], check=True,
                       capture_output=True)
        yield pwd.getpwnam(name), group
    finally:
        subprocess.run(["userdel", "-r", name], capture_output=True)
        subprocess.run(["groupdel", group], capture_output=True)


def runs_as(who: pwd.struct_passwd, argv: list[str]) -> bool:
    try:
        res = subprocess.run(argv, user=who.pw_uid, group=who.pw_gid,
                             extra_groups=os.getgrouplist(who.pw_name, who.pw_gid), cwd="/", capture_output=True,
                             env={"PATH": "/usr/bin:/bin", "HOME": who.pw_dir}, timeout=120)
    except PermissionError:  # exec(2) itself refused: the file or a directory on its way
        return False
    return res.returncode == 0


def test_doctor_says_what_the_kernel_does_for_a_real_user(member, tree):
    who, group = member
    launcher = tree / "closed" / "train.sh"
    launcher.parent.mkdir()
    launcher.write_text("#!/bin/sh\nexit 0\n")
    launcher.chmod(0o755)
    launcher.parent.chmod(0o700)
    cfg = parse_config(f'[supervisor]\nstate_dir = "{tree}/state"\nsocket_group = "{group}"\n[gpu]\nsource = "none"\n'
                       f'[[jobs]]\nname = "j"\nowner = "{who.pw_name}"\ncommand = ["{launcher}"]\n'
                       f'log_root = "{tree}/logs"\n', "test", tree)
    checks = doctor_install.check_install(cfg)
    job = [c for c in checks if c.name == "install:j"]
    assert [(c.status, c.detail) for c in job] == [
        ("fail", f"{tree}/closed is 0700: {who.pw_name} cannot reach {launcher} (the launcher of job j)")]
    assert not runs_as(who, [str(launcher)])  # as the kernel says
    launcher.parent.chmod(0o755)
    job = [c for c in doctor_install.check_install(cfg) if c.name == "install:j"]
    assert [c.status for c in job] == ["pass"] and runs_as(who, [str(launcher)])

    # the client of this very install: the check's verdict for the socket group's member is what running it does
    client = [c for c in checks if c.name == "install:client"]
    assert grp.getgrnam(group).gr_mem == [who.pw_name] and len(client) >= 1
    kernel = runs_as(who, [doctor_install.client_path(), "--help"])
    assert (client[0].status == "pass") is kernel, (client, kernel)
    if not kernel:
        assert all(c.status == "fail" and who.pw_name in c.detail and "install.sh --system" in c.fix for c in client)
