"""The backup on a Ray node that does not share the job's log_root with the supervisor (runtime = "ray").

Without shared storage the supervisor on the head never sees the node's files, so the node does two things itself
(its TrainerActor runs this module; the supervisor hands over what it needs in two environment variables):
- before the trainer starts, it fetches the checkpoint the supervisor chose from the bucket (`RESTORE_ENV`: key,
  sha256, size and the path the trainer's flags name), verifies the sha256 and puts it at that path;
- while the trainer runs, an Uploader (the same code as the supervisor's) copies the run's checkpoints to the
  bucket; the run dir comes from the shim's side channel on the node. It writes for the head's supervisor, the
  prefix's one writer (issue 28): only while the lease names that supervisor's instance and this attempt's token
  (`writer` in BACKUP_ENV; lease.DelegateGate), so a node of an earlier attempt still draining never writes. After the trainer exits, one last pass,
  before the actor reports the exit (the supervisor kills the actor right after).
A node that does see the log_root (the marker check passes) does neither: the supervisor's own uploader does.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from ..observations.checkpoints import RSL_RL_LAYOUT, CheckpointLayout
from ..config.backup import BackupConfig
from .lease import DelegateGate
from .manifest import Entry
from .notes import Notes
from .objects import BackupError, ObjectStore
from .status import BackupStatus
from .uploader import Run, Uploader, sha256_of

BACKUP_ENV = "ISAACD_BACKUP"  # {"config": {...}, "job", "library", "rollouts", "offset", "writer", "fingerprint"}
RESTORE_ENV = "ISAACD_BACKUP_RESTORE"  # {"key", "sha256", "size", "mtime", "iteration", "path"}
DRAIN_SECONDS = 60.0  # the last pass after the trainer exits


def node_env(cfg: BackupConfig, job: str, library: str, rollouts: int | None, offset: int,
             restore: tuple[Entry, Path] | None, writer: dict[str, str] | None = None,
             fingerprint: dict[str, Any] | None = None) -> dict[str, str]:
    """What the supervisor puts into a Ray attempt's environment for its node. `writer`: the head's lease
    instance and the attempt's token (lease.DelegateGate)."""
    env = {BACKUP_ENV: json.dumps({"config": cfg.model_dump(), "job": job, "library": library,
                                   "rollouts": rollouts, "offset": offset, "writer": writer,
                                   "fingerprint": fingerprint})}
    if restore is not None:
        e, path = restore
        env[RESTORE_ENV] = json.dumps({"key": e.key, "sha256": e.sha256, "size": e.size, "mtime": e.mtime,
                                       "iteration": e.iteration, "path": str(path)})
    return env


def layout_for(library: str, rollouts: int | None) -> CheckpointLayout:
    """The workflow's checkpoint layout, rebuilt on the node from its name (and skrl's rollouts)."""
    if library == "rl_games":
        from ..workflows.rl_games import RL_GAMES_LAYOUT

        return RL_GAMES_LAYOUT
    if library == "skrl":
        from ..workflows.skrl import AGENT_CHECKPOINT_RE, run_rollouts

        per = rollouts or 1
        return CheckpointLayout("checkpoints", AGENT_CHECKPOINT_RE,
                                count=lambda run, t, off: off + t // (run_rollouts(run) or per))
    return RSL_RL_LAYOUT


class NodeBackup:
    def __init__(self, env: dict[str, str]):
        spec = json.loads(env[BACKUP_ENV])
        self.cfg = BackupConfig.model_validate(spec["config"])
        self.store = ObjectStore(self.cfg, spec["job"])
        self.offset = int(spec.get("offset") or 0)
        self.restore_spec = json.loads(env[RESTORE_ENV]) if env.get(RESTORE_ENV) else None
        self.notes = Notes()
        from ..workflows.validate import VALIDATOR

        library = spec.get("library") or "rsl_rl"
        writer = spec.get("writer") or None
        gate = DelegateGate(self.store, writer["instance"], writer["token"]) if writer else None
        self.uploader = Uploader(self.store, self.cfg, layout_for(library, spec.get("rollouts")), self.notes,
                                 lambda c: VALIDATOR.problem(c, None, library), gate, spec.get("fingerprint"))
        self._drain: threading.Thread | None = None
        self._shim: Any = None  # the shim's side channel on this node: the run dir to upload from
        self._shim_lock = threading.Lock()

    def fetch(self) -> str | None:
        """Put the chosen checkpoint at its path on this node; None when it is there, else why not."""
        r = self.restore_spec
        if r is None:
            return None
        dest = Path(r["path"])
        try:
            if dest.exists() and dest.stat().st_size == r["size"] and sha256_of(dest) == r["sha256"]:
                return None
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(f".{dest.name}.isaacd-restore-{os.getpid()}")
            try:
                self.store.get_file(r["key"], tmp)
                digest = sha256_of(tmp)
                if digest != r["sha256"]:
                    return (f"the bucket's {r['key']} hashes to {digest[:16]}..., not {r['sha256'][:16]}... as the "
                            "manifest says (damaged or replaced since the supervisor checked it)")
                os.replace(tmp, dest)
                os.utime(dest, (r["mtime"], r["mtime"]))
            finally:
                tmp.unlink(missing_ok=True)
        except (BackupError, FileNotFoundError, OSError) as exc:
            return f"cannot fetch {self.store.url}/{r['key']} to {dest} on this node: {exc}"
        return None

    def start(self, shim_path: Path) -> None:
        """Upload the run's checkpoints while the trainer runs (the run dir as the shim reports it here)."""
        from ..observations.shim_events import ShimEvents

        self._shim = ShimEvents(shim_path)

        def follow() -> None:
            while not self.uploader.stopping:
                self._follow_shim()
                time.sleep(1.0)
        threading.Thread(target=follow, name="isaacd-node-backup-runs", daemon=True).start()
        self.uploader.start()

    def _follow_shim(self) -> None:
        with self._shim_lock:
            if self._shim is not None:
                self._shim.poll()
                if self._shim.report.run_dir:
                    self.uploader.set_runs([Run(Path(self._shim.report.run_dir), self.offset)])

    def drained(self) -> bool:
        """Called once the trainer has exited: starts the last pass, True once it is done (or timed out)."""
        if self._drain is None:
            self._follow_shim()  # a short run: its run dir may be news
            self._drain = threading.Thread(target=self.uploader.stop, args=(DRAIN_SECONDS,), daemon=True)
            self._drain.start()
        return not self._drain.is_alive()

    def status(self) -> BackupStatus:
        return self.uploader.status()

