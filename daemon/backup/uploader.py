"""The uploader: one background thread per job copies its complete checkpoints to the bucket, soon after they
appear, and never on the supervisor's tick.

Every pass (every SCAN_INTERVAL, at once when the shim reports a new checkpoint) it lists the run dirs on the
job's current timeline (the runner hands them over: the same walk as the resume choice) and uploads, oldest
first, what the bucket lacks:
- every trainer checkpoint (model_N.pt, rl_games' nn/last_*.pth, skrl's checkpoints/agent_*.pt);
- the newest isaacd snapshot, at most once per `snapshot_min_seconds` (the shim may write one per iteration);
- with `keep` = N, only what would be among the newest N anyway (a store back after an outage gets the newest
  checkpoints, not a backlog it would delete again).
A checkpoint is copied only when it is complete (a zip whose central directory and CRCs check out) and passes
the same deep validation as the resume choice (loadable by this job's trainer, finite tensors, `iter` as named),
and only if the file did not change while it was read. After the object, the manifest: read, added to and
written back only if it did not change meanwhile (issue 28), so an entry of this writer is never dropped.

Only while this supervisor holds the prefix's lease (backup/lease.py): while another live supervisor holds it,
nothing is uploaded and `blocked` says who holds it and the fix. A manifest written for another experiment
(backup/fingerprint.py) is never added to: `blocked` says so too.

A store that fails (unreachable, refusing writes, no credentials) costs only this thread: the error is kept for
`isaacd status`, counted, and the pass retried with exponential backoff; the next good pass catches up.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..daemon_log import log
from ..observations.checkpoints import SNAPSHOT_PREFIX, Checkpoint, CheckpointLayout, checkpoint_problem, list_checkpoints
from ..config.backup import BackupConfig
from .fingerprint import describe, differences
from .lease import WriterGate
from .manifest import MANIFEST_KEY, Entry, Manifest, ManifestError
from .notes import Notes
from .objects import BackupError, Conflict, ObjectStore
from .status import BackupStatus, BackupUpload

SCAN_INTERVAL = 2.0  # s between passes when nothing kicks the uploader
BACKOFF_INITIAL = 2.0  # s before the first retry after a failed pass
BACKOFF_MAX = 300.0
MANIFEST_REREAD = 30.0  # s; see one_pass
MAX_RUNS = 4  # the newest run dirs of the timeline looked at (older ones were uploaded or are superseded)
HASH_CHUNK = 4 * 2**20
COMMIT_TRIES = 3  # a manifest write that lost a race is read and applied again this many times


class Blocked(BackupError):
    """Not this supervisor's prefix to write (another holds the lease, or it holds another experiment)."""

Validator = Callable[[Checkpoint], "str | None"]


@dataclass(frozen=True)
class Run:
    """A run dir on the job's timeline: checkpoints count from `offset`, and only those up to `bound` count."""

    path: Path
    offset: int = 0
    bound: int | None = None


def _owners_file(path: Path, uid: int) -> tuple[int | None, str | None]:
    """(an open descriptor of the checkpoint, None) when it is a regular file of `uid`'s, else (None, why not).
    Raises FileNotFoundError when it is gone."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return None, "a symlink in the owner's run dir"
        return None, f"cannot open: {exc.strerror or exc}"
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != uid:
        os.close(fd)
        return None, f"not a file of the job's owner (uid {st.st_uid}, the owner's is {uid})"
    return fd, None


def _close(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def is_snapshot(path: Path) -> bool:
    return path.name.startswith(SNAPSHOT_PREFIX)


class Uploader:
    def __init__(self, store: ObjectStore, cfg: BackupConfig, layout: CheckpointLayout, notes: Notes,
                 validator: Validator | None = None, lease: WriterGate | None = None,
                 fingerprint: dict[str, Any] | None = None, owner_uid: int | None = None):
        self.store, self.cfg, self.layout, self.notes, self.validator = store, cfg, layout, notes, validator
        # the job runs as this uid (issue 32): its run dirs are the owner's, who could put a symlink at a checkpoint's
        # name (to a root file, to another user's run): only a regular file of the owner's own is uploaded
        self.owner_uid = owner_uid
        self.lease = lease  # None: unguarded (tests, tools)
        self.fingerprint = fingerprint
        self.blocked: str | None = None  # why this supervisor may not write the prefix now
        self._mine: dict[str, Entry] = {}  # entries this writer put in the manifest (never dropped by a rewrite)
        self.log = log.bind(job=store.job, backup=store.url)
        self.manifest: Manifest | None = None
        self._runs: list[Run] = []
        # iterations kept in the bucket whatever `keep` says: the job's best evaluated checkpoint (issue 41)
        self._pinned: frozenset[int] = frozenset()
        self._lock = threading.Lock()
        self._pass_lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._rejected: set[tuple[str, int, int]] = set()
        self._last_snapshot_mono = float("-inf")
        self._manifest_read_mono = float("-inf")
        self._failed_passes = 0
        # what `isaacd status` and /metrics show; written by the thread, read (as values) by status()
        self.error: str | None = None
        self.error_since: float | None = None
        self.retry_at: float | None = None  # unix time of the next try while failing
        self.failures_total = 0
        self.bytes_total = 0
        self.uploads_total = 0
        self.lag_iterations: int | None = None
        self.newest_local: int | None = None

    # ---- the runner's side (main thread; never waits) ------------------------------------
    def set_runs(self, runs: list[Run]) -> None:
        with self._lock:
            if runs == self._runs:
                return
            self._runs = list(runs)
        self._wake.set()

    def set_pinned(self, iterations: frozenset[int]) -> None:
        """Checkpoints at these iterations are uploaded even when older than the newest `keep`, and never pruned
        (the job's best evaluated checkpoint); the previous pin is pruned as `keep` says at the next upload."""
        with self._lock:
            if iterations == self._pinned:
                return
            self._pinned = frozenset(iterations)
        self._wake.set()

    def kick(self) -> None:
        """A checkpoint just landed: look now rather than at the next interval (not while backing off)."""
        self._wake.set()

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=f"isaacd-backup-{self.store.job}", daemon=True)
            self._thread.start()

    def stop(self, drain_seconds: float = 0.0) -> None:
        """One last pass (the checkpoint a stop just saved), bounded by `drain_seconds`; then the thread ends."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(drain_seconds)

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def status(self) -> BackupStatus:
        m = self.manifest
        last = m.newest() if m is not None else None
        return BackupStatus(
            url=self.store.url,
            last_upload=None if last is None else BackupUpload(iteration=last.iteration, time=last.time,
                                                               key=last.key, size=last.size),
            lag_iterations=self.lag_iterations,
            error=self.error,
            error_since=self.error_since,
            retry_at=self.retry_at,
            failures_total=self.failures_total,
            bytes_total=self.bytes_total,
            uploads_total=self.uploads_total,
            blocked=self.blocked,
            lease=self.lease.status() if self.lease is not None else None,
        )

    # ---- the thread ------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            wait = SCAN_INTERVAL if self.retry_at is None else max(0.0, self.retry_at - time.time())
            self._wake.wait(wait)
            self._wake.clear()
            if self.retry_at is not None and time.time() < self.retry_at and not self._stopping.is_set():
                continue  # kicked while backing off: a failing store is not hammered at checkpoint rate
            self.one_pass()
            if self._stopping.is_set():
                return

    def one_pass(self) -> None:
        """Load the manifest if needed, upload what is missing; a store failure is recorded, never raised."""
        with self._pass_lock:  # the thread's pass and a caller's (tests, the shutdown drain) never overlap
            self._one_pass()

    def _one_pass(self) -> None:
        try:
            if self.lease is not None and not self.lease.holds() and not self.lease.ensure():
                raise Blocked(self.lease.refusal() or f"{self.store.url}: the lease is not held yet")
            if self.manifest is None or (self.newest_local is None and
                                         time.monotonic() - self._manifest_read_mono >= MANIFEST_REREAD):
                # nothing here to upload (a Ray job whose node uploads without the shared log_root): the bucket's
                # manifest is what status shows, so read it again now and then
                self.manifest = self._load_manifest()
                self._manifest_read_mono = time.monotonic()
            for ckpt, run in self._candidates(self.manifest):
                self._upload(ckpt, run, self.manifest)
        except Blocked as exc:  # not a failing store: no backoff, looked at again next pass
            self.blocked = str(exc)
            return
        except BackupError as exc:
            self._failed(str(exc))
            return
        except Exception as exc:  # noqa: BLE001 - a bug here must not end the thread: say it and retry
            self.log.exception("backup_pass_crashed")
            self._failed(f"{type(exc).__name__}: {exc}")
            return
        if self.error is not None:
            self.notes.add("backup_recovered", url=self.store.url, failed_for_seconds=round(time.time() -
                           (self.error_since or time.time()), 1), last_iteration=self._uploaded_iteration(),
                           detail="uploads caught up")
        self.blocked = None
        self.error = self.error_since = self.retry_at = None
        self._failed_passes = 0

    def _failed(self, error: str) -> None:
        self._failed_passes += 1
        self.failures_total += 1
        delay = min(BACKOFF_INITIAL * 2 ** (self._failed_passes - 1), BACKOFF_MAX) * random.uniform(0.8, 1.2)
        self.retry_at = time.time() + delay
        if error != self.error:  # once per distinct error, not once per retry
            self.notes.add("backup_failed", url=self.store.url, error=error, retry_in_seconds=round(delay, 1),
                           detail="training goes on; isaacd retries with backoff and catches up")
        if self.error is None:
            self.error_since = time.time()
        self.error = error

    def _load_manifest(self) -> Manifest:
        return self._parse_manifest(self.store.read_bytes(MANIFEST_KEY))

    def _parse_manifest(self, data: bytes | None) -> Manifest:
        if data is None:
            return Manifest(self.store.job)
        try:
            m = Manifest.from_bytes(self.store.job, data)
        except ManifestError as exc:
            # never overwrite what we cannot read: keep it beside, start a new one
            aside = f"{MANIFEST_KEY}.unreadable-{int(time.time())}"
            self.store.write_bytes(aside, data)
            self.notes.add("backup_manifest_unreadable", url=self.store.url, problem=str(exc), kept_as=aside,
                           detail="a new manifest is started; the objects it named stay in the bucket")
            return Manifest(self.store.job)
        diff = differences(self.fingerprint, m.fingerprint)
        if diff:  # never mixed into, never rewritten: another experiment's index of its objects
            raise Blocked(f"{self.store.url} holds the checkpoints of another experiment ({describe(m.fingerprint)}"
                          f"; this job: {describe(self.fingerprint)}; differs in {', '.join(diff)}): nothing is "
                          "uploaded there. Fix: give this job another name or [jobs.backup] url, or move that "
                          "prefix's manifest.json away to start a new one there")
        return m

    def _commit(self, entry: Entry) -> list[Entry]:
        """Add `entry` to the bucket's manifest: read it, apply, write it back only if unchanged meanwhile
        (objects.write_if); a lost race is read and applied again. Returns the entries it displaced."""
        for _ in range(COMMIT_TRIES):
            if self.lease is not None and not self.lease.holds() and not self.lease.ensure():
                raise Blocked(self.lease.refusal() or f"{self.store.url}: the lease lapsed")
            got = self.store.read_tagged(MANIFEST_KEY)
            fresh = self._parse_manifest(None if got is None else got[0])
            for e in self._mine.values():  # ours, dropped by someone else's rewrite: put back
                if fresh.get(e.key) is None:
                    fresh.entries.append(e)
            with self._lock:
                pinned = self._pinned
            gone = fresh.add(entry) + fresh.prune(self.cfg.keep, pinned)
            fresh.fingerprint = self.fingerprint or fresh.fingerprint
            try:
                self.store.write_if(MANIFEST_KEY, fresh.to_bytes(), None if got is None else got[1])
            except Conflict:
                continue
            for g in gone:
                self._mine.pop(g.key, None)
            self._mine[entry.key] = entry
            self.manifest = fresh
            return gone
        raise BackupError(f"{self.store.url}/{MANIFEST_KEY} changed under every one of {COMMIT_TRIES} writes: "
                          "is another writer using this prefix?")

    def _uploaded_iteration(self) -> int | None:
        m = self.manifest
        return max((e.iteration for e in m.entries), default=None) if m is not None else None

    # ---- what to upload --------------------------------------------------------------------
    def _candidates(self, manifest: Manifest) -> list[tuple[Checkpoint, Run]]:
        with self._lock:
            runs = self._runs[:MAX_RUNS]
            pinned = self._pinned
        found: list[tuple[Checkpoint, Run]] = []
        for run in runs:
            for c in list_checkpoints(run.path, self.layout, run.offset):
                if run.bound is None or c.iteration <= run.bound:
                    found.append((c, run))
        complete = [(c, r) for c, r in found if checkpoint_problem(c.path) is None]
        self.newest_local = max((c.iteration for c, _ in complete), default=None)
        todo = [(c, r) for c, r in complete if not self._in_bucket(c, r, manifest)
                and self._rejected_key(c) not in self._rejected]
        trainer = [(c, r) for c, r in todo if not is_snapshot(c.path)]
        top = max([e.iteration for e in manifest.entries] + [c.iteration for c, _ in trainer], default=-1)
        snaps = sorted(((c, r) for c, r in todo if is_snapshot(c.path)), key=lambda x: x[0].iteration)
        if snaps and snaps[-1][0].iteration > top and \
                time.monotonic() - self._last_snapshot_mono >= self.cfg.snapshot_min_seconds:
            trainer.append(snaps[-1])
        if self.cfg.keep:
            iters = sorted({e.iteration for e in manifest.entries} | {c.iteration for c, _ in trainer}, reverse=True)
            floor = iters[min(self.cfg.keep, len(iters)) - 1] if iters else -1
            trainer = [(c, r) for c, r in trainer
                       if c.iteration >= floor or (c.iteration in pinned and not is_snapshot(c.path))]
        self._update_lag(manifest)
        return sorted(trainer, key=lambda x: (x[0].iteration, is_snapshot(x[0].path)))

    def _update_lag(self, manifest: Manifest) -> None:
        up = max((e.iteration for e in manifest.entries), default=None)
        if self.newest_local is None:
            self.lag_iterations = None if up is None else 0
        else:
            self.lag_iterations = max(self.newest_local - (up if up is not None else -1), 0)

    @staticmethod
    def _key(c: Checkpoint, run: Run) -> tuple[str, str]:
        return run.path.name, c.path.relative_to(run.path).as_posix()

    def _in_bucket(self, c: Checkpoint, run: Run, manifest: Manifest) -> bool:
        name, rel = self._key(c, run)
        e = manifest.get(f"{name}/{rel}")
        return e is not None and e.size == c.size and abs(e.mtime - c.mtime) < 1e-3

    @staticmethod
    def _rejected_key(c: Checkpoint) -> tuple[str, int, int]:
        return str(c.path), c.size, int(c.mtime * 1e6)

    # ---- one upload --------------------------------------------------------------------------
    def _upload(self, c: Checkpoint, run: Run, manifest: Manifest) -> None:
        if self.lease is not None and not self.lease.holds():  # lost mid-pass: not even the object
            raise Blocked(self.lease.refusal() or f"{self.store.url}: the lease lapsed")
        problem = self.validator(c) if self.validator is not None else None
        if problem is not None and not c.path.exists():
            return  # the shim pruned an old snapshot meanwhile: nothing wrong with it
        if problem is not None:
            self._rejected.add(self._rejected_key(c))
            self.notes.add("backup_skipped", path=str(c.path), iteration=c.iteration, problem=problem,
                           detail="not copied to the backup target: the resume choice would not use it either")
            return
        source, fd = c.path, None
        try:
            if self.owner_uid is not None:
                fd, refusal = _owners_file(c.path, self.owner_uid)
                if refusal is not None:
                    self._rejected.add(self._rejected_key(c))
                    self.notes.add("backup_skipped", path=str(c.path), iteration=c.iteration, problem=refusal,
                                   detail="not copied to the backup target: isaacd uploads only the owner's own files")
                    return
                source = Path(f"/proc/self/fd/{fd}")  # read through the descriptor checked, whatever the name says
            before = os.stat(source)
            digest = sha256_of(source)
        except FileNotFoundError:
            _close(fd)
            return  # the shim pruned an old snapshot meanwhile
        name, rel = self._key(c, run)
        key = f"{name}/{rel}"
        t0 = time.monotonic()
        try:
            version = self.store.put_file(source, key)
        finally:
            _close(fd)
        try:
            after = os.stat(c.path)
        except FileNotFoundError:
            after = None
        if after is None or (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
            self.log.info("backup_source_changed", path=str(c.path), detail="re-saved while uploading; next pass")
            return  # no manifest entry names those bytes; the next pass uploads the new file
        entry = Entry(run=name, file=rel, iteration=c.iteration, sha256=digest, size=before.st_size,
                      time=time.time(), mtime=before.st_mtime, version_id=version)
        gone = self._commit(entry)  # on failure the bucket's manifest lacks it, and so does self.manifest
        assert self.manifest is not None
        manifest = self.manifest
        if is_snapshot(c.path):
            self._last_snapshot_mono = time.monotonic()
        self.uploads_total += 1
        self.bytes_total += entry.size
        self._update_lag(manifest)
        self.log.info("backup_uploaded", key=key, iteration=c.iteration, bytes=entry.size,
                      seconds=round(time.monotonic() - t0, 3), version_id=version)
        for g in gone:
            if g.key != key and manifest.get(g.key) is None:
                try:
                    self.store.delete(g.key)
                except BackupError as exc:  # an extra object costs space, not correctness
                    self.log.warning("backup_delete_failed", key=g.key, error=str(exc))
