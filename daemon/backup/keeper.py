"""What a job's runner holds for its backup target: the uploader thread, and the fetch of a checkpoint from the
bucket when a launch finds none on disk. Every call from the runner returns at once; network I/O happens on
this module's threads, and their news reaches the job's journal through `take_notes` on the runner's tick.

A launch that needs the bucket waits for the fetch (the job stays `starting`, saying so) instead of blocking the
supervisor. If the store stays unreachable for RESTORE_WAIT_SECONDS, the job starts without it (from scratch, as
it would without a backup target), with an event that says so: a dead store never holds training hostage.

Both the uploads and the fetch happen only under the prefix's lease (backup/lease.py): while another live
supervisor holds it, the fetch waits like for an unreachable store (a replacement host takes it over once it
expires, and resumes), and a manifest written for another experiment is never resumed from
(`backup_restore_refused`, naming both).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..observations.checkpoints import Checkpoint, CheckpointLayout
from ..config.backup import BackupConfig
from ..os_seam.oscalls import RunAs
from .fingerprint import describe, differences
from .lease import Identity, Lease
from .manifest import MANIFEST_KEY, Manifest, ManifestError
from .notes import Notes
from .objects import BackupError, ObjectStore
from .remote import node_env
from .restore import Restored, Validator, restore_newest
from .status import BackupStatus
from .uploader import Run, Uploader

RESTORE_WAIT_SECONDS = 300.0
RESTORE_RETRY_MAX = 30.0


@dataclass(frozen=True)
class Fetching:
    """The launch waits: the bucket's newest checkpoint is being fetched (or the store is being retried)."""

    reason: str


@dataclass
class _Fetch:
    bound: int | None
    experiment_dir: Path
    first_try: float = field(default_factory=time.time)
    tries: int = 0
    thread: threading.Thread | None = None
    result: Restored | None = None
    error: str | None = None
    retry_at: float = 0.0


class JobBackup:
    def __init__(self, cfg: BackupConfig, job: str, layout: CheckpointLayout, validator: Validator | None = None,
                 identity: Identity | None = None, fingerprint: dict[str, Any] | None = None,
                 owner: RunAs | None = None):
        """`identity`: who holds the prefix's lease (None: no lease, as in tools and older tests). `owner`: the job
        runs as this user (issue 32): a fetched checkpoint lands as theirs, and only their files are uploaded."""
        self.cfg = cfg
        self.owner = owner
        self.store = ObjectStore(cfg, job)
        self.notes = Notes()
        self.validator = validator
        self.fingerprint = fingerprint
        self.lease = Lease(self.store, identity, fingerprint, cfg.lease_seconds, self.notes) \
            if identity is not None else None
        self.uploader = Uploader(self.store, cfg, layout, self.notes, validator, self.lease, fingerprint,
                                 owner_uid=owner.uid if owner is not None else None)
        self._lock = threading.Lock()
        self._fetch: _Fetch | None = None
        self._last_restored: Restored | None = None

    # ---- uploads ----------------------------------------------------------------------------
    def set_runs(self, runs: list[Run]) -> None:
        self.uploader.set_runs(runs)
        self.uploader.start()  # the first call starts the thread (it loads the manifest: status after a restart)
        if self.lease is not None:
            self.lease.start()

    def takeover(self) -> str:
        """`isaacd backup takeover JOB`: take the prefix's lease at the next step, whoever holds it now."""
        if self.lease is None:
            return "no lease to take over"
        self.lease.takeover()
        self.lease.start()
        self.uploader.kick()
        f = self._fetch
        if f is not None:
            f.retry_at = 0.0  # a launch waiting for the lease tries again at once
        return f"taking over {self.store.url}: see `isaacd events {self.store.job}`"

    def kick(self) -> None:
        self.uploader.kick()

    def pin(self, iterations: frozenset[int]) -> None:
        """Keep these iterations' checkpoints in the bucket whatever `keep` says (the best evaluated one)."""
        self.uploader.set_pinned(iterations)

    def close(self, drain_seconds: float = 0.0) -> None:
        self.uploader.stop(drain_seconds)
        if self.lease is not None:
            self.lease.stop()  # not given up: it expires, and this machine takes it back at once (lease.py)

    # ---- the fetch a launch asks for ------------------------------------------------------------
    def restore(self, bound: int | None, experiment_dir: Path) -> Checkpoint | Fetching | None:
        """The bucket's newest verified checkpoint at or below `bound`, in place on disk; Fetching while that
        is under way; None when the bucket has none (or the store stayed away too long)."""
        last = self._last_restored
        if last is not None and (bound is None or last.entry.iteration <= bound) and \
                _unchanged(last.checkpoint):  # fetched for an earlier attempt that saved nothing newer
            return last.checkpoint
        with self._lock:
            f = self._fetch
            if f is None or f.bound != bound or f.experiment_dir != experiment_dir:
                f = self._fetch = _Fetch(bound, experiment_dir)
                self._start(f)  # its answer is collected by a later call: this one returns at once
                return Fetching(f"fetching the newest checkpoint from {self.store.url}")
            if f.thread is not None and f.thread.is_alive():
                return Fetching(f"fetching the newest checkpoint from {self.store.url}")
            if f.error is None:
                self._fetch = None
                if f.result is not None:
                    self._last_restored = f.result
                    return f.result.checkpoint
                return None
            if time.time() - f.first_try >= RESTORE_WAIT_SECONDS:
                self._fetch = None
                self.notes.add("backup_restore_gave_up", url=self.store.url, error=f.error,
                               waited_seconds=round(time.time() - f.first_try),
                               detail="the backup target stayed unreachable: starting without its checkpoints")
                return None
            if time.time() >= f.retry_at:
                self._start(f)
            if self.lease is not None and self.lease.other is not None:
                return Fetching(f"waiting for the prefix's lease: {f.error}")
            return Fetching(f"backup target unreachable ({f.error}); retrying")

    def _start(self, f: _Fetch) -> None:
        f.thread = threading.Thread(target=self._fetch_now, args=(f,), name=f"isaacd-restore-{self.store.job}",
                                    daemon=True)
        f.thread.start()

    def _fetch_now(self, f: _Fetch) -> None:
        t0 = time.monotonic()
        try:
            lease = self.lease
            if lease is not None and not lease.holds() and not lease.ensure():
                self._held_elsewhere(f, lease)
                return
            data = self.store.read_bytes(MANIFEST_KEY)
            try:
                manifest = Manifest.from_bytes(self.store.job, data) if data is not None else Manifest(self.store.job)
            except ManifestError as exc:
                self.notes.add("backup_manifest_unreadable", url=self.store.url, problem=str(exc),
                               detail="nothing can be restored from it")
                manifest = Manifest(self.store.job)
            diff = differences(self.fingerprint, manifest.fingerprint)
            if diff and manifest.entries:
                self.notes.add("backup_restore_refused", url=self.store.url, ours=describe(self.fingerprint),
                               theirs=describe(manifest.fingerprint), differs=sorted(diff),
                               detail="the bucket's checkpoints are another experiment's: never resumed from; "
                                      "starting without them")
                f.error, f.result = None, None
                return
            got = restore_newest(self.store, manifest, f.experiment_dir, f.bound, self.notes, self.validator,
                                 self.owner)
        except BackupError as exc:
            f.tries += 1
            f.error = str(exc)
            f.retry_at = time.time() + min(2.0 * 2 ** (f.tries - 1), RESTORE_RETRY_MAX)
            return
        except Exception as exc:  # noqa: BLE001 - a bug must not leave the launch waiting forever
            f.tries += 1
            f.error = f"{type(exc).__name__}: {exc}"
            f.retry_at = time.time() + RESTORE_RETRY_MAX
            return
        f.error, f.result = None, got
        if got is not None:
            e = got.entry
            self.notes.add("backup_restored", url=self.store.url, key=e.key, iteration=e.iteration,
                           path=str(got.checkpoint.path), bytes=e.size, sha256=e.sha256, downloaded=got.downloaded,
                           seconds=round(time.monotonic() - t0, 3),
                           detail="no usable checkpoint on disk: resuming from the backup target")
        elif manifest.entries:
            self.notes.add("backup_restore_none", url=self.store.url,
                           detail="no checkpoint in the bucket verified: starting from scratch")

    def _held_elsewhere(self, f: _Fetch, lease: Lease) -> None:
        """Another live supervisor holds the prefix: wait as for an unreachable store, and look again just after
        its lease would expire (a replacement host takes over then and resumes)."""
        f.tries += 1
        f.error = lease.refusal() or "the prefix's lease is held elsewhere"
        expires = (lease.other or {}).get("expires")
        wait = expires - time.time() + 0.5 if isinstance(expires, (int, float)) else RESTORE_RETRY_MAX
        f.retry_at = time.time() + max(0.5, min(wait, RESTORE_RETRY_MAX))

    def node_env(self, workflow: Any, resume: Checkpoint | None, token: str | None = None) -> dict[str, str]:
        """For a Ray attempt: the target, and the bucket checkpoint it resumes from (if it does), so a node
        without the shared log_root can fetch it and upload what the run writes (backup/remote.py). The node
        writes for this supervisor: the lease names the attempt's `token` as its delegate (one writer)."""
        last = self._last_restored
        restore = (last.entry, last.checkpoint.path) if last is not None and resume is not None and \
            resume.path == last.checkpoint.path else None
        writer = None
        if self.lease is not None and token is not None:
            self.lease.set_delegate(token)
            self.lease.start()
            writer = {"instance": self.lease.me.instance, "token": token}
        return node_env(self.cfg, self.store.job, workflow.library, getattr(workflow, "rollouts", None),
                        resume.iteration if resume is not None else 0, restore, writer, self.fingerprint)

    # ---- the read side -------------------------------------------------------------------------
    def take_notes(self) -> list[tuple[str, dict[str, Any]]]:
        return self.notes.take()

    def status(self) -> BackupStatus:
        f = self._fetch
        return replace(self.uploader.status(), restoring=None if f is None else (f.error or "fetching"))


def close_all(keepers: list[JobBackup], drain_seconds: float) -> None:
    """Supervisor shutdown: one last upload pass for every job at once (the checkpoints the stops just saved),
    all within `drain_seconds`; a store that does not answer by then is left behind, not waited for."""
    for k in keepers:
        k.uploader.stop(0.0)
    deadline = time.monotonic() + drain_seconds
    for k in keepers:
        k.uploader.stop(max(0.0, deadline - time.monotonic()))


def _unchanged(c: Checkpoint) -> bool:
    try:
        st = c.path.stat()
    except OSError:
        return False
    return st.st_size == c.size and abs(st.st_mtime - c.mtime) < 1e-3


__all__ = ["JobBackup", "Fetching", "Run", "BackupError", "RESTORE_WAIT_SECONDS", "close_all"]
