"""Control API: JSON over a Unix socket (one request line, one response line).

The socket file is created with the configured mode (default 0600, root only) inside a directory
only its owner can enter; with `[supervisor] socket_group` it is that group's, mode 0660, in a directory of mode
0750 of that group (issue 32). `isaacd status|events|stop|start|restart|reset|reload|nodes|cordon|uncordon` are its
clients. Each connection's user is the kernel's (SO_PEERCRED), never a field of the request; what that user may do
is access/policy.py's, and what they may not read of another's job access/redact.py's (docs/security.md).
The server sees the supervisor through `Controlled` and the ray runtime through `Fleet`, and imports
neither: the clients import this module, and must not pay for pydantic (tests/test_cli.py).
"""

from __future__ import annotations

import grp
import json
import os
import socket
import stat
import struct
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, Sequence, runtime_checkable

from .access.policy import ADMIN_ONLY, Caller, caller_for, job_refusal, admin_refusal, may_see, \
    read_refusal, sees_secrets
from .access.redact import credentials, redact, secret_values
from .config.users import supervisor_user
from .daemon_log import log
from .evals.record import EVALS_DIR, EvalRecord
from .history.ended import EndedJob, ended_events, ended_log, ended_log_source
from .history.log_source import read_log_source
from .status.sweeps import SweepStatus
from .status.types import Status
from .sweeps.toml_string import toml_string
from .wording import no_such_job

MAX_REQUEST_BYTES = 64 * 1024
# Bounds that keep a flood of clients from costing the supervisor more than a few fds and threads:
# supervision (saving history, launching trainers) needs fds too, and must never wait on a client.
MAX_CLIENTS = 16  # connections served at once; more get an immediate "busy" reply and retry
MAX_CLIENTS_PER_USER = 4  # of those, one user (not root) holds at most this many: a flood leaves room for the others
BACKLOG = 256  # the kernel queues this many before connect() says EAGAIN; clients retry that too
REQUEST_DEADLINE = 5.0  # a client has this long to send its request line (a silent client is cut off)
REPLY_DEADLINE = 10.0  # and to take its reply
CLIENT_RETRY_FOR = 5.0  # how long a client keeps retrying a full backlog / busy server


class NotRunning(RuntimeError):
    pass


class RequestError(ValueError):
    """A request the supervisor refuses; the message is shown to the operator as is."""


class _Busy(Exception):
    pass


class Cordoning(Protocol):
    """The nodes a fleet keeps new attempts off, by name, until an operator clears them."""

    def get(self) -> dict[str, dict[str, Any]]:
        """Node name -> why and since when it is cordoned."""

    def add(self, node: str, reason: str, node_id: str | None = None) -> bool:
        """False when it already was."""

    def remove(self, node: str) -> bool:
        """False when it was not cordoned."""


class FleetView(Protocol):
    """What `isaacd nodes` answers (runtimes/ray_fleet.FleetStatus), seen from here without importing the runtime:
    its nodes, and its JSON for the socket."""

    @property
    def nodes(self) -> Sequence[object]: ...

    def to_json(self) -> dict[str, Any]: ...


@runtime_checkable
class Fleet(Protocol):
    """A runtime that places jobs on a cluster of nodes (runtimes/ray.RayRuntime): what the operator may see of
    the nodes and do to them (`isaacd nodes|cordon|uncordon`). Called from the control socket's threads: cached
    data only. Defined here, not beside the Runtime interface: this module stays light for the clients."""

    @property
    def cordons(self) -> Cordoning: ...

    def nodes_status(self) -> FleetView:
        """The nodes as last observed, with their cordons and jobs, and the jobs waiting for room."""

    def refresh_for_operator(self) -> None:
        """Queue a fresh node listing; its answer comes with a later `nodes_status`."""


class Journal(Protocol):
    """Where the operator's commands are written down (history/store.StateStore): the job's event journal."""

    def append_event(self, job: str, event: str, **fields: Any) -> dict[str, Any]: ...


class Controlled(Protocol):
    """What the control socket may do to the supervisor (supervisor.Supervisor is it): read the published
    status and a job's events, hand a job an operator command, reload the config, reach the fleet of nodes.
    Called from the socket's threads: each method takes the supervisor's lock itself where it needs it."""

    # the config in force (config.schema.Config, not imported here: the clients must not pay for pydantic): whose
    # each job is and its environment (access/policy.py, access/redact.py), and [access] status
    config: Any
    store: Journal

    def status(self) -> Status: ...

    def job_names(self) -> Collection[str]: ...

    def events(self, job: str, limit: int | None = None) -> list[dict[str, Any]]: ...

    def command(self, op: str, job: str) -> str: ...

    def reload(self) -> dict[str, Any]: ...

    def submit(self, text: str, source: str, caller: Caller | None = None) -> str:
        """`isaacd submit`: one job file, validated, written into jobs_dir (the caller's file: their job), applied
        as a reload (issue 31)."""

    def cancel(self, job: str) -> str:
        """`isaacd cancel`: a submitted job stopped with a save and removed (its history and logs kept)."""

    def fleet(self) -> Fleet | None:
        """The runtime that places jobs on nodes (ray) when the config has a [ray] section, else None."""

    def ended(self, job: str, nth: int = 1) -> EndedJob | None:
        """The `nth` newest ended job of that name (cancelled, or removed from the config): history/ended.py."""

    def sweep_submit(self, text: str, source: str, caller: Caller | None = None) -> str:
        """`isaacd sweep submit`: a sweep file's trials submitted as jobs in one step (sweeps/submit.py)."""

    def sweep_statuses(self) -> tuple[SweepStatus, ...]:
        """Every sweep as the last tick published it (sweeps/controller.py)."""

    def sweep_cancel(self, name: str) -> str:
        """`isaacd sweep cancel`: the sweep's running trials stopped with a save."""

    def sweep_best(self, name: str) -> str:
        """`isaacd sweep best`: the best trial as a ready job file."""

    def ended_jobs(self, job: str | None = None) -> list[EndedJob]:
        """Every ended job (or those of one name), newest first."""


def _job_field(req: dict[str, Any]) -> str:
    job = req.get("job")
    if not isinstance(job, str) or not job:
        raise RequestError("missing field 'job' (a job name)")
    return job


def _no_such_job(sup: Controlled, job: str) -> RequestError:
    return RequestError(no_such_job(job, sup.job_names()))  # the one wording the client uses too


@dataclass(frozen=True)
class Rules:
    """What the server knows of who may act, fixed for the supervisor's life (`[supervisor]` needs a restart)."""

    admin_group: str | None = None
    supervisor_uid: int = 0
    supervisor_user: str = "root"  # whose a job without `owner` is
    # no socket_group, socket_mode "0660": the socket's group (the supervisor's) could do everything before issue
    # 32, and still may: that setting shares the supervisor, it does not make its members users
    admin_gid: int | None = None


def _rules(admin_group: str | None, shared_with_own_group: bool) -> Rules:
    return Rules(admin_group, os.geteuid(), supervisor_user(), os.getegid() if shared_with_own_group else None)


def _job_cfg(sup: Controlled, job: str) -> Any:
    return sup.config.job(job) if sup.config is not None else None


def _owner(sup: Controlled, job: str) -> str | None:
    """The job's owner: its config in force, else (a removed job still stopping) its last published row."""
    cfg = _job_cfg(sup, job)
    if cfg is not None:
        return cfg.owner
    row = sup.status().job(job)
    return row.owner if row is not None else None


def _hidden(sup: Controlled, caller: Caller, rules: Rules) -> set[str]:
    """What `caller` may not read: the supervisor's credentials (the backup's), and the environment values of every
    job that is not theirs. Nothing for an admin."""
    if caller.admin:
        return set()
    out = credentials(os.environ)
    for cfg in (sup.config.jobs if sup.config is not None else ()):
        if not sees_secrets(caller, cfg.owner, rules.supervisor_user):
            out |= secret_values([*cfg.environment.values(), *cfg.container.environment.values()])
    return out


def _refuse(why: str | None, caller: Caller, cmd: Any, job: str | None = None) -> None:
    if why is not None:
        log.info("control_refused", user=caller.name, uid=caller.uid, command=cmd, job=job)
        raise RequestError(why)


def _audit(sup: Controlled, job: str, cmd: str, caller: Caller) -> None:
    """Every command in the job's events with who gave it (issue 32), written before it acts."""
    sup.store.append_event(job, "operator_command", command=cmd, user=caller.name, uid=caller.uid)


def _scope(sup: Controlled) -> Any:
    return sup.config.access.status if sup.config is not None else "all"


OTHERS_JOB = "another user's job"  # a GPU's job the caller may not see ([access] status = "own")


def _status_for(sup: Controlled, caller: Caller, rules: Rules) -> dict[str, Any]:
    raw = sup.status().to_json()
    if caller.admin:
        return raw
    scope = _scope(sup)
    rows = raw.get("jobs", [])
    raw["jobs"] = [row for row in rows if may_see(caller, row.get("owner"), rules.supervisor_user, scope)]
    unseen = {row.get("name") for row in rows} - {row.get("name") for row in raw["jobs"]}
    for gpu in ((raw.get("gpus") or {}).get("devices") or []) if unseen else []:  # whose a GPU is: not named
        gpu["jobs"] = [OTHERS_JOB if n in unseen else n for n in gpu.get("jobs") or []]
        gpu["assigned"] = [OTHERS_JOB if n in unseen else n for n in gpu.get("assigned") or []]
        gpu["placed"] = [OTHERS_JOB if n in unseen else n for n in gpu.get("placed") or []]
        for p in gpu.get("processes") or []:
            if p.get("job") in unseen:
                p["job"] = OTHERS_JOB
    return redact(raw, _hidden(sup, caller, rules))


def dispatch(sup: Controlled, req: Any, caller: Caller, rules: Rules = Rules()) -> Any:
    """One request of `caller` (the kernel's user of the connection: a "uid" or "user" field of `req` is ignored)."""
    if not isinstance(req, dict):
        raise RequestError("a request is one JSON object per line, e.g. {\"cmd\": \"status\"}")
    cmd = req.get("cmd")
    if cmd == "status":
        return _status_for(sup, caller, rules)
    if cmd == "events":
        job = _job_field(req)
        limit = req.get("limit")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise RequestError(f"limit must be a whole number >= 0, got {json.dumps(limit)}")
        ended = _ended_asked(sup, job, req)
        if ended is not None:  # cancelled or removed: its archived journal, then when and how it ended
            _refuse(read_refusal(caller, job, ended.owner, rules.supervisor_user, _scope(sup), rules.admin_group),
                    caller, cmd, job)
            return redact(ended_events(ended, limit), _hidden_of_ended(sup, caller, rules, ended))
        _refuse(read_refusal(caller, job, _owner(sup, job), rules.supervisor_user, _scope(sup), rules.admin_group),
                caller, cmd, job)
        return redact(sup.events(job, limit), _hidden(sup, caller, rules))
    if cmd == "history":
        return _history(sup, req, caller, rules)
    if cmd == "evals":
        return _evals(sup, req, caller, rules)
    if cmd in ("stop", "start", "restart", "reset", "backup-takeover", "cancel"):
        job = _job_field(req)
        if job not in sup.job_names():
            if cmd == "cancel" and caller.admin:  # a submitted file not (yet) read, or none: cancel_job says which
                return sup.cancel(job)
            raise _no_such_job(sup, job)
        _refuse(job_refusal(caller, cmd, job, _owner(sup, job), rules.supervisor_user, rules.admin_group), caller,
                cmd, job)
        _audit(sup, job, cmd, caller)
        return sup.cancel(job) if cmd == "cancel" else sup.command(cmd, job)
    if cmd == "logs":
        job = _job_field(req)
        ended = _ended_asked(sup, job, req)
        if ended is not None:
            _refuse(job_refusal(caller, cmd, job, ended.owner, rules.supervisor_user, rules.admin_group), caller,
                    cmd, job)
            return _ended_log_text(ended, req)
        _refuse(job_refusal(caller, cmd, job, _owner(sup, job), rules.supervisor_user, rules.admin_group), caller,
                cmd, job)
        return _log_text(sup, job, req)
    if cmd == "log-source":
        return _log_source(sup, req, caller, rules)
    if cmd == "reload":
        _refuse(admin_refusal(caller, cmd, rules.admin_group), caller, cmd)
        result = sup.reload()
        for job in [*result.get("added", []), *result.get("changed", []), *result.get("removed", [])]:
            if job in sup.job_names():  # a removed job already ended is archived: its journal is closed
                _audit(sup, job, cmd, caller)
        return result
    if cmd == "submit":
        text, source = req.get("text"), req.get("source")
        if not isinstance(text, str) or not isinstance(source, str):
            raise RequestError("submit needs 'text' (the job file's contents) and 'source' (its path, for errors)")
        return sup.submit(text, source, caller)
    if isinstance(cmd, str) and cmd.startswith("sweep"):
        return _sweep_request(sup, cmd, req, caller, rules)
    if cmd in ("nodes", "cordon", "uncordon"):
        if cmd in ADMIN_ONLY:
            _refuse(admin_refusal(caller, cmd, rules.admin_group), caller, cmd)
        return _ray_request(sup, cmd, req)
    if cmd == "ping":
        return {"pid": os.getpid()}
    raise RequestError(f"unknown command {json.dumps(cmd)}; commands: status, events, history, stop, start, restart, "
                       "reset, backup-takeover, reload, submit, cancel, logs, log-source, ping, nodes, cordon, uncordon, "
                       "sweep-submit, sweeps, sweep-status, sweep-cancel, sweep-best, evals")


def _sweep_request(sup: Controlled, cmd: str, req: dict[str, Any], caller: Caller, rules: Rules) -> Any:
    """The sweep commands (issue 39): a sweep is its owner's as its trials are; a user sees and cancels their own (an
    admin every one), under the same rules as a job's."""
    if cmd == "sweep-submit":
        text, source = req.get("text"), req.get("source")
        if not isinstance(text, str) or not isinstance(source, str):
            raise RequestError("sweep-submit needs 'text' (the sweep file's contents) and 'source' (its path)")
        return sup.sweep_submit(text, source, caller)
    visible = [s for s in sup.sweep_statuses()
               if read_refusal(caller, s.name, s.owner, rules.supervisor_user, _scope(sup), rules.admin_group) is None]
    if cmd == "sweeps":
        return redact([s.to_json() for s in visible], _hidden(sup, caller, rules))
    name = req.get("sweep")
    if not isinstance(name, str) or not name:
        raise RequestError(f"{cmd} needs 'sweep': the sweep's name")
    found = next((s for s in sup.sweep_statuses() if s.name == name), None)
    if found is None or found not in visible:
        raise RequestError(f"no sweep named {name!r}; `isaacd sweeps` lists them")
    # a sweep's trials are its owner's jobs, and its best trial's job file holds their `environment` as written
    # (sweeps/trial_file.py): another user who may see the sweep reads both with those values hidden, as in status
    if cmd == "sweep-status":
        return redact(found.to_json(), _hidden(sup, caller, rules))
    if cmd == "sweep-best":  # a TOML file: a value is there as TOML writes it (a quote or backslash escaped)
        hidden = _hidden(sup, caller, rules)
        return redact(sup.sweep_best(name), hidden | {toml_string(s)[1:-1] for s in hidden})
    if cmd == "sweep-cancel":
        _refuse(job_refusal(caller, "cancel", name, found.owner, rules.supervisor_user, rules.admin_group), caller,
                cmd, name)
        return sup.sweep_cancel(name)
    raise RequestError(f"unknown command {json.dumps(cmd)}; sweep commands: sweep-submit, sweeps, sweep-status, "
                       "sweep-cancel, sweep-best")


def _evals(sup: Controlled, req: dict[str, Any], caller: Caller, rules: Rules) -> dict[str, Any]:
    """`isaacd evals JOB` and `isaacd best JOB` (issue 41): the job's eval record (`state_dir/evals/<job>.json`,
    evals/record.py), which a user who may read the job's events may read; the client cannot read the state dir
    (root's, 0700), so its content comes over the socket. Read, never written: the keeper owns the file (a record it
    could not use it sets aside itself)."""
    job = _job_field(req)
    if job not in sup.job_names():
        raise _no_such_job(sup, job)
    _refuse(read_refusal(caller, job, _owner(sup, job), rules.supervisor_user, _scope(sup), rules.admin_group), caller,
            "evals", job)
    cfg = _job_cfg(sup, job)
    every = getattr(cfg, "eval", None)
    path = Path(sup.config.supervisor.state_dir) / EVALS_DIR / f"{job}.json"
    try:
        rec = EvalRecord.from_json(json.loads(path.read_bytes()))
    except FileNotFoundError:
        if every is None:
            raise RequestError(f"{job} has no [jobs.eval] section: its checkpoints are not evaluated (docs/evals.md "
                               "shows how to add one)") from None
        rec = EvalRecord(job)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise RequestError(f"{job}'s evaluations record {path} cannot be read ({why}); the supervisor sets an "
                           "unusable one aside at its next evaluation") from None
    last = rec.last_failure
    answer = {"job": job, "every": None if every is None else str(every.every),
              "results": [r.to_json() for r in rec.ordered()], "best": rec.best,
              "given_up": [{"iteration": i, **f.to_json()} for i, f in sorted(rec.given_up.items())],
              "failed": rec.failure_count(), "last_error": last.reason if last is not None else None}
    return redact(answer, _hidden(sup, caller, rules))  # a failure's reason may quote a job's output


def _ended_asked(sup: Controlled, job: str, req: dict[str, Any]) -> EndedJob | None:
    """The ended job a request means: the one `ended` names (1: the newest of that name, 2: the one before), or,
    for a name no live job has, the newest. None for a live job; RequestError when there is none."""
    nth = req.get("ended")
    if nth is not None and (isinstance(nth, bool) or not isinstance(nth, int) or nth < 1):
        raise RequestError(f"ended must be a whole number >= 1, got {json.dumps(nth)}")
    if nth is None and job in sup.job_names():
        return None
    found = sup.ended(job, nth or 1)
    if found is None:
        if nth is None:
            raise _no_such_job(sup, job)
        have = len(sup.ended_jobs(job))
        raise RequestError(f"{job} has {have or 'no'} ended job{'' if have == 1 else 's'} of that name; "
                           f"`isaacd history {job}` lists them")
    return found


def _hidden_of_ended(sup: Controlled, caller: Caller, rules: Rules, ended: EndedJob) -> set[str]:
    """What `caller` may not read of an ended job: as for a live one (its environment values unless it is theirs)."""
    out = _hidden(sup, caller, rules)
    if not sees_secrets(caller, ended.owner, rules.supervisor_user):
        out |= set(ended.hidden)
    return out


def _history(sup: Controlled, req: dict[str, Any], caller: Caller, rules: Rules) -> list[dict[str, Any]]:
    """`isaacd history [JOB]`: the ended jobs, newest first, those the caller may see as they may see live ones."""
    job = req.get("job")
    if job is not None and not isinstance(job, str):
        raise RequestError("job: a job name, or none for every ended job")
    out = []
    for e in sup.ended_jobs(job):
        if caller.admin or may_see(caller, e.owner, rules.supervisor_user, _scope(sup)):
            out.append(redact(e.to_json(), _hidden_of_ended(sup, caller, rules, e)))
    return out


def _ended_log_text(ended: EndedJob, req: dict[str, Any]) -> dict[str, Any]:
    """`isaacd logs` of an ended job for a user who cannot read the state dir: its archived output file."""
    path = ended_log(ended)
    if path is None:
        raise RequestError(f"{ended.name} ended with no output file kept ({ended.runtime}: its output was its "
                           f"container's); `isaacd events {ended.name}` tells its story")
    return {**_file_text(path, req), "ended": ended.to_json()}


LOG_REPLY_BYTES = 256 * 1024  # one `logs` answer at most: a follower asks again from where it ended


def _log_text(sup: Controlled, job: str, req: dict[str, Any]) -> dict[str, Any]:
    """`isaacd logs` for a user who cannot read the state dir (root's, 0700): the trainer's output file of the
    process and ray runtimes, its last `lines` lines, or what follows `offset`; the answer's `offset` is where it
    ended. A container's output is in podman's or the journal's keeping, which only root reads."""
    row = sup.status().job(job)
    if row is None or row.log_path is None:
        raise RequestError(f"{job} has no output yet; try again once it has started")
    if row.runtime in ("podman", "systemd"):
        raise RequestError(f"{job}'s output is its container's ({row.runtime}), which only root reads: ask an admin "
                           f"(`isaacd logs {job}` as root: podman logs or journalctl)")
    return _file_text(Path(row.log_path), req)


def _file_text(path: Path, req: dict[str, Any]) -> dict[str, Any]:
    """A log file's last `lines` lines, or what follows `offset` (the answer's `offset` is where it ended)."""
    lines, offset = req.get("lines", 50), req.get("offset")
    if isinstance(lines, bool) or not isinstance(lines, int) or lines < 1:
        raise RequestError(f"lines must be a whole number >= 1, got {json.dumps(lines)}")
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if isinstance(offset, int) and not isinstance(offset, bool) and 0 <= offset <= size:
                f.seek(offset)
                data = f.read(LOG_REPLY_BYTES)
                return {"text": data.decode("utf-8", "replace"), "offset": offset + len(data)}
            f.seek(max(size - LOG_REPLY_BYTES, 0))  # truncated or new: the tail again
            data = f.read(LOG_REPLY_BYTES)
    except FileNotFoundError:
        raise RequestError(f"no log yet at {path}") from None
    tail = data.splitlines(keepends=True)[-lines:]
    return {"text": b"".join(tail).decode("utf-8", "replace"), "offset": size}


def _log_source(sup: Controlled, req: dict[str, Any], caller: Caller, rules: Rules) -> dict[str, Any]:
    """`isaacd logs`: where the job's output is (history/log_source.py), for a client in any directory: its log file
    and each attempt's handle, as absolute paths; the client reads them, or asks `logs` where it may not. The same
    refusal as `logs`."""
    job = _job_field(req)
    ended = _ended_asked(sup, job, req)
    if ended is not None:  # cancelled or removed: the archive's files, and when and how it ended (said first)
        _refuse(job_refusal(caller, "logs", job, ended.owner, rules.supervisor_user, rules.admin_group), caller,
                "logs", job)
        return {**ended_log_source(ended).to_json(), "ended": ended.to_json()}
    _refuse(job_refusal(caller, "logs", job, _owner(sup, job), rules.supervisor_user, rules.admin_group), caller,
            "logs", job)
    cfg, row = _job_cfg(sup, job), sup.status().job(job)  # a removed job still stopping: its last row's runtime
    runtime = cfg.runtime if cfg is not None else row.runtime if row is not None else "process"
    return read_log_source(Path(sup.config.supervisor.state_dir), job, runtime).to_json()


def _ray_request(sup: Controlled, cmd: str, req: dict[str, Any]) -> Any:
    """The Ray cluster's nodes and the cordons (runtimes/ray.py): cached data, never a wait on Ray."""
    rt = sup.fleet()
    if rt is None:
        raise RequestError("this supervisor has no [ray] section in its config: there are no nodes to show")
    if cmd == "nodes":
        if not rt.nodes_status().nodes:
            rt.refresh_for_operator()  # nothing listed yet (no job placed): ask, answer with what is known
        return rt.nodes_status().to_json()
    node = req.get("node")
    if not isinstance(node, str) or not node:
        raise RequestError("missing field 'node' (a node name, as `isaacd nodes` shows it)")
    if cmd == "uncordon":
        if not rt.cordons.remove(node):
            cordoned = ", ".join(rt.cordons.get()) or "none"
            raise RequestError(f"node {node!r} is not cordoned (cordoned: {cordoned})")
        return f"{node} uncordoned: jobs may be placed there again"
    reason = req.get("reason") or "operator (isaacd cordon)"
    if not rt.cordons.add(node, str(reason)):
        return f"{node} was already cordoned"
    return f"{node} cordoned: no new attempt is placed there (running ones stay) until `isaacd uncordon {node}`"


def _error_text(exc: Exception) -> str:
    # str(KeyError("x")) is "'x'" (a repr); the message itself is args[0]
    if isinstance(exc, KeyError) and exc.args:
        return str(exc.args[0])
    return str(exc)


def _recv_line(conn: socket.socket, deadline: float) -> bytes:
    buf = b""
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no complete request line in time")
        conn.settimeout(left)
        chunk = conn.recv(4096)
        if not chunk:
            break
        buf += chunk
        if len(buf) > MAX_REQUEST_BYTES:
            raise RequestError(f"request longer than {MAX_REQUEST_BYTES} bytes")
    return buf.split(b"\n", 1)[0]


def _send(conn: socket.socket, resp: dict[str, Any], timeout: float) -> None:
    _send_text(conn, json.dumps(resp, default=str), timeout)


def _send_text(conn: socket.socket, text: str, timeout: float) -> None:
    conn.settimeout(timeout)
    conn.sendall(text.encode() + b"\n")


class ControlSocketError(RuntimeError):
    """The control socket cannot be made as the config says (one line, naming the key)."""


def peer_uid(conn: socket.socket) -> int:
    """The connecting process's uid as the kernel saw it at connect() (SO_PEERCRED: pid, uid, gid)."""
    _pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                          struct.calcsize("3i")))
    return uid


def _group_id(group: str) -> int:
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        raise ControlSocketError(f'[supervisor] socket_group: no group "{group}" on this host (getent group '
                                 f'{group}); create it (groupadd {group}) or remove the key') from None


class ControlServer:
    """One accept thread; at most MAX_CLIENTS handler threads (MAX_CLIENTS_PER_USER of one user), each with a
    deadline. `group`: `[supervisor] socket_group` (socket 0660 of that group); `admin_group`: who may do anything."""

    def __init__(self, supervisor: Controlled, path: Path, mode: int, group: str | None = None,
                 admin_group: str | None = None):
        self.path = Path(path)
        self.mode = mode if group is None else 0o660
        self.group = group
        self.rules = _rules(admin_group, group is None and bool(mode & 0o060))
        self.supervisor = supervisor
        self._per_user: dict[int, int] = {}
        self._per_user_lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._slots = threading.BoundedSemaphore(MAX_CLIENTS)
        self._stopping = threading.Event()
        self.busy_replies = 0
        self.timeouts = 0

    def start(self) -> None:
        gid = _group_id(self.group) if self.group is not None else None
        dir_mode = 0o700 | (0o050 if self.mode & 0o060 else 0)
        made = not self.path.parent.exists()
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=dir_mode)
        if gid is not None:
            self._share_dir(gid, made)
        if self.path.exists() or self.path.is_socket():
            try:
                request(self.path, {"cmd": "ping"}, timeout=1.0)
            except NotRunning:
                self.path.unlink()  # stale socket from a crashed supervisor
            else:
                raise RuntimeError(f"another supervisor answers on {self.path}")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o777 & ~self.mode)
        try:
            sock.bind(str(self.path))
        finally:
            os.umask(old)
        if gid is not None:
            os.chown(self.path, -1, gid)  # before listen(): nobody connects before it is the group's
        os.chmod(self.path, self.mode)
        sock.listen(BACKLOG)
        sock.settimeout(0.5)  # so stop() is noticed without a wake-up connection
        self._sock = sock
        self._thread = threading.Thread(target=self._accept_loop, name="control", daemon=True)
        self._thread.start()

    def _share_dir(self, gid: int, made: bool) -> None:
        """The socket's directory: 0750 of the socket's group, so only its members reach the socket. Only a
        directory of the socket's own (made now, or holding nothing but the socket: /run/isaacd): one that holds
        more (the state dir, a config dir), others share (/tmp) or another user owns is left as it is, since opening
        it to the group would open what else it holds; the socket's own mode and group keep others out all the same
        (connect() needs write permission on it)."""
        d = self.path.parent
        st = d.stat()
        own = made or set(os.listdir(d)) <= {self.path.name}
        if not own or st.st_uid != os.geteuid() or st.st_mode & (stat.S_IWOTH | stat.S_ISVTX):
            log.warning("control_socket_dir_kept", dir=str(d), detail="the directory holds more than the socket or "
                        "is shared: left as it is; the socket is 0660 of [supervisor] socket_group all the same")
            return
        os.chown(d, -1, gid)
        os.chmod(d, 0o750)

    def _admit(self, uid: int) -> bool:
        """One more connection of `uid`, unless it holds MAX_CLIENTS_PER_USER already (root: no such bound)."""
        with self._per_user_lock:
            n = self._per_user.get(uid, 0)
            if uid != 0 and n >= MAX_CLIENTS_PER_USER:
                return False
            self._per_user[uid] = n + 1
            return True

    def _leave(self, uid: int) -> None:
        with self._per_user_lock:
            n = self._per_user.get(uid, 1) - 1
            if n <= 0:
                self._per_user.pop(uid, None)
            else:
                self._per_user[uid] = n

    def _accept_loop(self) -> None:
        assert self._sock is not None
        while not self._stopping.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError as exc:
                if self._stopping.is_set():
                    return
                # EMFILE/ENFILE: the host or we are out of fds. Back off instead of spinning; the
                # connection stays queued and is served once fds are free again.
                log.warning("control_accept_failed", error=str(exc))
                self._stopping.wait(0.2)
                continue
            try:
                uid = peer_uid(conn)
            except OSError:
                conn.close()
                continue
            if not self._admit(uid):
                self._busy(conn, "supervisor busy: too many control clients of yours at once")
                continue
            if not self._slots.acquire(blocking=False):
                self._leave(uid)
                self._busy(conn, "supervisor busy: too many control clients")
                continue
            try:
                threading.Thread(target=self._serve, args=(conn, uid), name="control-client", daemon=True).start()
            except RuntimeError:  # cannot start a thread: answer nothing, keep accepting
                self._slots.release()
                self._leave(uid)
                conn.close()

    def _busy(self, conn: socket.socket, why: str) -> None:
        self.busy_replies += 1
        try:
            _send(conn, {"ok": False, "busy": True, "error": why}, 0.2)
        except OSError:
            pass
        conn.close()

    def _serve(self, conn: socket.socket, uid: int) -> None:
        try:
            with conn:
                try:
                    line = _recv_line(conn, time.monotonic() + REQUEST_DEADLINE)
                except TimeoutError:
                    self.timeouts += 1
                    return  # a silent or slow client: cut off, the slot goes to someone else
                except (RequestError, OSError) as exc:
                    if isinstance(exc, RequestError):
                        _send(conn, {"ok": False, "error": str(exc)}, REPLY_DEADLINE)
                    return
                text: str | None = None  # an admin's whole status: its text, made of each row's kept text
                try:
                    caller = caller_for(uid, self.rules.admin_group, self.rules.supervisor_uid, self.rules.admin_gid)
                    req = json.loads(line)
                    if req == {"cmd": "status"} and caller.admin:  # all of it, unredacted: each row's text kept
                        text = '{"ok": true, "result": ' + self.supervisor.status().to_json_text() + "}"
                    else:
                        resp = {"ok": True, "result": dispatch(self.supervisor, req, caller, self.rules)}
                except (KeyError, ValueError, TypeError) as exc:  # RequestError, bad JSON, refused command
                    resp = {"ok": False, "error": _error_text(exc) if not isinstance(exc, json.JSONDecodeError)
                            else f"not a JSON request: {exc}"}
                except Exception as exc:  # noqa: BLE001
                    log.exception("control_request_failed")
                    resp = {"ok": False, "error": f"internal error: {exc}"}
                if text is not None:
                    _send_text(conn, text, REPLY_DEADLINE)
                else:
                    _send(conn, resp, REPLY_DEADLINE)
        except OSError:
            pass  # the client went away or stopped reading: its problem, not ours
        finally:
            self._slots.release()
            self._leave(uid)

    def stop(self) -> None:
        self._stopping.set()
        if self._sock is not None:
            self._sock.close()
        if self._thread is not None:
            self._thread.join(2.0)
        if self._sock is None:
            return  # never bound (a start refused: no group, another supervisor answers): the file is not ours
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass


def _request_once(path: Path, req: dict[str, Any], timeout: float) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(str(path))  # BlockingIOError (EAGAIN) when the listen backlog is full
        try:
            sock.sendall(json.dumps(req).encode() + b"\n")
        except (BrokenPipeError, ConnectionResetError):
            # closed before it read the request: a "busy" reply (too many clients, too many of ours), never acted on
            raise _Busy("the supervisor closed the connection before reading the request") from None
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = sock.recv(1 << 16)
            if not chunk:
                break
            buf += chunk
    if not buf:
        raise RuntimeError(f"the supervisor on {path} closed the connection without a reply")
    resp = json.loads(buf)
    if resp.get("busy"):
        raise _Busy(resp.get("error"))
    return resp


def request(path: Path, req: dict[str, Any], timeout: float = 10.0, retry_for: float = CLIENT_RETRY_FOR) -> Any:
    """Send one request; raises NotRunning when no supervisor listens, RuntimeError on a refused command.

    A full listen backlog or a "busy" reply means nothing was executed, so it is retried for up to
    `retry_for` seconds with a short backoff: many clients at once take turns instead of failing."""
    give_up = time.monotonic() + retry_for
    delay = 0.005
    while True:
        try:
            resp = _request_once(path, req, timeout)
            break
        except (BlockingIOError, _Busy) as exc:
            if time.monotonic() + delay > give_up:
                raise RuntimeError(f"the supervisor on {path} stayed busy for {retry_for:g} s "
                                   f"({exc or 'listen backlog full'}); try again") from None
            time.sleep(delay)
            delay = min(delay * 2, 0.1)
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise NotRunning(f"no isaacd supervisor is listening on {path} ({exc.strerror}); "
                             "start it with `isaacd run --config FILE` or `systemctl start isaaclab-supervisor`") from None
        except PermissionError:
            raise NotRunning(f"permission denied on {path}: the control socket is root-only by default; with "
                             "[supervisor] socket_group its members may use it (docs/security.md)") from None
    if not resp.get("ok"):
        raise RuntimeError(resp.get("error", "request failed"))
    return resp["result"]
