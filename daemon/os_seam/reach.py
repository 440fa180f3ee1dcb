"""Whether a user can run or read a file on this host, without becoming that user (issue 37).

A shared server's install must be usable by its users: their `isaacd` client, and the Python, launcher shim and
launcher their jobs' trainers run as them. A venv made from a Python under /root (pyenv, conda) fails them with
"bad interpreter: Permission denied", because /root is 0700. `isaacd doctor` and `isaacd install-units` find that
before a user does.

`walk` resolves a path as the kernel does, one component at a time, following every symlink (a venv's
bin/python -> /usr/bin/python3 -> python3.11): the directories looked up in (each needs search permission) and the
file it ends at, as `Entry`s of what lstat saw. `needs` adds what running a program takes: a script's interpreter
(its `#!` line, `env NAME` found on PATH), and that interpreter's, up to the real binary. `blocked` is the verdict
for one user, pure over those entries: the first directory they cannot search, or the file they cannot read or
execute. Mode bits only: a path with a POSIX ACL is not judged (never reported), capabilities are not read.
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass

MAX_LINKS = 40  # the kernel's MAXSYMLINKS
MAX_INTERPRETERS = 4  # the kernel follows a script's interpreter this deep (binfmt_script)
SEARCH = EXECUTE = 0o1
READ = 0o4


@dataclass(frozen=True)
class Entry:
    """One path as lstat saw it (a directory on the way, or the file at the end)."""

    path: str
    mode: int
    uid: int
    gid: int
    acl: bool = False  # a POSIX ACL may grant what the mode bits do not: not judged


@dataclass(frozen=True)
class Walk:
    """A path resolved: the directories searched on the way (link targets' too), the file it ends at."""

    path: str  # as asked
    searched: tuple[Entry, ...]
    target: Entry | None  # None: missing
    real: str  # the resolved path (as far as it got)


@dataclass(frozen=True)
class Need:
    """A file a program needs `want` (READ and/or EXECUTE) on; `why` says what it is to the program."""

    walk: Walk
    want: int
    why: str = ""


@dataclass(frozen=True)
class Who:
    name: str
    uid: int
    gids: tuple[int, ...]


@dataclass(frozen=True)
class Blocked:
    """Why a user cannot use a file: `at` (a directory on the way, or the file) has `mode`."""

    at: str
    mode: int
    verb: str  # reach | read | execute | find
    target: str
    why: str = ""

    def line(self, who: str) -> str:
        what = f" ({self.why})" if self.why else ""
        if self.verb == "find":
            return f"{self.target} does not exist{what}"
        if self.at == self.target:
            return f"{self.target}{what} is {self.mode:04o}: {who} cannot {self.verb} it"
        return f"{self.at} is {self.mode:04o}: {who} cannot reach {self.target}{what}"


def _entry(path: str) -> Entry:
    st = os.lstat(path)
    try:
        acl = "system.posix_acl_access" in os.listxattr(path, follow_symlinks=False)
    except OSError:
        acl = False
    return Entry(path, st.st_mode, st.st_uid, st.st_gid, acl)


def walk(path: str) -> Walk:
    """Resolve `path` (absolute, or from the cwd) component by component, following symlinks."""
    todo = [p for p in os.path.abspath(path).split("/") if p][::-1]  # a stack: the next component last
    cur, searched, links = "/", {}, 0
    while todo:
        name = todo.pop()
        if name == ".":
            continue
        if name == "..":
            cur = os.path.dirname(cur)
            continue
        searched.setdefault(cur, _entry(cur))
        nxt = os.path.join(cur, name)
        try:
            st = os.lstat(nxt)
        except OSError:
            return Walk(path, tuple(searched.values()), None, os.path.join(nxt, *todo[::-1]))
        if stat.S_ISLNK(st.st_mode):
            links += 1
            target = os.readlink(nxt)
            if links > MAX_LINKS:
                return Walk(path, tuple(searched.values()), None, nxt)
            if target.startswith("/"):
                cur = "/"
            todo += [p for p in target.split("/") if p][::-1]
        else:
            cur = nxt
    return Walk(path, tuple(searched.values()), _entry(cur), cur)


def shebang(path: str) -> list[str]:
    """A script's `#!` line as words (`[]`: not a script, or unreadable)."""
    try:
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError:
        return []
    if not head.startswith(b"#!"):
        return []
    return head[2:].split(b"\n", 1)[0].decode(errors="replace").split()


def program(name: str, path_var: str | None = None) -> str:
    """A command's file: a path as it is, a bare name found on PATH (as exec does), else the name unchanged."""
    if "/" in name:
        return name
    return shutil.which(name, path=path_var if path_var is not None else os.environ.get("PATH", os.defpath)) or name


def needs(argv0: str, why: str = "", path_var: str | None = None) -> list[Need]:
    """What executing `argv0` takes: the file executable; a script also readable, and its interpreter's needs."""
    out: list[Need] = []
    exe = program(argv0, path_var)
    for _ in range(MAX_INTERPRETERS + 1):
        w = walk(exe)
        words = shebang(w.real) if w.target is not None and stat.S_ISREG(w.target.mode) else []
        out.append(Need(w, EXECUTE | (READ if words else 0), why))
        if not words:
            break
        interp, args = words[0], words[1:]
        if os.path.basename(interp) == "env":  # `#!/usr/bin/env python3`: env, then the name on PATH
            out.append(Need(walk(interp), EXECUTE, f"the interpreter of {exe}"))
            names = [a for a in args if not a.startswith("-") and "=" not in a]
            if not names:
                break
            interp = program(names[0], path_var)
        why, exe = f"the interpreter of {exe}", interp
    return out


def allowed(e: Entry, who: Who, want: int) -> bool:
    """`who` may do `want` (SEARCH/EXECUTE, READ) on `e` by its mode bits (root: anything but executing a file no one
    may execute)."""
    if e.acl:
        return True
    if who.uid == 0:
        return want & EXECUTE == 0 or stat.S_ISDIR(e.mode) or bool(e.mode & 0o111)
    if who.uid == e.uid:
        bits = (e.mode >> 6) & 7
    elif e.gid in who.gids:
        bits = (e.mode >> 3) & 7
    else:
        bits = e.mode & 7
    return bits & want == want


def blocked(need: Need, who: Who) -> Blocked | None:
    """The first thing that stops `who` from using the file as `need` wants, or None."""
    w = need.walk
    for d in w.searched:
        if not allowed(d, who, SEARCH):
            return Blocked(d.path, stat.S_IMODE(d.mode), "reach", w.real, need.why)
    if w.target is None:
        return Blocked(w.real, 0, "find", w.real, need.why)
    for bit, verb in ((READ, "read"), (EXECUTE, "execute")):
        if need.want & bit and not allowed(w.target, who, bit):
            return Blocked(w.real, stat.S_IMODE(w.target.mode), verb, w.real, need.why)
    return None


OTHERS = Who("other users", -1, ())  # uid -1 owns nothing and is in no group: the mode's last three bits
