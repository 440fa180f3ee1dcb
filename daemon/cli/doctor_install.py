"""`isaacd doctor`'s check of the install on a shared server (issue 37): can the people who use it run it?

- the socket group's members (`[supervisor] socket_group`) run this install's `isaacd` client: the script, and the
  Python behind its `#!` line up to the real interpreter, and the isaacd package;
- each process-runtime job's owner (`[[jobs]] owner`, the user its trainer runs as) runs its launcher (the built-in
  trainer's is this install's Python), the launcher shim with its files, and the files its command names.

Each problem is one finding naming the path that stops them, who, and the fix, e.g. "/root is 0700: alice cannot
reach /root/.pyenv/versions/3.11.7/bin/python3.11 (the interpreter of /srv/isaacd/.venv/bin/isaacd)". Judged from
the files' modes (os_seam/reach.py), as root, without switching users.
"""

from __future__ import annotations

import grp
import importlib.util
import os
import pwd
import sys
from pathlib import Path

from ..config.schema import Config, JobConfig
from ..config.users import UnknownUser, User, user_by_name
from ..os_seam.reach import READ, Blocked, Need, Who, blocked, needs, walk
from ..workflows import WorkflowError, resolve
from ..workflows.launcher import shim_mounts
from .checks import Check

SHIM = "isaacd's launcher shim"
SYSTEM_FIX = ("install isaacd where every user can run it: sudo scripts/install.sh --system (a venv under /opt/isaacd "
              "on Debian's /usr/bin/python3, linked as /usr/local/bin/isaacd), then sudo isaacd install-units and "
              "restart the supervisor from it")


def client_path() -> str:
    """This install's `isaacd`, beside its Python: the one `install-units` writes into the unit."""
    return str(Path(sys.executable).with_name("isaacd"))


def package_file(name: str) -> str | None:
    spec = importlib.util.find_spec(name)
    return spec.origin if spec is not None else None


def socket_group_members(group: str) -> list[User]:
    """The group's members: listed in it, or of it as their primary group."""
    try:
        g = grp.getgrnam(group)
    except KeyError:
        return []  # check-config names a missing group
    names = list(g.gr_mem) + [p.pw_name for p in pwd.getpwall() if p.pw_gid == g.gr_gid and p.pw_name not in g.gr_mem]
    out = []
    for n in names:
        try:
            out.append(user_by_name(n))
        except UnknownUser:
            continue
    return out


def who(user: User) -> Who:
    return Who(user.name, user.uid, tuple(user.gids))


def findings(name: str, wants: list[Need], users: list[User], fix: str) -> list[Check]:
    """One failed check per problem, its users named together; [] when nothing stops anyone."""
    problems: dict[Blocked, list[str]] = {}
    for need in wants:
        for u in users:
            b = blocked(need, who(u))
            if b is not None:
                problems.setdefault(b, []).append(u.name)
    return [Check(name, "fail", b.line(", ".join(names)), fix) for b, names in problems.items()]


def client_needs() -> list[Need]:
    out = needs(client_path(), "the isaacd client")
    if (init := package_file("isaacd")) is not None:
        out.append(Need(walk(init), READ, "the isaacd package"))
    return out


def check_client(cfg: Config) -> list[Check]:
    group = cfg.supervisor.socket_group
    if group is None:
        return []  # only isaacd's own user uses the client: nothing to say
    users = [u for u in socket_group_members(group) if not u.root]
    if not users:
        return [Check("install:client", "skip", f"group {group} has no members but root")]
    out = findings("install:client", client_needs(), users, SYSTEM_FIX)
    return out or [Check("install:client", "pass", f"group {group} ({', '.join(u.name for u in users)}) can run "
                                                   f"{client_path()}")]


def job_needs(job: JobConfig) -> tuple[list[Need], bool]:
    """What the job's trainer runs, and whether all of it is isaacd's own install (the built-in trainer's Python)."""
    prog = resolve(job).program(in_container=False)
    argv = prog.argv([])
    ours = job.workflow == "builtin" and not job.command and not job.launcher
    out = needs(argv[0], "the built-in trainer's Python" if ours else f"the launcher of job {job.name}",
                path_var=job.environment.get("PATH"))
    if prog.shim or prog.spare_head:
        out += [Need(walk(host), READ, SHIM) for host, _ in shim_mounts()]
    for arg in argv[1:]:  # a script the command names (python3 /home/alice/train.py)
        if arg.startswith("/") and os.path.isfile(arg) and not any(n.walk.path == arg for n in out):
            out.append(Need(walk(arg), READ, f"named by job {job.name}"))
    return out, ours


def check_jobs(cfg: Config) -> list[Check]:
    out: list[Check] = []
    for job in cfg.jobs:
        if job.runtime != "process" or job.owner is None:
            continue  # a container's own files are the image's; a job without owner runs as isaacd's user
        name = f"install:{job.name}"
        try:
            owner = user_by_name(job.owner)
            wants, ours = job_needs(job)
        except (UnknownUser, WorkflowError):
            continue  # the config and workflow checks say so
        if owner.root or owner.uid == os.geteuid():
            continue
        fix = SYSTEM_FIX if ours else (f"let {owner.name} reach and run it (chmod o+x on the directory, a+rx on the "
                                       f"file), or point the launcher/command of job {job.name} at one they can run")
        shim = [n for n in wants if n.why == SHIM]  # isaacd's own install, whoever's launcher runs it
        found = findings(name, [n for n in wants if n.why != SHIM], [owner], fix) + \
            findings(name, shim, [owner], SYSTEM_FIX)
        out += found or [Check(name, "pass", f"{owner.name} can run {wants[0].walk.real}"
                                             + (" and isaacd's launcher shim" if shim else ""))]
    return out


def check_install(cfg: Config) -> list[Check]:
    """The client for the socket group, each owner's trainer for its owner."""
    return check_client(cfg) + check_jobs(cfg)
