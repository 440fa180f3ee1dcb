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

The parts, one job each: ray_cluster.py (the connection, the node listing), ray_placement.py (which node; the
cordons), ray_storage.py (the storage marker and the owner fence), ray_attempts.py (each attempt's life on the
worker: place, observe, end, release), ray_fleet.py (what `isaacd nodes` shows). This module is the Runtime
interface over them, and the recovery calls.
"""

from __future__ import annotations

import os
import signal as _signal
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from isaacd_trainer.shim_protocol import SHIM_EVENTS_ENV

from ..config.schema import Config, JobConfig, RayConfig
from ..daemon_log import log
from ..history.store import job_log_path
from .base import ExitStatus, Handle, LaunchSpec, RuntimeFailure
from .ray_attempts import RayAttempt, RayAttempts
from .ray_cluster import RayCluster, ray_available
from .ray_fleet import FleetStatus, nodes_status
from .ray_placement import Cordons, Placement
from .ray_storage import StorageCheck, owner_file
from .view import RuntimeView
from .worker import Slot, Worker

__all__ = ["RayRuntime", "actor_name", "owner_file", "ray_available"]  # owner_file: tests import it from here


def actor_name(job: str, token: str) -> str:
    return f"isaacd:{job}:{token}"


class RayRuntime:
    name = "ray"

    def __init__(self, config: Config):
        self.cfg: RayConfig = config.ray or RayConfig()
        self.state_dir = Path(config.supervisor.state_dir)
        self.worker = Worker("ray")
        self.cordons = Cordons(self.state_dir / "ray" / "cordoned.json")
        self.cluster = RayCluster(self.cfg)
        self.attempts = RayAttempts(self.cfg, self.worker, self.cluster, Placement(self.cordons), StorageCheck())

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
        att = RayAttempt(job=job, token=token, name=name, slot=Slot(),
                         launch_args={"argv": argv, "env": env, "cwd": str(spec.cwd), "work_dir": work_dir,
                                      "container": container},
                         head_log=spec.log_path, head_shim=Path(shim) if shim else None)
        self.attempts.add(att)
        state = {"token": token, "actor": name, "namespace": self.cfg.namespace, "log_path": str(spec.log_path),
                 "log_offset": log_offset}
        if shim:
            state["shim_path"] = shim
        self.attempts.kick()
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

    def _att(self, handle: Handle) -> RayAttempt | None:
        return self.attempts.get(handle.state.get("token", ""))

    def poll(self, handle: Handle) -> ExitStatus | None:
        a = self._att(handle)
        if a is None:
            return ExitStatus(detail="the Ray attempt is unknown to this supervisor")
        a.slot.merge(handle.state)
        if a.slot.exit is not None:
            return a.slot.exit
        self.attempts.kick()
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
                self.attempts.end(a, ExitStatus(signal=int(sig), detail="stopped before Ray placed it"))
            # launching: RayAttempts._launched forwards the cancel once the trainer exists
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
            self.attempts.drop(a.token)
            return True
        if not a.slot.cleanup_queued:
            a.slot.cleanup_queued = True
            self.worker.submit("release", lambda: self.attempts.release(a))
        return False

    def describe(self, handle: Handle) -> RuntimeView:
        a = self._att(handle)
        st = handle.state
        return RuntimeView(pid=st.get("remote_pid"), node=st.get("node"), node_id=st.get("node_id"),
                           hostname=st.get("hostname"), log_path=st.get("log_path"),
                           waiting=a.waiting if a is not None else None)

    # ---- recovery (bounded synchronous calls) ----------------------------------------------
    def _lookup(self, job: JobConfig, name: str) -> Any:
        ray = self.cluster.connect()
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
            info = self.cluster.ray.get(actor.ping.remote(), timeout=self.cfg.connect_timeout)
        except Exception as exc:  # noqa: BLE001 - gone, or its node is: nothing to adopt
            log.warning("ray_adopt_failed", job=job.name, token=token, error=str(exc)[:300])
            return None
        head_log = Path(state["log_path"]) if state.get("log_path") else None
        head_shim = Path(state["shim_path"]) if state.get("shim_path") else None
        log_off = int(state.get("log_offset") or 0)
        a = RayAttempt(job=job, token=token, name=state.get("actor") or actor_name(job.name, token), slot=Slot(),
                       head_log=head_log, head_shim=head_shim, actor=actor,
                       phase="running" if info.get("pid") else "launching")
        a.node_id = info.get("node_id") or state.get("node_id")
        # relayed so far = what the head's files hold (the relay copies bytes verbatim)
        a.out_off = max((head_log.stat().st_size if head_log and head_log.exists() else 0) - log_off, 0)
        a.shim_off = head_shim.stat().st_size if head_shim and head_shim.exists() else 0
        try:
            n = self.cluster.refresh(force=True).get(a.node_id or "")
            a.node = n.name if n else state.get("node")
        except Exception:  # noqa: BLE001
            a.node = state.get("node")
        if a.phase == "launching":  # found before its trainer started: it never will (nobody waits on launch)
            self.attempts.release(a)
            return None
        if a.node:
            self.attempts.placement.remember(job.name, a.node)
        self.attempts.add(a)
        state.update({"token": token, "node": a.node, "node_id": a.node_id, "remote_pid": info.get("pid")})
        return Handle("ray", job.name, state)

    # ---- operator side (control.Fleet; control socket threads: cached data only) -----------
    def nodes_status(self) -> FleetStatus:
        return nodes_status(self.cluster, self.cordons.get(), self.attempts.all())

    def refresh_for_operator(self) -> None:
        """Queue a node listing (for `isaacd nodes` before any job ran); the answer comes with the next call."""
        def refresh() -> None:
            try:
                self.cluster.refresh(force=True)
            except Exception as exc:  # noqa: BLE001
                self.cluster.connect_error = self.cluster.connect_error or str(exc)
        self.worker.submit("nodes", refresh)
