"""Who a uid is on this host (issue 32): names, groups, homes, from the system's user database (pwd, grp: NSS).

The config reads it for a job file's owner; the control socket (access/) for the caller the kernel names."""

from __future__ import annotations

import grp
import os
import pwd
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class User:
    uid: int
    gid: int  # primary group
    name: str
    home: str
    groups: tuple[str, ...]  # every group, the primary one first
    gids: tuple[int, ...]

    @property
    def root(self) -> bool:
        return self.uid == 0


class UnknownUser(LookupError):
    pass


def user_by_uid(uid: int) -> User:
    return _lookup(pwd.getpwuid, uid, f"uid {uid} is no user on this host")


def user_by_name(name: str) -> User:
    return _lookup(pwd.getpwnam, name, f'"{name}" is no user on this host (getent passwd {name})')


def _lookup(find: Callable[[Any], pwd.struct_passwd], key: Any, missing: str) -> User:
    try:
        return _user(find(key))
    except KeyError:
        raise UnknownUser(missing) from None


def _user(pw: pwd.struct_passwd) -> User:
    gids = [pw.pw_gid] + [g for g in os.getgrouplist(pw.pw_name, pw.pw_gid) if g != pw.pw_gid]
    names = []
    for g in gids:
        try:
            names.append(grp.getgrgid(g).gr_name)
        except KeyError:
            names.append(str(g))
    return User(pw.pw_uid, pw.pw_gid, pw.pw_name, pw.pw_dir, tuple(names), tuple(gids))


def supervisor_user() -> str:
    """This process's user name (root, as a service): whose a job without `owner` is."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"


def is_admin(user: User, admin_group: str | None) -> bool:
    """Root, or a member of `[supervisor] admin_group`."""
    return user.root or (admin_group is not None and admin_group in user.groups)
