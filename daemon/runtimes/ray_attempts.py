"""The life of the Ray runtime's attempts on its worker thread (runtimes/ray.py takes the calls, this runs them):
placing (the node chosen by ray_placement, the storage claimed, a detached actor pinned there), observing every
live attempt in one batch (the launch's answer, the relayed output and shim events, GPU faults, node liveness),
ending (the ExitStatus in the attempt's Slot) and releasing (ray.kill, its resources credited to its node).
"""

from __future__ import annotations

import signal as _signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config.schema import JobConfig, RayConfig
from ..daemon_log import log
from .base import ExitStatus
from .ray_cluster import RayCluster
from .ray_placement import Placement
from .ray_storage import StorageCheck, marker_file, owner_file
from .worker import Slot, Worker

PLACEMENT_TIMEOUT = 60.0  # s an actor pinned to a node may stay uncreated (someone else took the room)
WAIT_RETRY = 2.0  # s between placement attempts while waiting for room
# why a node is cordoned when its actor refused to launch, by the actor's `kind` (ray_actor.py)
LAUNCH_CORDONS = {"storage": "log_root not shared", "workdir": "workdir not writable", "gpu": "GPU unhealthy"}


@dataclass
class RayAttempt:
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


class RayAttempts:
    """The attempts by launch token (the caller adds and drops them; the worker moves them on) and what the
    worker does to them. `kick` queues one `observe_all` pass unless one is queued already."""

    def __init__(self, cfg: RayConfig, worker: Worker, cluster: RayCluster, placement: Placement,
                 storage: StorageCheck):
        self.cfg = cfg
        self.worker = worker
        self.cluster = cluster
        self.placement = placement
        self.storage = storage
        self._by_token: dict[str, RayAttempt] = {}
        self._lock = threading.Lock()
        self._observing = False

    # ---- the registry (any thread) ---------------------------------------------------------
    def add(self, att: RayAttempt) -> None:
        with self._lock:
            self._by_token[att.token] = att

    def get(self, token: str) -> RayAttempt | None:
        return self._by_token.get(token)

    def drop(self, token: str) -> None:
        with self._lock:
            self._by_token.pop(token, None)

    def all(self) -> list[RayAttempt]:
        with self._lock:
            return list(self._by_token.values())

    def kick(self) -> None:
        if not self._observing:
            self._observing = True
            self.worker.submit("observe", self.observe_all)

    # ---- placement (worker) ---------------------------------------------------------------
    def place(self, att: RayAttempt) -> None:
        if att.slot.cancel is not None:
            self.end(att, ExitStatus(signal=att.slot.cancel, detail="stopped before Ray placed it"))
            return
        try:
            self.cluster.connect()
            node, waiting = self.placement.choose(att.job, self.cluster.refresh(force=True))
        except Exception as exc:  # noqa: BLE001 - the cluster is unreachable: wait, say why, try again
            node, waiting = None, self.cluster.connect_error or f"Ray cluster unreachable: {exc}"
        if node is None:
            if waiting != att.waiting:
                log.warning("ray_job_waiting", job=att.job.name, reason=waiting)
            att.phase, att.waiting, att.retry_at = "waiting", waiting, time.monotonic() + WAIT_RETRY
            return
        marker = marker_file(att.job)
        try:
            self.storage.claim(att.job, att.token)
        except OSError as exc:
            self.end(att, ExitStatus(start_failed=True, detail=f"cannot write the storage marker {marker}: "
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
        att.actor = self.cluster.actor_cls.options(**opts).remote(att.job.name, att.token, str(self.cfg.health_file))
        a = att.launch_args
        att.start_ref = att.actor.launch.remote(a["argv"], a["env"], a["cwd"], str(att.job.log_root), str(marker),
                                                self.storage.nonce, a["work_dir"], a.get("container"),
                                                str(owner_file(att.job)))
        att.start_since = time.monotonic()
        att.phase, att.waiting, att.node_id, att.node = "launching", None, node.node_id, node.name
        self.placement.taken(att.job, node)
        att.slot.record({}, {"node": node.name, "node_id": node.node_id})
        log.info("ray_job_placed", job=att.job.name, node=node.name, node_id=node.node_id, actor=att.name)

    # ---- observation (worker) -------------------------------------------------------------
    def observe_all(self) -> None:
        try:
            atts = [a for a in self.all() if a.phase != "ended"]
            if not atts:
                return
            now = time.monotonic()
            for a in atts:
                if a.phase == "placing" or (a.phase == "waiting" and now >= a.retry_at):
                    self.place(a)
                elif a.phase == "waiting" and a.slot.cancel is not None:
                    self.end(a, ExitStatus(signal=a.slot.cancel, detail="stopped while waiting for room"))
            live = [a for a in atts if a.phase in ("launching", "running")]
            if not live:
                return
            ray = self.cluster.connect()
            for a in live:
                if a.phase == "running" and a.status_ref is None:
                    a.status_ref = a.actor.status.remote(a.out_off, a.shim_off)
                    a.status_since = time.monotonic()
            refs = [r for a in live for r in (a.start_ref if a.phase == "launching" else a.status_ref,) if r is not None]
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0.05) if refs else ([], [])
            ready_set = set(ready)
            nodes = self.cluster.refresh_or_cached()
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
                    self.release(a)
                    a.released, a.actor, a.start_ref = False, None, None
                    a.phase, a.waiting = "placing", f"{a.node} had no room after all; placing again"
        finally:
            self._observing = False

    def _launched(self, a: RayAttempt, res: dict[str, Any]) -> None:
        if not res.get("ok"):
            kind, err = res.get("kind"), str(res.get("error"))
            if kind in LAUNCH_CORDONS and a.node:
                self.placement.cordons.add(a.node, LAUNCH_CORDONS[kind] + f": {err}", a.node_id)
            self.end(a, ExitStatus(start_failed=True, detail=f"on node {a.node}: {err}"))
            return
        a.phase = "running"
        found = {"remote_pid": res.get("pid"), "hostname": res.get("hostname"), "gpu_ids": res.get("gpu_ids")}
        a.slot.record({}, found)
        log.info("ray_trainer_started", job=a.job.name, node=a.node, pid=res.get("pid"))
        if a.slot.cancel is not None:  # a stop that came while the launch was in flight
            a.actor.signal.remote(a.slot.cancel)

    def _status(self, a: RayAttempt, st: dict[str, Any]) -> None:
        """One status answer: its output and shim events appended to the head's files, a GPU fault acted on,
        the end reported."""
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
                self.placement.cordons.add(a.node, f"GPU unhealthy: {', '.join(bad)}", a.node_id)
            a.actor.signal.remote(int(_signal.SIGKILL))
        if st.get("state") == "exited" and not st.get("more"):
            if a.fault is not None:
                self.end(a, ExitStatus(node_lost=True, detail=a.fault))
            elif st.get("fenced"):  # another attempt (another supervisor?) took the job's owner file
                self.end(a, ExitStatus(code=st.get("code"), signal=st.get("signal"), detail=str(st["fenced"])))
            else:
                self.end(a, ExitStatus(code=st.get("code"), signal=st.get("signal")))

    def _actor_failed(self, a: RayAttempt, exc: Exception) -> None:
        nodes = self.cluster.refresh_or_cached(force=True)
        n = nodes.get(a.node_id or "")
        text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        if n is None or not n.alive or "node" in text.lower() and "died" in text.lower():
            self._node_lost(a, "its raylet is gone")
        else:
            self.end(a, ExitStatus(detail=f"the trainer's Ray actor on node {a.node} died: {text}"))

    def _node_lost(self, a: RayAttempt, why: str) -> None:
        if a.node:
            self.placement.cordons.add(a.node, f"node lost: {why}", a.node_id)
        self.end(a, ExitStatus(node_lost=True, detail=f"{a.node}: {why}"))

    # ---- the end (worker) -----------------------------------------------------------------
    def end(self, a: RayAttempt, status: ExitStatus) -> None:
        a.phase, a.waiting = "ended", None
        with a.slot.lock:
            a.slot.exit = status
        self.release(a)

    def release(self, a: RayAttempt) -> None:
        """Kill the actor at once (its resources go back to Ray): the next attempt may go to the same node."""
        if a.actor is not None and not a.released:
            try:
                self.cluster.ray.kill(a.actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
            if a.node_id:
                self.placement.released(a.node_id, a.job.ray.demand())
        a.released = True
        a.slot.cleaned = True
