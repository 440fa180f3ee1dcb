"""The code that runs on a Ray node: one detached actor per attempt, holding the job's resources, which
starts the trainer as a child process there and answers the supervisor's questions about it.

Stdlib only (plus `ray` for the node's identity): it is imported by the Ray worker process on the node,
from the same venv path as on the head. A job with a backup target on a node without the shared log_root also
imports isaacd.backup (fsspec): the bucket stands in for the shared storage there (backup/remote.py).
Every method returns at once; the supervisor calls `status` about
every tick and relays the trainer's output and the shim's side channel to the head's files.

The trainer dies with the actor: it is started with PR_SET_PDEATHSIG = SIGKILL, so a raylet that dies
(and takes its workers with it) or a `ray.kill` of the actor never leaves a trainer writing checkpoints
into the shared log_root while the next attempt runs elsewhere.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from isaacd_trainer.shim_protocol import SHIM_EVENTS_ENV  # stdlib only too

from ..os_seam.proctree import process_tree, signal_each  # stdlib only, like this module

HEALTH_FILE_ENV = "ISAACD_AGENT_HEALTH_FILE"
# [jobs.backup] for a node without the shared log_root (the names of backup/remote.py, which is imported only then)
BACKUP_ENV, RESTORE_ENV = "ISAACD_BACKUP", "ISAACD_BACKUP_RESTORE"


def node_health_file(configured: str | Path | None) -> Path:
    """Where this node's agent writes (and the actors on it read) unhealthy GPUs: the node's own environment
    (set for its `ray start` and its agent), else the host config's [ray] health_file, else the default."""
    return Path(os.environ.get(HEALTH_FILE_ENV) or configured or "/run/isaacd/agent-health.json")

FENCE_INTERVAL = 2.0  # seconds between the actor's looks at the job's owner file
PR_SET_PDEATHSIG = 1
CHUNK = 256 * 1024  # most output relayed per status call


def _die_with_parent() -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except OSError:
        pass


def _read_from(path: Path, offset: int, limit: int = CHUNK) -> tuple[bytes, int]:
    """(bytes after offset, up to limit, and the file's size)."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if offset >= size:
                return b"", size
            fh.seek(offset)
            return fh.read(limit), size
    except OSError:
        return b"", 0


def _podman(*args: str) -> str | None:
    """`podman <args>` on this node: its stdout stripped, or None if it failed or is not installed."""
    try:
        r = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


class TrainerActor:
    """Made a Ray actor by the supervisor (`ray.remote(TrainerActor).options(...)`)."""

    def __init__(self, job: str, token: str, health_file: str = "") -> None:
        self.job, self.token = job, token
        # the node's own ISAACD_AGENT_HEALTH_FILE (inherited from its `ray start`) wins over the head's path
        self.health_file = node_health_file(health_file) if health_file or os.environ.get(HEALTH_FILE_ENV) else None
        self.proc: subprocess.Popen[bytes] | None = None
        self.out_path: Path | None = None
        self.shim_path: Path | None = None
        self.started_at = time.time()
        self.container: str | None = None  # `podman run --name` of a containerised trainer ([jobs.ray] container)
        self.fenced: str | None = None  # why this actor stopped its trainer itself (another attempt owns the job)
        self.backup: Any = None  # backup.remote.NodeBackup: uploads from this node when it lacks the shared log_root
        self.gpu_ids: list[str] = []
        self.node_id = ""
        try:
            import ray

            if not ray.is_initialized():  # outside a Ray worker (unit use): asking would start a local Ray
                return
            ctx = ray.get_runtime_context()
            self.node_id = ctx.get_node_id()
            self.gpu_ids = [str(g) for g in ctx.get_accelerator_ids().get("GPU", [])]
        except Exception:  # noqa: BLE001 - no Ray here
            pass

    # ---- the launch ---------------------------------------------------------------------
    def launch(self, argv: list[str], env: dict[str, str], cwd: str, log_root: str, marker: str,
               nonce: str, work_dir: str, container: str | None = None, owner: str = "") -> dict[str, Any]:
        """Check the shared storage, start the trainer. Returns {"ok": True, pid, ...} or {"ok": False,
        "error": ..., "kind": storage|workdir|spawn|gpu|backup}. A job with a backup target (ISAACD_BACKUP in
        `env`) on a node without the shared log_root fetches its checkpoint from the bucket first (kind "backup"
        if that fails) and uploads the run's checkpoints from here (backup/remote.py).

        `container`: argv is `podman run --rm --name <container> ...`. A container of that name left on this node
        (an earlier attempt whose actor died) goes first, never two of a job; the GPUs Ray gave this actor are
        passed by CDI (`nvidia.com/gpu=<index>`, the names nvidia-ctk generates); inside, CUDA numbers them from 0.
        `owner`: the job's owner file in the shared log_root; while the trainer runs, a thread looks at it every
        FENCE_INTERVAL and stops the trainer once it names another attempt (see ray.OWNER_PREFIX).
        """
        base = {"node_id": self.node_id, "hostname": os.uname().nodename, "gpu_ids": self.gpu_ids}
        problem = self._storage_problem(log_root, marker, nonce)
        if problem is not None and not env.get(BACKUP_ENV):
            return {**base, "ok": False, "kind": "storage", "error": problem}
        if problem is not None:  # no shared log_root here, but a backup target stands in for it
            from ..backup.remote import NodeBackup

            self.backup = NodeBackup(env)
            fetch_problem = self.backup.fetch()
            if fetch_problem is not None:
                return {**base, "ok": False, "kind": "backup", "error": fetch_problem}
        env = {k: v for k, v in env.items() if k not in (BACKUP_ENV, RESTORE_ENV)}  # not the trainer's business
        bad = self.unhealthy_gpus()
        if bad:
            return {**base, "ok": False, "kind": "gpu", "error": f"GPU {', '.join(bad)} unhealthy on this node"}
        try:
            wd = Path(cwd)
            wd.mkdir(parents=True, exist_ok=True)
            link = wd / "logs"
            if not (link.is_symlink() and os.readlink(link) == log_root):
                if link.is_symlink():
                    link.unlink()
                link.symlink_to(log_root, target_is_directory=True)
            own = Path(work_dir)
            own.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return {**base, "ok": False, "kind": "workdir",
                    "error": f"cannot prepare the trainer's workdir {cwd} on this node: {exc.strerror or exc}"}
        self.out_path, self.shim_path = own / "output.log", own / "shim.jsonl"
        full_env = dict(os.environ)
        full_env.update(env)
        if SHIM_EVENTS_ENV in env:
            full_env[SHIM_EVENTS_ENV] = str(self.shim_path)
        if self.gpu_ids:
            full_env["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpu_ids)
        if container:
            self.container = container
            _podman("rm", "--force", "--time", "0", container)
            argv = argv[:2] + [f"--device=nvidia.com/gpu={g}" for g in self.gpu_ids] + argv[2:]
        try:
            with open(self.out_path, "ab", buffering=0) as out:
                self.proc = subprocess.Popen(argv, cwd=cwd, env=full_env, stdin=subprocess.DEVNULL, stdout=out,
                                             stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
                                             preexec_fn=_die_with_parent)
        except OSError as exc:
            return {**base, "ok": False, "kind": "spawn", "error": f"cannot start {argv[0]}: {exc.strerror or exc}"}
        if owner:
            threading.Thread(target=self._fence, args=(Path(owner),), name="isaacd-fence", daemon=True).start()
        if self.backup is not None:
            self.backup.start(self.shim_path)
        return {**base, "ok": True, "pid": self.proc.pid, "backup_on_node": self.backup is not None}

    def _fence(self, owner: Path) -> None:
        """Stop the trainer once the job's owner file names another attempt. An unreadable file (the shared
        storage is away) says nothing: only another token is proof that the head moved on."""
        proc = self.proc
        while proc is not None and proc.poll() is None:
            time.sleep(FENCE_INTERVAL)
            try:
                current = owner.read_text().strip()
            except OSError:
                continue
            if current and current != self.token and proc.poll() is None:
                self.fenced = (f"attempt {current[:12]} owns job {self.job} now: this one was taken for lost "
                               "(its node cut off from the supervisor) and stopped itself")
                self.signal(signal.SIGKILL)
                return

    @staticmethod
    def _storage_problem(log_root: str, marker: str, nonce: str) -> str | None:
        try:
            seen = Path(marker).read_text().strip()
        except FileNotFoundError:
            return (f"log_root {log_root} is not shared with this node: the marker {marker} the supervisor wrote "
                    f"is missing here. Mount the same volume at {log_root} on every node (NFS and the like)")
        except OSError as exc:
            return f"cannot read the storage marker {marker} on this node: {exc.strerror or exc}"
        if seen != nonce:
            return (f"log_root {log_root} on this node is another volume than the supervisor's (the marker {marker} "
                    f"holds another value): mount the same shared volume at {log_root} on every node")
        return None

    # ---- observation --------------------------------------------------------------------
    def status(self, out_offset: int, shim_offset: int) -> dict[str, Any]:
        """The trainer's state and the output / shim events after the given offsets. Once it has ended, the
        exit is reported only with the last of its output (`more` is False)."""
        st: dict[str, Any] = {"node_id": self.node_id}
        rc = self.proc.poll() if self.proc is not None else None
        out, out_size = _read_from(self.out_path, out_offset) if self.out_path else (b"", 0)
        shim, shim_size = _read_from(self.shim_path, shim_offset) if self.shim_path else (b"", 0)
        st["out"], st["shim"] = out, shim
        st["more"] = out_offset + len(out) < out_size or shim_offset + len(shim) < shim_size
        st["unhealthy"] = self.unhealthy_gpus()
        st["fenced"] = self.fenced
        if self.proc is None:
            st["state"] = "none"
        elif rc is None:
            st["state"] = "running"
        else:
            st["state"] = "exited"
            st["code"], st["signal"] = (None, -rc) if rc < 0 else (rc, None)
            if self.container and 128 < rc <= 128 + 64:  # podman run: 128 + n for a container killed by signal n
                st["code"], st["signal"] = None, rc - 128
            if self.backup is not None and not self.backup.drained():
                st["more"] = True  # the last checkpoints are still going to the bucket: the exit is reported after
        if self.backup is not None:
            st["backup"] = dataclasses.asdict(self.backup.status())  # plain data across Ray
        return st

    def unhealthy_gpus(self) -> list[str]:
        """This actor's GPUs (Ray's ids) that `isaacd agent` on this node marked unhealthy (reset-class XID)."""
        if self.health_file is None:
            return []
        try:
            doc = json.loads(self.health_file.read_text())
        except (OSError, ValueError):
            return []
        bad = {str(k): v for k, v in (doc.get("unhealthy") or {}).items()}
        mine = self.gpu_ids or []
        return [f"{g} ({bad[g]})" for g in mine if g in bad]

    def pids(self) -> list[int]:
        if self.proc is None or self.proc.poll() is not None:
            return []
        if self.container:
            return self._container_pids()
        return process_tree(self.proc.pid)

    def _container_pids(self) -> list[int]:
        """The container's processes on this node: its main pid (podman inspect) and that pid's descendants."""
        out = _podman("container", "inspect", "--format", "{{.State.Pid}}", self.container or "")
        pid = int(out) if out and out.isdigit() else 0
        return process_tree(pid) if pid > 0 else []

    # ---- control ------------------------------------------------------------------------
    def signal(self, sig: int) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            return False
        if self.container:
            # every process of the trainer, as the podman runtime does (PID 1 may be a wrapper shell with no
            # handler); SIGKILL through podman, which also ends `podman run` with 137
            pids = self._container_pids() if sig != signal.SIGKILL else []
            signal_each(pids, sig)
            if pids:
                return True
            if _podman("kill", "--signal", signal.Signals(sig).name, self.container) is not None:
                return True
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            return False
        return True

    def ping(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "job": self.job, "token": self.token,
                "pid": self.proc.pid if self.proc else None}

    def __del__(self) -> None:  # a graceful actor exit: take the trainer's whole group along
        if self.proc is not None and self.proc.poll() is None:
            if self.container:
                _podman("rm", "--force", "--time", "0", self.container)
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
