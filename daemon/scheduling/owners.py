"""Whose the queue's jobs are and which quotas hold them (issue 32): `[access]` read through the host's user database
for each owner's groups, for the pure scheduler's `Quotas` (quota.py). Looked-up users are kept a minute, so a tick
costs no NSS call and a group membership change is seen within that.

No quota holds an admin's job: a job without `owner` (the supervisor's user's), the supervisor's user's own, root's or
a member's of `[supervisor] admin_group` (as on the control socket, access/policy.py). Such a job counts in no group's
quota either."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ..access.limits import effective_limits
from ..config.access import AccessConfig, Limits
from ..config.sizes import size_bytes
from ..config.users import UnknownUser, User, is_admin, supervisor_user, user_by_name
from .quota import Quota, Quotas

USER_TTL_SECONDS = 60.0


class Owners:
    """The owners' quotas, each tick, from the `[access]` in force."""

    def __init__(self, lookup: Callable[[str], User] = user_by_name, me: str | None = None):
        self.lookup = lookup
        self.me = me if me is not None else supervisor_user()
        self._users: dict[str, tuple[User, float]] = {}

    def user(self, name: str, now: float) -> User:
        kept = self._users.get(name)
        if kept is not None and now - kept[1] < USER_TTL_SECONDS:
            return kept[0]
        try:
            user = self.lookup(name)
        except UnknownUser:  # a name no longer on this host: its own limits still hold, no group's
            user = User(-1, -1, name, "", (), ())
        self._users[name] = (user, now)
        return user

    def quotas(self, owners: Iterable[str | None], access: AccessConfig, admin_group: str | None,
               now: float) -> tuple[Quotas, dict[str, tuple[str, ...]]]:
        """The quotas over these owners, and each owner's groups that have a quota (in `[access] groups` order)."""
        users: dict[str, Quota] = {}
        groups: dict[str, Quota] = {}
        member_of: dict[str, tuple[str, ...]] = {}
        for name in sorted({o for o in owners if o is not None and o != self.me}):
            user = self.user(name, now)
            if is_admin(user, admin_group):
                continue
            mine = quota_of(effective_limits(user, access))
            if mine is not None:
                users[name] = mine
            held = []
            for group, limits in access.groups.items():
                if group in user.groups and (q := quota_of(limits)) is not None:
                    groups[group] = q
                    held.append(group)
            member_of[name] = tuple(held)
        return Quotas(users, groups), member_of


def quota_of(limits: Limits) -> Quota | None:
    if limits.gpus is None and limits.gpu_memory is None and limits.queued is None:
        return None
    return Quota(None if limits.gpus is None else float(limits.gpus),
                 None if limits.gpu_memory is None else size_bytes(limits.gpu_memory), limits.queued)
