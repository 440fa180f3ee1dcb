"""[access]: many people on one GPU server (issue 32, docs/security.md). Who may use the control socket is
`[supervisor] socket_group` (the socket's group, mode 0660) and who may do everything is `[supervisor] admin_group`;
this section says what everyone else may ask for and how much of the host they may hold.

A user's limits are `[access.defaults]`, overridden key by key by `[access.groups.<group>]` (each of the user's
groups, in the order the section lists them) and then by `[access.users.<name>]`. Quotas (gpus, gpu_memory, queued)
are counted per user; a group's quota, if set, is counted over all its members together."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .sizes import Size

NAME_RE = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}\$?$")  # a POSIX user or group name (useradd's)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Limits(_Model):
    """What a user (or a group's members) may ask for, and hold. None: no limit of this kind set here."""

    max_priority: int | None = None  # the highest `priority` a job may ask for
    non_preemptible: bool | None = None  # may set `preemptible = false`
    gpus: Annotated[int, Field(ge=0)] | None = None  # quota: GPUs held by running jobs (a whole GPU counts 1, a
    # gpu_memory job its share of the GPU: asked / total)
    gpu_memory: Size | None = None  # quota: GPU memory held by running jobs ("80GiB")
    queued: Annotated[int, Field(ge=0)] | None = None  # quota: jobs waiting in the queue (more are not refused:
    # they wait with that reason, and do not count in anyone's place until below it)

class AccessConfig(_Model):
    # "all": every user reads everyone's status, queue and events (never another's environment or credentials);
    # "own": only their own jobs
    status: Literal["all", "own"] = "all"
    # where a user who is no admin may point log_root, container volumes and PYTHONPATH: "{user}" and "{home}" are
    # theirs (default: their home only)
    areas: list[str] = ["{home}"]
    # unset here as in a written [access.defaults] that leaves them out: effective_limits gives max_priority 0 and
    # non_preemptible false (so a reload that adds `gpus = 1` here changes that key alone: config/reload_diff.py)
    defaults: Limits = Limits()
    groups: dict[str, Limits] = {}
    users: dict[str, Limits] = {}

    @field_validator("groups", "users")
    @classmethod
    def _names(cls, v: dict[str, Any]) -> dict[str, Any]:
        for name in v:
            if not NAME_RE.fullmatch(name):
                raise ValueError(f'"{name}" is not a user or group name (lower-case letters, digits, "_", "-", ".")')
        return v

    @field_validator("areas")
    @classmethod
    def _areas(cls, v: list[str]) -> list[str]:
        for a in v:
            if not (a.startswith("/") or a.startswith("{home}")):
                raise ValueError(f'"{a}" is not an absolute path (e.g. "/data/{{user}}" or "{{home}}")')
        return v
