"""runtime = "ray": each attempt of a job is a detached Ray actor on a node of the cluster that fits the job's
resources; the actor starts the trainer there as a process (runtimes/ray_actor.py), or with [jobs.ray] container
as `podman run` of the job's container (the same ContainerSpec as the podman runtime; the actor adds the CDI
devices of its Ray GPUs), and reports its pid, exit status and node.

The supervisor stays on the head host; the state machine, the resume choice, watchdogs, events and metrics
are the same as for the other runtimes. What this runtime adds:

- **Placement.** The runtime picks the node itself (alive, not cordoned, with the job's labels, big enough,
  with room now; the job's previous node first, so a crash resumes in place) and pins the actor there
  (NodeAffinitySchedulingStrategy, hard). No node fits, or none has room now: the attempt waits, saying why
  (`describe().waiting`, `isaacd nodes`), and is placed as soon as one does: never a restart loop.
- **Node loss.** The raylet of the attempt's node gone (GCS says the node is dead), or its GPU reporting a
  reset-class XID (through `isaacd agent`'s health file on that node): the attempt ends with
  `ExitStatus(node_lost=True)` (restart reason `node_lost`), the node is cordoned (persisted in
  state_dir/ray/cordoned.json) and avoided until `isaacd uncordon NODE`; the runner's normal resume picks
  the newest complete checkpoint in the shared log_root and this runtime places the next attempt elsewhere.
- **Shared storage check.** Before each placement the supervisor writes a marker with a fresh value into
  the job's log_root; the actor reads it on its node before starting the trainer. Missing or different: the
  attempt fails with the reason and the node is cordoned ("log_root not shared") - unless the job has a backup
  target ([jobs.backup]): then the bucket stands in for the shared log_root on that node (the actor fetches the
  checkpoint the supervisor chose from the bucket and uploads the run's checkpoints itself: backup/remote.py).
- **Output and side channel.** The trainer's output and the shim's events are written on the node and
  relayed by `status` calls into the head's log file and shim file, so `isaacd logs`, exit reasons quoting
  the output, and the runner's shim reading work unchanged.

Timing: every Runtime method returns at once. All Ray calls (connect, placement, actor calls, ray.wait with a
short timeout, ray.kill) run on this runtime's one worker thread (worker.Worker), in batches: one `observe`
task looks at every live attempt of every job. `adopt` and `find` make bounded synchronous calls.
"""

from __future__ import annotations

import json
import logging
import os
import signal as _signal
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from isaacd_trainer.shim_protocol import SHIM_EVENTS_ENV

from ..config.schema import Config, JobConfig, RayConfig
from ..daemon_log import log
from ..history.store import job_log_path
from .base import ExitStatus, Handle, LaunchSpec, RuntimeFailure
from .view import RuntimeView
from .worker import Slot, Worker

MARKER_NAME = ".isaacd-storage-check"
# `<log_root>/.isaacd-owner-<job>`: the token of the job's current attempt. The actor of an older attempt that is
# still running (its node was cut off from the head, so the head took it for lost) stops its trainer on seeing
# another token: two trainers never write the same job's checkpoints for longer than the fence interval.
OWNER_PREFIX = ".isaacd-owner-"


def owner_file(job: JobConfig) -> Path:
    return job.log_root / f"{OWNER_PREFIX}{job.name}"
NODES_REFRESH = 1.0  # s between GCS node listings while attempts live
STATUS_STALL = 2.0  # s a status call may take before the node's liveness is checked
PLACEMENT_TIMEOUT = 60.0  # s an actor pinned to a node may stay uncreated (someone else took the room)
RELEASED_CREDIT = 30.0  # s resources of an actor we killed count as free on its node (Ray reports lag)
WAIT_RETRY = 2.0  # s between placement attempts while waiting for room


def ray_available() -> str | None:
    """Why `import ray` fails here, or None."""
    try:
        import ray  # noqa: F401
    except ImportError as exc:
        return f"{exc}"
    return None


def actor_name(job: str, token: str) -> str:
    return f"isaacd:{job}:{token}"


@dataclass
class NodeView:
    node_id: str
    name: str
    alive: bool
    address: str
    hostname: str
    labels: dict[str, str]
    total: dict[str, float]
    avail: dict[str, float]


@dataclass
class _Att:
    """One attempt, as the worker knows it. Only the worker writes; the caller reads through `slot`."""

    job: JobConfig
    token: str
    name: str
    slot: Slot
    launch_args: dict[str, Any] = field(default_factory=dict)
    head_log: Path | None = None
    head_shim: Path | None = None
    out_off: int = 0
    shim_off: int = 0
    phase: str = "placing"  # placing | waiting | launching | running | ended
    waiting: str | None = None
    retry_at: float = 0.0
    actor: Any = None
    start_ref: Any = None
    start_since: float = 0.0
    status_ref: Any = None
    status_since: float = 0.0
    node_id: str | None = None
    node: str | None = None
    fault: str | None = None  # a GPU fault seen on the node: the trainer was killed for it
    released: bool = False


class Cordons:
    """Nodes isaacd avoids, by name, until an operator clears them; persisted across supervisor restarts."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        try:
            self._data: dict[str, dict[str, Any]] = json.loads(path.read_text())
        except (OSError, ValueError):
            self._data = {}

    def get(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {k: dict(v) for k, v in self._data.items()}

    def add(self, node: str, reason: str, node_id: str | None = None) -> bool:
        with self._lock:
            if node in self._data:
                return False
            self._data[node] = {"reason": reason, "since": time.time(), "node_id": node_id}
            self._save()
        log.warning("ray_node_cordoned", node=node, reason=reason,
                    detail=f"no job is placed there until `isaacd uncordon {node}`")
        return True

    def remove(self, node: str) -> bool:
        with self._lock:
            if self._data.pop(node, None) is None:
                return False
            self._save()
        log.info("ray_node_uncordoned", node=node)
        return True

    def _save(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self._data, indent=1))
            os.replace(tmp, self.path)
        except OSError as exc:
            log.error("ray_cordons_not_saved", path=str(self.path), error=str(exc))


def _fits(demand: dict[str, float], have: dict[str, float]) -> bool:
    return all(have.get(k, 0.0) + 1e-9 >= v for k, v in demand.items())


def _short(demand: dict[str, float], have: dict[str, float]) -> str:
    miss = [f"{k} {have.get(k, 0.0):g} < {v:g}" for k, v in demand.items() if have.get(k, 0.0) + 1e-9 < v]
    return ", ".join(miss)


def _replace_text(path: Path, text: str) -> None:
    """Write `text` to `path` atomically: readers on other nodes see the old value or the new one."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text + "\n")
    os.replace(tmp, path)


class RayRuntime:
    name = "ray"

    def __init__(self, config: Config):
        self.cfg: RayConfig = config.ray or RayConfig()
        self.state_dir = Path(config.supervisor.state_dir)
        self.worker = Worker("ray")
        self.cordons = Cordons(self.state_dir / "ray" / "cordoned.json")
        self._atts: dict[str, _Att] = {}  # token -> attempt (caller adds; worker updates)
        self._lock = threading.Lock()
        self._ray: Any = None
        self._actor_cls: Any = None
        self.connect_error: str | None = None
        self._nodes: dict[str, NodeView] = {}
        self._nodes_at = float("-inf")
        self._released: list[tuple[float, str, dict[str, float]]] = []  # (when, node_id, demand)
        self._last_node: dict[str, str] = {}  # job -> node name of its latest attempt (resume in place)
        self._observing = False
        self._nonce = uuid.uuid4().hex

    # ---- connection (worker thread, or recovery) ------------------------------------------
    def _connect(self) -> Any:
        if self._ray is not None:
            return self._ray
        import ray

        from .ray_actor import TrainerActor

        try:
            if not ray.is_initialized():
                ray.init(address=self.cfg.address, namespace=self.cfg.namespace, log_to_driver=False,
                         logging_level=logging.WARNING, configure_logging=False)
        except Exception as exc:  # noqa: BLE001 - ConnectionError, RuntimeError, ...
            self.connect_error = f"cannot reach the Ray cluster at {self.cfg.address}: {exc}"
            raise
        self._actor_cls = ray.remote(TrainerActor)
        self._ray = ray
        self.connect_error = None
        log.info("ray_connected", address=self.cfg.address, namespace=self.cfg.namespace)
        return ray

    def _refresh_nodes(self, force: bool = False) -> dict[str, NodeView]:
        now = time.monotonic()
        if not force and now - self._nodes_at < NODES_REFRESH:
            return self._nodes
        ray = self._connect()
        raw = ray.nodes()
        try:
            from ray._private.state import state as _gstate

            avail_by_node = _gstate.available_resources_per_node()
        except Exception:  # noqa: BLE001 - private API: without it, totals stand in for what is free
            avail_by_node = {}
        hosts: dict[str, int] = {}
        for n in raw:
            hosts[n.get("NodeManagerHostname", "")] = hosts.get(n.get("NodeManagerHostname", ""), 0) + 1
        nodes: dict[str, NodeView] = {}
        for n in raw:
            labels = {str(k): str(v) for k, v in (n.get("Labels") or {}).items()}
            host = n.get("NodeManagerHostname", "")
            name = labels.get(self.cfg.node_label) or (host if hosts.get(host, 0) == 1 else f"{host}-{n['NodeID'][:8]}")
            total = {k: float(v) for k, v in (n.get("Resources") or {}).items()}
            nodes[n["NodeID"]] = NodeView(n["NodeID"], name, bool(n.get("Alive")), n.get("NodeManagerAddress", ""),
                                          host, labels, total,
                                          {k: float(v) for k, v in (avail_by_node.get(n["NodeID"]) or total).items()})
        # a name reused by a node that came back (new NodeID): the alive one wins
        self._nodes, self._nodes_at = nodes, now
        return nodes

    # ---- placement (worker) ---------------------------------------------------------------
    def _choose(self, att: _Att) -> tuple[NodeView | None, str | None]:
        nodes = self._refresh_nodes(force=True)
        demand = att.job.ray.demand()
        cordoned = self.cordons.get()
        now = time.monotonic()
        self._released = [r for r in self._released if now - r[0] < RELEASED_CREDIT]
        why: list[str] = []
        cands: list[NodeView] = []
        for n in sorted(nodes.values(), key=lambda v: v.name):
            if not n.alive:
                continue
            if n.name in cordoned:
                why.append(f"{n.name} cordoned ({cordoned[n.name]['reason']})")
            elif att.job.ray.nodes and n.name not in att.job.ray.nodes:
                continue
            elif any(n.labels.get(k) != v for k, v in att.job.ray.labels.items()):
                why.append(f"{n.name} lacks labels {att.job.ray.labels}")
            elif not _fits(demand, n.total):
                why.append(f"{n.name} too small ({_short(demand, n.total)})")
            else:
                cands.append(n)
        if not cands:
            return None, "no node fits: " + ("; ".join(why) if why else "no alive node in the cluster")
        def free(n: NodeView) -> dict[str, float]:
            have = dict(n.avail)
            for _, nid, d in self._released:
                if nid == n.node_id:
                    for k, v in d.items():
                        have[k] = min(have.get(k, 0.0) + v, n.total.get(k, 0.0))
            return have
        fits = [n for n in cands if _fits(demand, free(n))]
        last = self._last_node.get(att.job.name)
        for n in fits:
            if n.name == last:
                return n, None
        if fits:
            return max(fits, key=lambda n: (free(n).get("GPU", 0.0), free(n).get("CPU", 0.0))), None
        busy = "; ".join(f"{n.name} ({_short(demand, free(n))})" for n in cands)
        return None, f"waiting for room: every node that fits is busy: {busy}"

    def _write_marker(self, marker: Path) -> None:
        """This supervisor's value in the log_root, replaced atomically (actors on other nodes read it while
        other jobs are placed: they must never see it half-written)."""
        try:
            if marker.read_text().strip() == self._nonce:
                return
        except OSError:
            pass
        _replace_text(marker, self._nonce)

    def _place(self, att: _Att) -> None:
        if att.slot.cancel is not None:
            self._end(att, ExitStatus(signal=att.slot.cancel, detail="stopped before Ray placed it"))
            return
        try:
            self._connect()
            node, waiting = self._choose(att)
        except Exception as exc:  # noqa: BLE001 - the cluster is unreachable: wait, say why, try again
            node, waiting = None, self.connect_error or f"Ray cluster unreachable: {exc}"
        if node is None:
            if waiting != att.waiting:
                log.warning("ray_job_waiting", job=att.job.name, reason=waiting)
            att.phase, att.waiting, att.retry_at = "waiting", waiting, time.monotonic() + WAIT_RETRY
            return
        marker = att.job.log_root / MARKER_NAME
        try:
            att.job.log_root.mkdir(parents=True, exist_ok=True)
            self._write_marker(marker)
            _replace_text(owner_file(att.job), att.token)  # from now on an older attempt's actor fences itself
        except OSError as exc:
            self._end(att, ExitStatus(start_failed=True, detail=f"cannot write the storage marker {marker}: "
                                                                f"{exc.strerror or exc}"))
            return
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        rj = att.job.ray
        opts: dict[str, Any] = {"name": att.name, "namespace": self.cfg.namespace, "lifetime": "detached",
                                "num_cpus": rj.num_cpus, "num_gpus": rj.num_gpus, "max_restarts": 0,
                                "max_task_retries": 0, "max_concurrency": 1,
                                "scheduling_strategy": NodeAffinitySchedulingStrategy(node.node_id, soft=False)}
        if rj.memory_bytes:
            opts["memory"] = rj.memory_bytes
        if rj.resources:
            opts["resources"] = dict(rj.resources)
        att.actor = self._actor_cls.options(**opts).remote(att.job.name, att.token, str(self.cfg.health_file))
        a = att.launch_args
        att.start_ref = att.actor.launch.remote(a["argv"], a["env"], a["cwd"], str(att.job.log_root), str(marker),
                                                self._nonce, a["work_dir"], a.get("container"),
                                                str(owner_file(att.job)))
        att.start_since = time.monotonic()
        att.phase, att.waiting, att.node_id, att.node = "launching", None, node.node_id, node.name
        self._last_node[att.job.name] = node.name
        # what this placement takes is not free for the next one in the same pass
        for k, v in rj.demand().items():
            node.avail[k] = node.avail.get(k, 0.0) - v
        att.slot.record({}, {"node": node.name, "node_id": node.node_id})
        log.info("ray_job_placed", job=att.job.name, node=node.name, node_id=node.node_id, actor=att.name)

    # ---- observation (worker) -------------------------------------------------------------
    def _observe_all(self) -> None:
        try:
            with self._lock:
                atts = [a for a in self._atts.values() if a.phase != "ended"]
            if not atts:
                return
            now = time.monotonic()
            for a in atts:
                if a.phase == "placing" or (a.phase == "waiting" and now >= a.retry_at):
                    self._place(a)
                elif a.phase == "waiting" and a.slot.cancel is not None:
                    self._end(a, ExitStatus(signal=a.slot.cancel, detail="stopped while waiting for room"))
            live = [a for a in atts if a.phase in ("launching", "running")]
            if not live:
                return
            ray = self._connect()
            for a in live:
                if a.phase == "running" and a.status_ref is None:
                    a.status_ref = a.actor.status.remote(a.out_off, a.shim_off)
                    a.status_since = time.monotonic()
            refs = [r for a in live for r in (a.start_ref if a.phase == "launching" else a.status_ref,) if r is not None]
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0.05) if refs else ([], [])
            ready_set = set(ready)
            try:
                nodes = self._refresh_nodes()
            except Exception:  # noqa: BLE001
                nodes = self._nodes
            for a in live:
                ref = a.start_ref if a.phase == "launching" else a.status_ref
                if ref is not None and ref in ready_set:
                    try:
                        result = ray.get(ref, timeout=1.0)
                    except Exception as exc:  # noqa: BLE001 - the actor died (or its node): classify
                        self._actor_failed(a, exc)
                        continue
                    if a.phase == "launching":
                        self._launched(a, result)
                    else:
                        a.status_ref = None
                        self._status(a, result)
                    continue
                n = nodes.get(a.node_id or "")
                if n is not None and not n.alive:
                    self._node_lost(a, "its raylet is gone (the GCS marked the node dead)")
                elif a.phase == "launching" and time.monotonic() - a.start_since > PLACEMENT_TIMEOUT:
                    # pinned to a node whose room someone else took: release it and place again
                    log.warning("ray_placement_timeout", job=a.job.name, node=a.node)
                    self._release(a)
                    a.released, a.actor, a.start_ref = False, None, None
                    a.phase, a.waiting = "placing", f"{a.node} had no room after all; placing again"
        finally:
            self._observing = False

    def _launched(self, a: _Att, res: dict[str, Any]) -> None:
        if not res.get("ok"):
            kind, err = res.get("kind"), str(res.get("error"))
            if kind in ("storage", "workdir", "gpu") and a.node:
                self.cordons.add(a.node, {"storage": "log_root not shared", "workdir": "workdir not writable",
                                          "gpu": "GPU unhealthy"}[kind] + f": {err}", a.node_id)
            self._end(a, ExitStatus(start_failed=True, detail=f"on node {a.node}: {err}"))
            return
        a.phase = "running"
        found = {"remote_pid": res.get("pid"), "hostname": res.get("hostname"), "gpu_ids": res.get("gpu_ids")}
        a.slot.record({}, found)
        log.info("ray_trainer_started", job=a.job.name, node=a.node, pid=res.get("pid"))
        if a.slot.cancel is not None:  # a stop that came while the launch was in flight
            a.actor.signal.remote(a.slot.cancel)

    def _status(self, a: _Att, st: dict[str, Any]) -> None:
        for data, path, attr in ((st.get("out") or b"", a.head_log, "out_off"),
                                 (st.get("shim") or b"", a.head_shim, "shim_off")):
            if data and path is not None:
                try:
                    with open(path, "ab") as fh:
                        fh.write(data)
                except OSError as exc:
                    log.warning("ray_relay_failed", job=a.job.name, path=str(path), error=str(exc))
                setattr(a, attr, getattr(a, attr) + len(data))
        bad = st.get("unhealthy") or []
        if bad and a.fault is None and st.get("state") == "running":
            a.fault = f"GPU {', '.join(bad)} on node {a.node}"
            if a.node:
                self.cordons.add(a.node, f"GPU unhealthy: {', '.join(bad)}", a.node_id)
            a.actor.signal.remote(int(_signal.SIGKILL))
        if st.get("state") == "exited" and not st.get("more"):
            if a.fault is not None:
                self._end(a, ExitStatus(node_lost=True, detail=a.fault))
            elif st.get("fenced"):  # another attempt (another supervisor?) took the job's owner file
                self._end(a, ExitStatus(code=st.get("code"), signal=st.get("signal"), detail=str(st["fenced"])))
            else:
                self._end(a, ExitStatus(code=st.get("code"), signal=st.get("signal")))

    def _actor_failed(self, a: _Att, exc: Exception) -> None:
        try:
            nodes = self._refresh_nodes(force=True)
        except Exception:  # noqa: BLE001
            nodes = self._nodes
        n = nodes.get(a.node_id or "")
        text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        if n is None or not n.alive or "node" in text.lower() and "died" in text.lower():
            self._node_lost(a, "its raylet is gone")
        else:
            self._end(a, ExitStatus(detail=f"the trainer's Ray actor on node {a.node} died: {text}"))

    def _node_lost(self, a: _Att, why: str) -> None:
        if a.node:
            self.cordons.add(a.node, f"node lost: {why}", a.node_id)
        self._end(a, ExitStatus(node_lost=True, detail=f"{a.node}: {why}"))

    def _end(self, a: _Att, status: ExitStatus) -> None:
        a.phase, a.waiting = "ended", None
        with a.slot.lock:
            a.slot.exit = status
        self._release(a)

    def _release(self, a: _Att) -> None:
        """Kill the actor at once (its resources go back to Ray): the next attempt may go to the same node."""
        if a.actor is not None and not a.released:
            try:
                self._ray.kill(a.actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
            if a.node_id:
                self._released.append((time.monotonic(), a.node_id, a.job.ray.demand()))
        a.released = True
        a.slot.cleaned = True

    # ---- the Runtime interface (caller thread; never waits) --------------------------------
    def start(self, spec: LaunchSpec) -> Handle:
        why = ray_available()
        if why is not None:
            raise RuntimeFailure(f'runtime = "ray" needs the ray package in isaacd\'s venv ({why}): '
                                "pip install 'ray[default]' (the same version as the cluster's)")
        from . import trainer_command

        job = spec.job
        token = spec.token or uuid.uuid4().hex
        shim = spec.env.get(SHIM_EVENTS_ENV)
        name = actor_name(job.name, token)
        work_dir = f"/tmp/isaacd-ray/{job.name}-{token[:12]}"
        container = None
        if job.ray.container:
            argv, container = self._container_argv(spec, token, work_dir)
        else:
            # the trainer runs as a process on its node, with this host's paths (same venv, shared log_root)
            argv = trainer_command.process_argv(job, spec.trainer_args) if job.command is None else list(spec.argv)
        env = {k: v for k, v in spec.env.items()
               if k in job.environment or k.startswith("ISAACD_") or k == "PYTHONUNBUFFERED"}
        env[trainer_command.LAUNCH_TOKEN_ENV] = token
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(spec.log_path, "ab") as fh:
            log_offset = fh.seek(0, os.SEEK_END)
        att = _Att(job=job, token=token, name=name, slot=Slot(),
                   launch_args={"argv": argv, "env": env, "cwd": str(spec.cwd), "work_dir": work_dir,
                                "container": container},
                   head_log=spec.log_path, head_shim=Path(shim) if shim else None)
        with self._lock:
            self._atts[token] = att
        state = {"token": token, "actor": name, "namespace": self.cfg.namespace, "log_path": str(spec.log_path),
                 "log_offset": log_offset}
        if shim:
            state["shim_path"] = shim
        self._kick()
        return Handle("ray", job.name, state)

    def _container_argv(self, spec: LaunchSpec, token: str, work_dir: str) -> tuple[list[str], str]:
        """`podman run` of the job's container, for the actor to run on its node: the same ContainerSpec as the
        podman and systemd runtimes (image, volumes, the log root at the same path, the shim bind-mounted),
        with the shim's side channel in the attempt's work dir on the node, which is mounted at the same path.
        The actor adds the CDI devices of the GPUs Ray gave it: only it knows them."""
        from .container_spec import ContainerSpec, attempt_number

        env = dict(spec.env)
        if SHIM_EVENTS_ENV in env:
            env[SHIM_EVENTS_ENV] = f"{work_dir}/shim.jsonl"
        cs = ContainerSpec.from_launch(replace(spec, env=env), token,
                                       attempt_number(spec, self.state_dir))
        return ["podman", "run", "--rm", "--name", cs.name, *cs.podman_run_options()], cs.name

    def _kick(self) -> None:
        if not self._observing:
            self._observing = True
            self.worker.submit("observe", self._observe_all)

    def _att(self, handle: Handle) -> _Att | None:
        return self._atts.get(handle.state.get("token", ""))

    def poll(self, handle: Handle) -> ExitStatus | None:
        a = self._att(handle)
        if a is None:
            return ExitStatus(detail="the Ray attempt is unknown to this supervisor")
        a.slot.merge(handle.state)
        if a.slot.exit is not None:
            return a.slot.exit
        self._kick()
        return None

    def signal(self, handle: Handle, sig: int) -> None:
        a = self._att(handle)
        if a is None:
            return
        a.slot.cancel = sig if a.slot.cancel is None or sig == _signal.SIGKILL else a.slot.cancel

        def send() -> None:
            if a.phase == "running" and a.actor is not None:
                a.actor.signal.remote(int(sig))
            elif a.phase in ("placing", "waiting"):
                self._end(a, ExitStatus(signal=int(sig), detail="stopped before Ray placed it"))
            # launching: _launched forwards the cancel once the trainer exists
        self.worker.submit("signal", send)

    def kill(self, handle: Handle) -> None:
        self.signal(handle, int(_signal.SIGKILL))

    def pids(self, handle: Handle) -> list[int]:
        return []  # the trainer's pids are on its node, not this host's (describe() shows its pid there)

    def cleanup(self, handle: Handle) -> bool:
        a = self._att(handle)
        if a is None:
            return True
        if a.slot.cleaned:
            with self._lock:
                self._atts.pop(a.token, None)
            return True
        if not a.slot.cleanup_queued:
            a.slot.cleanup_queued = True
            self.worker.submit("release", lambda: self._release(a))
        return False

    def describe(self, handle: Handle) -> RuntimeView:
        a = self._att(handle)
        st = handle.state
        return RuntimeView(pid=st.get("remote_pid"), node=st.get("node"), node_id=st.get("node_id"),
                           hostname=st.get("hostname"), log_path=st.get("log_path"),
                           waiting=a.waiting if a is not None else None)

    # ---- recovery (bounded synchronous calls) ----------------------------------------------
    def _lookup(self, job: JobConfig, name: str) -> Any:
        ray = self._connect()
        try:
            return ray.get_actor(name, namespace=self.cfg.namespace)
        except ValueError:
            return None

    def adopt(self, job: JobConfig, state: dict[str, Any]) -> Handle | None:
        token = state.get("token")
        if not token:
            return None
        return self._reattach(job, token, dict(state))

    def find(self, job: JobConfig, token: str) -> Handle | None:
        if not token:
            return None
        return self._reattach(job, token, {"token": token, "actor": actor_name(job.name, token),
                                           "namespace": self.cfg.namespace,
                                           "log_path": str(job_log_path(self.state_dir, job.name))})

    def _reattach(self, job: JobConfig, token: str, state: dict[str, Any]) -> Handle | None:
        try:
            actor = self._lookup(job, state.get("actor") or actor_name(job.name, token))
            if actor is None:
                return None
            info = self._ray.get(actor.ping.remote(), timeout=self.cfg.connect_timeout)
        except Exception as exc:  # noqa: BLE001 - gone, or its node is: nothing to adopt
            log.warning("ray_adopt_failed", job=job.name, token=token, error=str(exc)[:300])
            return None
        head_log = Path(state["log_path"]) if state.get("log_path") else None
        head_shim = Path(state["shim_path"]) if state.get("shim_path") else None
        log_off = int(state.get("log_offset") or 0)
        a = _Att(job=job, token=token, name=state.get("actor") or actor_name(job.name, token), slot=Slot(),
                 head_log=head_log, head_shim=head_shim, actor=actor, phase="running" if info.get("pid") else "launching")
        a.node_id = info.get("node_id") or state.get("node_id")
        # relayed so far = what the head's files hold (the relay copies bytes verbatim)
        a.out_off = max((head_log.stat().st_size if head_log and head_log.exists() else 0) - log_off, 0)
        a.shim_off = head_shim.stat().st_size if head_shim and head_shim.exists() else 0
        try:
            nodes = self._refresh_nodes(force=True)
            n = nodes.get(a.node_id or "")
            a.node = n.name if n else state.get("node")
        except Exception:  # noqa: BLE001
            a.node = state.get("node")
        if a.phase == "launching":  # found before its trainer started: it never will (nobody waits on launch)
            self._release(a)
            return None
        if a.node:
            self._last_node[job.name] = a.node
        with self._lock:
            self._atts[token] = a
        state.update({"token": token, "node": a.node, "node_id": a.node_id, "remote_pid": info.get("pid")})
        return Handle("ray", job.name, state)

    # ---- operator side (control socket threads: cached data only) --------------------------
    def nodes_status(self) -> dict[str, Any]:
        cordoned = self.cordons.get()
        jobs_on: dict[str, list[str]] = {}
        waiting: list[dict[str, Any]] = []
        with self._lock:
            atts = list(self._atts.values())
        for a in atts:
            if a.phase in ("launching", "running") and a.node_id:
                jobs_on.setdefault(a.node_id, []).append(a.job.name)
            elif a.phase in ("waiting", "placing") and a.waiting:
                waiting.append({"job": a.job.name, "reason": a.waiting})
        nodes = []
        alive_names = {n.name for n in self._nodes.values() if n.alive}
        shown: set[str] = set()
        for n in sorted(self._nodes.values(), key=lambda v: (not v.alive, v.name)):
            if not n.alive and n.name in alive_names | shown:
                continue  # an earlier incarnation of a node that is back (or listed once already)
            shown.add(n.name)
            nodes.append({"name": n.name, "node_id": n.node_id, "alive": n.alive, "address": n.address,
                          "labels": {k: v for k, v in n.labels.items() if not k.startswith("ray.io/")},
                          "total": {k: v for k, v in n.total.items() if not k.startswith("node:")
                                    and k != "object_store_memory"},
                          "available": {k: v for k, v in n.avail.items() if not k.startswith("node:")
                                        and k != "object_store_memory"},
                          "cordoned": cordoned.get(n.name), "jobs": sorted(jobs_on.get(n.node_id, []))})
        known = {n["name"] for n in nodes}
        for name, c in sorted(cordoned.items()):
            if name not in known:
                nodes.append({"name": name, "node_id": c.get("node_id"), "alive": False, "address": None,
                              "labels": {}, "total": {}, "available": {}, "cordoned": c, "jobs": []})
        return {"address": self.cfg.address, "connected": self._ray is not None, "error": self.connect_error,
                "nodes": nodes, "waiting": waiting}

    def refresh_for_operator(self) -> None:
        """Queue a node listing (for `isaacd nodes` before any job ran); the answer comes with the next call."""
        def refresh() -> None:
            try:
                self._refresh_nodes(force=True)
            except Exception as exc:  # noqa: BLE001
                self.connect_error = self.connect_error or str(exc)
        self.worker.submit("nodes", refresh)
