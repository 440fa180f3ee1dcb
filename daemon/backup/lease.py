"""One writer per bucket prefix (issue 28): `<url>/<job>/lease.json` names the supervisor that may upload to
the prefix and resume from it.

The lease names its holder (the host's machine-id, the supervisor's state dir, its instance id, host name and
pid), the job's fingerprint (backup/fingerprint.py), a heartbeat time and an expiry. The holder renews it every
third of `lease_seconds`. Another supervisor that finds a live lease of someone else neither uploads nor
resumes from the prefix: `status` and `doctor` name the holder and the fix.

- **Taken and renewed with conditional writes** (objects.write_if): S3's `If-None-Match: *` to create it and
  `If-Match: <ETag of the copy read>` to replace it; on a filesystem an exclusive create (link(2)) and a
  compare + rename under a lock file. Two supervisors deciding at once: one write wins, the other reads again.
  The lease is read back after each write, and held only if the copy read back is this supervisor's: a store
  that ignores the headers (`isaacd doctor` says so), or whose check-then-write races under load (SeaweedFS,
  measured), makes the conditional write best-effort, and the read-back (then the next renewal) settles it.
  docs/backup.md lists what each store does.
- **A lost host can be replaced.** The same machine (machine-id and state dir) takes its lease back at once:
  a new disk, a reinstall. Another machine takes it over once it has expired (the holder stopped renewing:
  dead, frozen, cut off), or at once when an operator says so (`isaacd backup takeover JOB`); the old holder
  sees that at its next renewal and stops writing. Each takeover is an event.
- Expiry is judged on the reader's wall clock against the time the holder wrote: hosts sharing a prefix need
  clocks within a small part of `lease_seconds` of each other (NTP).

The decision is `decide` (pure); `Lease` does the I/O around it on the uploader's threads, never on the tick.

The identity: /etc/machine-id (systemd's per-installation id), or `ISAACD_MACHINE_ID` where that is set (two
supervisors on one machine that must count as two hosts, a container without /etc/machine-id).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any, Mapping, Protocol

from ..daemon_log import log
from .fingerprint import Fingerprint, describe
from .notes import Notes
from .status import BackupLease
from .objects import BackupError, Conflict, ObjectStore

LEASE_KEY = "lease.json"
FORMAT = 1
MACHINE_ID_ENV = "ISAACD_MACHINE_ID"
MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")
INSTANCE = uuid.uuid4().hex[:12]  # this supervisor process; a restart is a new instance
FIX = ("give this job another name, or its [jobs.backup] another url, so each host has its own prefix; if that "
       "host is gone for good, `isaacd backup takeover {job}` (or wait until its lease expires)")


class WriterGate(Protocol):
    """What the uploader asks before it writes the prefix: `Lease` (a supervisor) or `DelegateGate` (a Ray node)."""

    def holds(self, now: float | None = None) -> bool: ...

    def ensure(self) -> bool: ...

    def refusal(self) -> str | None: ...

    def status(self) -> BackupLease: ...


def machine_id() -> str:
    """This host's identity: $ISAACD_MACHINE_ID, else /etc/machine-id, else the host name."""
    env = os.environ.get(MACHINE_ID_ENV, "").strip()
    if env:
        return env
    for path in MACHINE_ID_FILES:
        try:
            text = open(path).read().strip()
        except OSError:
            continue
        if text:
            return text
    return f"host:{socket.gethostname()}"


@dataclass(frozen=True)
class Identity:
    """Who writes: the same machine_id and state_dir is the same supervisor, whichever instance of it."""

    machine_id: str
    state_dir: str
    instance: str = INSTANCE
    host: str = ""
    pid: int = 0

    @classmethod
    def here(cls, state_dir: Any) -> "Identity":
        return cls(machine_id(), str(state_dir), INSTANCE, socket.gethostname(), os.getpid())


class Verdict(str, Enum):
    TAKE = "take"  # no lease: create it
    RENEW = "renew"  # ours (this instance)
    RETAKE = "retake"  # this machine and state dir, an earlier instance (restarted, new disk): at once
    EXPIRED = "expired"  # another holder stopped renewing: take it over
    FORCE = "force"  # another live holder, and the operator said take it over
    REFUSE = "refuse"  # another live holder


def decide(doc: Mapping[str, Any] | None, now: float, me: Identity, force: bool = False) -> Verdict:
    """What to do about the lease `doc` (None: there is none) at wall time `now`. Pure."""
    if doc is None:
        return Verdict.TAKE
    h = doc.get("holder") if isinstance(doc.get("holder"), Mapping) else {}
    if h.get("instance") == me.instance and h.get("machine_id") == me.machine_id:
        return Verdict.RENEW
    if h.get("machine_id") == me.machine_id and h.get("state_dir") == me.state_dir:
        return Verdict.RETAKE
    expires = doc.get("expires")
    if isinstance(expires, bool) or not isinstance(expires, (int, float)) or now >= expires:
        return Verdict.EXPIRED  # (an unreadable lease counts as expired: nobody can be shown to hold it)
    return Verdict.FORCE if force else Verdict.REFUSE


def holder_text(doc: Mapping[str, Any] | None, now: float) -> str:
    """'host gpu-7 (machine-id 3f2a..., state dir /var/lib/isaacd, pid 812), heartbeat 4s ago, expires in 116s'"""
    if not doc:
        return "nobody"
    h = doc.get("holder") or {}
    mid = str(h.get("machine_id") or "?")
    parts = [f"host {h.get('host') or '?'} (machine-id {mid[:12]}{'...' if len(mid) > 12 else ''}, state dir "
             f"{h.get('state_dir')}, pid {h.get('pid')})"]
    if isinstance(doc.get("heartbeat"), (int, float)):
        parts.append(f"heartbeat {max(0, round(now - doc['heartbeat']))}s ago")
    if isinstance(doc.get("expires"), (int, float)):
        left = doc["expires"] - now
        parts.append(f"expires in {round(left)}s" if left > 0 else f"expired {round(-left)}s ago")
    return ", ".join(parts)


def parse(data: bytes | None) -> dict[str, Any] | None:
    if data is None:
        return None
    try:
        doc = json.loads(data)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


class Lease:
    """This supervisor's side of one prefix's lease. `ensure` does one read-decide-write (network: call it off
    the tick); `holds` answers from memory; `start` renews on a thread of its own, so an upload that takes longer
    than the lease never lets it lapse."""

    def __init__(self, store: ObjectStore, me: Identity, fingerprint: Fingerprint | None, seconds: float,
                 notes: Notes):
        self.store, self.me, self.fingerprint, self.seconds, self.notes = store, me, fingerprint, seconds, notes
        self.log = log.bind(job=store.job, backup=store.url)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.held_until: float | None = None  # wall time our last write said it expires
        self.taken_at: float | None = None
        self.other: dict[str, Any] | None = None  # the live holder that keeps us out
        self.conditional: bool | None = None  # None: not known yet; False: the store ignored / refused the headers
        self.error: str | None = None
        self.force = False
        self.delegate: str | None = None  # the Ray attempt token that writes for us (backup/remote.py)
        self._refused_said: str | None = None

    # ---- read side -----------------------------------------------------------------------------
    def holds(self, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        # a margin: stop writing a little before the expiry others judge us by
        return self.held_until is not None and now < self.held_until - min(2.0, self.seconds * 0.1)

    def refusal(self) -> str | None:
        if self.other is None:
            return None
        return (f"{self.store.url} is held by another supervisor: {holder_text(self.other, time.time())}; it "
                f"neither uploads nor resumes from there. Fix: {FIX.format(job=self.store.job)}")

    def status(self) -> BackupLease:
        other = self.other
        return BackupLease(state="held" if self.holds() else "refused" if other is not None else
                           "error" if self.error else "none",
                           holder=None if other is None else holder_text(other, time.time()),
                           expires=self.held_until if other is None else other.get("expires"),
                           conditional=self.conditional, fix=None if other is None else FIX.format(job=self.store.job))

    # ---- one step ------------------------------------------------------------------------------
    def ensure(self) -> bool:
        """Read the lease, decide, and take or renew it if that is the decision. True: we hold it now.
        BackupError (store unreachable) propagates: the caller's backoff handles it."""
        with self._lock:
            try:
                return self._ensure()
            except Conflict:
                return self.holds()  # another writer won this round: the next step reads what it wrote
            except BackupError as exc:
                self.error = str(exc)
                raise

    def _ensure(self) -> bool:
        got = self.store.read_tagged(LEASE_KEY)
        data, tag = (None, None) if got is None else got
        doc = parse(data)
        now = time.time()
        verdict = decide(doc, now, self.me, self.force)
        if verdict is Verdict.REFUSE:
            assert doc is not None
            if self.held_until is not None:  # it was ours: taken over (by an operator, or we were frozen)
                self.notes.add("backup_lease_lost", url=self.store.url, holder=holder_text(doc, now),
                               detail="another supervisor holds the prefix now: uploads stop here")
                self.held_until = None
            self.other = doc
            key = str((doc.get("holder") or {}).get("instance"))
            if self._refused_said != key:
                self._refused_said = key
                self.notes.add("backup_lease_refused", url=self.store.url, holder=holder_text(doc, now),
                               theirs=describe(doc.get("fingerprint")), fix=FIX.format(job=self.store.job),
                               detail="neither uploading to nor resuming from a prefix another supervisor holds")
            return False
        new = self._doc(now, doc if verdict is Verdict.RENEW else None, doc)
        body = (json.dumps(new, indent=1, sort_keys=True) + "\n").encode()
        self.store.write_if(LEASE_KEY, body, tag if doc is not None else None)
        if self.store.conditional:
            self.conditional = True
        else:
            if self.conditional is not False:
                self.notes.add("backup_lease_unconditional", url=self.store.url,
                               detail="the store cannot do conditional writes: the lease is written, then read back "
                                      "(two hosts writing it in the same moment could both believe they hold it)")
            self.conditional = False
        # Read back after every write, conditional or not: a store's compare-and-swap is only as good as its
        # locking, and SeaweedFS 4.48 let 2 of 6 racing If-Match writes through on a loaded 2-core host (measured:
        # docs/backup.md). A racer whose write was overwritten sees the other's copy here and does not hold the
        # lease; one that read back before the other's write landed finds out at its next renewal (a third of
        # lease_seconds) and stops writing. One GET per renewal.
        back = parse((self.store.read_tagged(LEASE_KEY) or (None, None))[0]) or {}
        if (back.get("holder") or {}).get("instance") != self.me.instance:
            return False  # someone else's write landed after ours
        self.error = None
        self.held_until = new["expires"]
        self.other = None
        self._refused_said = None
        self.force = False
        if verdict is not Verdict.RENEW:
            self.taken_at = now
            fields: dict[str, Any] = {"url": self.store.url, "how": verdict.value}
            if doc:
                fields["previous"] = holder_text(doc, now)
            detail = {Verdict.TAKE: "no lease there: this supervisor writes the prefix now",
                      Verdict.RETAKE: "this machine and state dir held it before (restarted, new disk): taken "
                                      "back at once",
                      Verdict.EXPIRED: "the previous holder stopped renewing it: taken over",
                      Verdict.FORCE: "taken over at the operator's word (isaacd backup takeover)"}[verdict]
            event = "backup_lease_taken" if verdict in (Verdict.TAKE, Verdict.RETAKE) else "backup_lease_taken_over"
            self.notes.add(event, **fields, detail=detail)
            self.log.info(event, how=verdict.value)
        return True

    def _doc(self, now: float, mine: Mapping[str, Any] | None, previous: Mapping[str, Any] | None) -> dict[str, Any]:
        return {"format": FORMAT, "job": self.store.job, "holder": asdict(self.me),
                "fingerprint": self.fingerprint, "delegate": self.delegate, "heartbeat": now,
                "expires": now + self.seconds, "lease_seconds": self.seconds,
                "taken_at": (mine or {}).get("taken_at", now),
                "previous": (previous or {}).get("holder") if mine is None else (mine or {}).get("previous")}

    # ---- the heartbeat thread ------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=f"isaacd-lease-{self.store.job}", daemon=True)
            self._thread.start()

    def kick(self) -> None:
        self._wake.set()

    def takeover(self) -> None:
        """The operator's word: take it at the next step, whoever holds it."""
        self.force = True
        self._wake.set()

    def set_delegate(self, token: str | None) -> None:
        if token != self.delegate:
            self.delegate = token
            self._wake.set()  # written at once: the node checks it before its first manifest write

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.ensure()
            except BackupError as exc:
                self.log.warning("backup_lease_failed", error=str(exc))
            self._wake.wait(self._next_wait())
            self._wake.clear()

    def _next_wait(self) -> float:
        step = self.seconds / 3
        other = self.other
        if other is not None and isinstance(other.get("expires"), (int, float)):
            # look again just after it would expire, not a full step later
            return max(0.5, min(step, other["expires"] - time.time() + 0.2))
        return step if self.held_until is not None else min(step, 5.0)


class DelegateGate:
    """A Ray node that writes for the head's supervisor (backup/remote.py): it never takes the lease; it writes
    only while the lease names the head's instance and this attempt's token as its delegate."""

    CACHE_SECONDS = 1.0

    def __init__(self, store: ObjectStore, instance: str, token: str):
        self.store, self.instance, self.token = store, instance, token
        self.other: dict[str, Any] | None = None
        self._ok_until = 0.0
        self.conditional = store.conditional

    def holds(self, now: float | None = None) -> bool:
        return (time.time() if now is None else now) < self._ok_until

    def ensure(self) -> bool:
        doc = parse((self.store.read_tagged(LEASE_KEY) or (None, None))[0]) or {}
        now = time.time()
        ok = (doc.get("holder") or {}).get("instance") == self.instance and doc.get("delegate") == self.token \
            and isinstance(doc.get("expires"), (int, float)) and now < doc["expires"]
        self.other = None if ok else doc
        self._ok_until = now + self.CACHE_SECONDS if ok else 0.0
        return ok

    def refusal(self) -> str | None:
        if self.other is None:
            return None
        return (f"{self.store.url}: the lease does not name this attempt (token {self.token[:8]}...) as the head "
                f"supervisor's writer: {holder_text(self.other, time.time())}")

    def status(self) -> BackupLease:
        return BackupLease(state="delegate" if self.other is None else "refused",
                           holder=None if self.other is None else holder_text(self.other, time.time()),
                           expires=None, conditional=self.conditional, fix=None)
