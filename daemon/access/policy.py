"""Who may do what on the control socket (issue 32, docs/security.md): the caller the kernel names, and what it may do
to whose job. Pure: the control server (control.py) reads the peer's uid (SO_PEERCRED) and asks here.

- root, the supervisor's own user and members of `[supervisor] admin_group` (admins): everything;
- everyone else who can connect (members of `socket_group`): submit (the job is theirs); stop, start, restart,
  reset, cancel, backup-takeover and logs of their own jobs; status, queue, events and evals of every job with
  `[access] status = "all"`, of their own only with "own"; reload, cordon and uncordon are for admins.

A refusal is one line that says whose job it is and who may act on it. stdlib only: clients import control.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..config.users import UnknownUser, User, is_admin, user_by_uid

# what a command does to a job, for the refusal ("not stopped: ...") and who may do it
JOB_ACTIONS: dict[str, tuple[str, str]] = {  # command -> (past participle, "may ... it")
    "stop": ("stopped", "stop it"),
    "start": ("started", "start it"),
    "restart": ("restarted", "restart it"),
    "reset": ("reset", "reset it"),
    "cancel": ("cancelled", "cancel it"),
    "backup-takeover": ("taken over", "take its backup over"),
    "logs": ("shown", "read its logs"),
}
READS = frozenset({"status", "events", "evals", "nodes", "ping"})  # what reading the published state needs
ADMIN_ONLY: dict[str, tuple[str, str]] = {
    "reload": ("reloaded", "reload the config"),
    "cordon": ("cordoned", "cordon a node"),
    "uncordon": ("uncordoned", "uncordon a node"),
}
StatusScope = Literal["all", "own"]


@dataclass(frozen=True)
class Caller:
    """Who is on the other end of a control connection: the kernel's uid, resolved on this host."""

    uid: int
    name: str  # the user's name; "uid N" for a uid with no passwd entry
    admin: bool
    user: User | None = None  # None: a uid this host does not know (it may read, never own a job)

    def describe(self) -> str:
        return f"{self.name} (uid {self.uid})"


def caller_for(uid: int, admin_group: str | None, supervisor_uid: int, admin_gid: int | None = None) -> Caller:
    """The caller for a peer uid. The supervisor's own user is an admin too: a supervisor a user runs for
    themselves (`isaacd run` without root) is theirs to command. `admin_gid`: a group whose members are admins
    without being named (the socket's group of a `socket_mode = "0660"` set before `socket_group` existed)."""
    try:
        user = user_by_uid(uid)
    except UnknownUser:
        return Caller(uid, f"uid {uid}", uid in (0, supervisor_uid))
    admin = uid == supervisor_uid or is_admin(user, admin_group) or (admin_gid is not None and admin_gid in user.gids)
    return Caller(uid, user.name, admin, user)


def owner_name(owner: str | None, supervisor_user: str) -> str:
    """A job's owner by name: a job without `owner` is the supervisor's user's (root's, as a service)."""
    return owner if owner is not None else supervisor_user


def owns(caller: Caller, owner: str | None, supervisor_user: str) -> bool:
    return caller.user is not None and caller.name == owner_name(owner, supervisor_user)


def who_may(owner: str, admin_group: str | None) -> str:
    admins = f"an admin (group {admin_group})" if admin_group else "root"
    return f"only {owner} or {admins}" if owner != "root" else f"only {admins}"


def job_refusal(caller: Caller, command: str, job: str, owner: str | None, supervisor_user: str,
                admin_group: str | None) -> str | None:
    """None when `caller` may do `command` to `job`, else the one line that says why not."""
    if caller.admin or owns(caller, owner, supervisor_user):
        return None
    done, act = JOB_ACTIONS[command]
    whose = owner_name(owner, supervisor_user)
    return f"not {done}: {job} is {whose}'s job; {who_may(whose, admin_group)} may {act}"


def admin_refusal(caller: Caller, command: str, admin_group: str | None) -> str | None:
    """reload, cordon, uncordon: None for an admin, else the one line."""
    if caller.admin:
        return None
    done, act = ADMIN_ONLY[command]
    admins = f"root or a member of group {admin_group}" if admin_group else "root"
    return f"not {done}: only an admin ({admins}) may {act}; you are {caller.describe()}"


def may_see(caller: Caller, owner: str | None, supervisor_user: str, scope: StatusScope) -> bool:
    """Whether a job's status row, queue entry and events are shown to `caller` (`[access] status`)."""
    return scope == "all" or caller.admin or owns(caller, owner, supervisor_user)


def read_refusal(caller: Caller, job: str, owner: str | None, supervisor_user: str, scope: StatusScope,
                 admin_group: str | None) -> str | None:
    """`isaacd events JOB` of a job the caller may not see (status = "own")."""
    if may_see(caller, owner, supervisor_user, scope):
        return None
    whose = owner_name(owner, supervisor_user)
    return (f'not shown: {job} is {whose}\'s job; with [access] status = "own" {who_may(whose, admin_group)} '
            "may read its events")


def sees_secrets(caller: Caller, owner: str | None, supervisor_user: str) -> bool:
    """A job's environment values (and what quotes them) are its owner's and the admins' to read."""
    return caller.admin or owns(caller, owner, supervisor_user)


def submit_refusal(caller: Caller, named_owner: object, admin_group: str | None) -> str | None:
    """A job file's `owner =`: a user who is no admin submits only for themselves."""
    if caller.user is None:
        return f"{caller.describe()} is no user on this host (getent passwd {caller.uid}); a job needs an owner"
    if caller.admin or named_owner is None or named_owner == caller.name:
        return None
    admins = f"root or a member of group {admin_group}" if admin_group else "root"
    return (f"jobs[0].owner: only an admin ({admins}) may submit a job for another user, and you are "
            f"{caller.describe()}; remove owner (the job is then {caller.name}'s)")
