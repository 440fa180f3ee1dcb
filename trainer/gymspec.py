"""gymnasium's registry look-up, re-implemented over the built-in tasks: what ``gym.spec(task)`` raises for an id
the registry lacks, word for word, under gymnasium's own exception names.

Isaac Lab's train scripts look the task up before anything else touches it: 2.x ``hydra_task_config``'s wrapper ->
``register_task_to_hydra`` -> ``load_cfg_from_registry`` -> ``gym.spec(task_name)`` (isaac-sim/IsaacLab
source/isaaclab_tasks/isaaclab_tasks/utils/hydra.py @f6e936b3, outside ``hydra.main``, so Hydra does not catch it);
3.0.0 isaaclab_tasks/utils/parse_cfg.py:66 ``gym.spec(task_name.split(":")[-1])``. The exception is not caught:
Python prints the traceback, ending ``gymnasium.error.NameNotFound: Environment `X` doesn't exist. Did you mean:
`Y`?``, and exits 1 (the real 3.0.0 here: exit 1, 4.5 s after the launch; a 2.3.2 user's log shows the same line).

The checks follow gymnasium/envs/registration.py (1.4.0 in .venv-isaaclab3; Isaac Lab 2.3 pins gymnasium 1.2.1, whose
texts are the same): ``ENV_ID_RE`` / ``parse_env_id``, ``spec`` (:993), ``_check_version_exists`` (:371),
``_check_name_exists`` (:349), ``_check_namespace_exists`` (:322). The built-in trainer has no gymnasium; the error
classes carry gymnasium's module and names so the traceback reads as upstream's (and isaacd's exit classifier,
daemon/attempt/config_fault.py, reads them the same way). Stdlib only: ``isaacd check-config`` runs it in the daemon.
"""

from __future__ import annotations

import difflib
import re
from typing import Iterable

# gymnasium/envs/registration.py ENV_ID_RE
ENV_ID_RE = re.compile(r"^(?:(?P<namespace>[\w:-]+)\/)?(?:(?P<name>[\w:.-]+?))(?:-v(?P<version>\d+))?$")


class Error(Exception):
    """gymnasium.error.Error."""


class UnregisteredEnv(Error):
    """gymnasium.error.UnregisteredEnv."""


class NamespaceNotFound(UnregisteredEnv):
    """gymnasium.error.NamespaceNotFound."""


class NameNotFound(UnregisteredEnv):
    """gymnasium.error.NameNotFound."""


class VersionNotFound(UnregisteredEnv):
    """gymnasium.error.VersionNotFound."""


class DeprecatedEnv(Error):
    """gymnasium.error.DeprecatedEnv."""


for _cls in (Error, UnregisteredEnv, NamespaceNotFound, NameNotFound, VersionNotFound, DeprecatedEnv):
    _cls.__module__ = "gymnasium.error"  # the traceback's last line names the class as upstream's does


def parse_env_id(env_id: str) -> tuple[str | None, str, int | None]:
    """registration.py ``parse_env_id``."""
    match = ENV_ID_RE.fullmatch(env_id)
    if not match:
        raise Error(f"Malformed environment ID: {env_id}. (Currently all IDs must be of the form "
                    "[namespace/](env-name)-v(version). (namespace is optional))")
    ns, name, version = match.group("namespace", "name", "version")
    return ns, name, int(version) if version is not None else None


def _env_id(ns: str | None, name: str, version: int | None) -> str:
    """registration.py ``get_env_id``."""
    full = f"{ns}/{name}" if ns is not None else name
    return f"{full}-v{version}" if version is not None else full


def check(env_id: str, registered: Iterable[str]) -> None:
    """``gym.spec(env_id)`` over `registered`: returns when the id is registered, else raises what gymnasium does."""
    ids = list(registered)
    if env_id in ids:
        return
    specs = [parse_env_id(i) for i in ids]
    ns, name, version = parse_env_id(env_id)
    if _env_id(ns, name, version) not in ids:
        _check_name_exists(ns, name, specs)
        if version is not None:
            _check_version(ns, name, version, specs)
    raise Error(f"No registered env with id: {env_id}")


def _check_name_exists(ns: str | None, name: str, specs: list[tuple[str | None, str, int | None]]) -> None:
    if ns is not None:
        namespaces = {s[0] for s in specs if s[0] is not None}
        if ns not in namespaces:
            suggestion = difflib.get_close_matches(ns, namespaces, n=1) if namespaces else None
            msg = (f"Did you mean: `{suggestion[0]}`?" if suggestion
                   else f"Have you installed the proper package for {ns}?")
            raise NamespaceNotFound(f"Namespace {ns} not found. {msg}")
    names = {s[1] for s in specs if s[0] == ns}
    if name in names:
        return
    suggestion = difflib.get_close_matches(name, names, n=1)
    namespace_msg = f" in namespace {ns}" if ns else ""
    suggestion_msg = f" Did you mean: `{suggestion[0]}`?" if suggestion else ""
    raise NameNotFound(f"Environment `{name}` doesn't exist{namespace_msg}.{suggestion_msg}")


def _check_version(ns: str | None, name: str, version: int,
                   specs: list[tuple[str | None, str, int | None]]) -> None:
    """registration.py ``_check_version_exists`` after the name was found."""
    message = f"Environment version `v{version}` for environment `{_env_id(ns, name, None)}` doesn't exist."
    same = sorted((s for s in specs if s[0] == ns and s[1] == name), key=lambda s: int(s[2] or -1))
    default = [s for s in same if s[2] is None]
    if default:
        message += f" It provides the default version `{_env_id(*default[0])}`."
        if len(same) == 1:
            raise DeprecatedEnv(message)
    versioned = [s for s in same if s[2] is not None]
    latest = max(versioned, key=lambda s: s[2], default=None)  # type: ignore[arg-type, return-value]
    if latest is not None and version > latest[2]:
        listed = ", ".join(f"`v{s[2]}`" for s in same)
        raise VersionNotFound(message + f" It provides versioned environments: [ {listed} ].")
    if latest is not None and version < latest[2]:
        raise DeprecatedEnv(f"Environment version v{version} for `{_env_id(ns, name, None)}` is deprecated. "
                            f"Please use `{_env_id(*latest)}` instead.")


def closest(env_id: str, registered: Iterable[str]) -> str | None:
    """The registered id closest to `env_id` (whole ids, versions included: gymnasium's own hint compares names
    without their version, so for `Isaacd-Cartpol-v0` it offers `Isaacd-Cartpole`, itself no registered id)."""
    found = difflib.get_close_matches(env_id, list(registered), n=1, cutoff=0.6)
    return found[0] if found else None
