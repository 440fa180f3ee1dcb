"""The per-job manifest in the bucket, `<url>/<job>/manifest.json`: which checkpoints are there, and what they
are (run, file, iteration in the job's count, sha256, size, when). It is written after each object, so every
entry names an object that was complete when the entry was written; a restore trusts an object only when its
bytes hash to the entry's sha256.

One writer per prefix, enforced by the lease beside it (backup/lease.py): the supervisor that holds it, or the
Ray node that trains the job for it (the attempt's token). Each write reads the manifest, adds to that copy and
writes it back only if it did not change meanwhile (objects.write_if), so no writer's entry is lost to another's
rewrite. The manifest records the job's fingerprint (backup/fingerprint.py): a restore refuses a manifest
written for another task or experiment.
"""

from __future__ import annotations

from collections.abc import Collection

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from ..observations.checkpoints import SNAPSHOT_PREFIX

MANIFEST_KEY = "manifest.json"
FORMAT = 1


class ManifestError(ValueError):
    """The manifest in the bucket is not one isaacd can read."""


@dataclass(frozen=True)
class Entry:
    run: str  # the run dir's name (the local layout is rebuilt from it on restore)
    file: str  # the checkpoint's path inside the run dir: model_12.pt, nn/last_..._ep_12_rew_1.0.pth, ...
    iteration: int  # in the job's count, as the resume choice numbers it
    sha256: str
    size: int
    time: float  # when the upload finished (unix)
    mtime: float  # when the trainer wrote it
    version_id: str | None = None  # the object's version on a versioned bucket

    @property
    def key(self) -> str:
        return f"{self.run}/{self.file}"

    @property
    def snapshot(self) -> bool:
        return self.file.rsplit("/", 1)[-1].startswith(SNAPSHOT_PREFIX)


@dataclass
class Manifest:
    job: str
    entries: list[Entry] = field(default_factory=list)
    fingerprint: dict[str, Any] | None = None  # the job that wrote it; None: an older isaacd's manifest

    def to_bytes(self) -> bytes:
        doc = {"format": FORMAT, "job": self.job, "fingerprint": self.fingerprint,
               "checkpoints": [asdict(e) for e in self.newest_first()]}
        return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()

    @classmethod
    def from_bytes(cls, job: str, data: bytes) -> "Manifest":
        try:
            doc = json.loads(data)
            if not isinstance(doc, dict) or doc.get("format") != FORMAT:
                raise ManifestError(f"not an isaacd manifest of format {FORMAT}")
            entries = [Entry(**_entry_fields(e)) for e in doc.get("checkpoints") or []]
            fp = doc.get("fingerprint")
        except (ValueError, TypeError) as exc:
            raise ManifestError(f"unreadable manifest: {exc}") from None
        return cls(job, entries, fp if isinstance(fp, dict) else None)

    def newest_first(self) -> list[Entry]:
        # at one iteration the trainer's own checkpoint before isaacd's snapshot of it (as signals/checkpoints)
        return sorted(self.entries, key=lambda e: (e.iteration, not e.snapshot, e.time), reverse=True)

    def newest(self) -> Entry | None:
        return max(self.entries, key=lambda e: e.time, default=None)

    def get(self, key: str) -> Entry | None:
        return next((e for e in self.entries if e.key == key), None)

    def add(self, entry: Entry) -> list[Entry]:
        """Record an uploaded checkpoint; returns the entries it displaces.

        The same key again replaces its entry (a re-saved file). A checkpoint of another run at or past this
        iteration belongs to a timeline the job has left (it was rolled back, or resumed from an older
        checkpoint): dropped, so a restore never returns to it."""
        gone = [e for e in self.entries if e.key == entry.key or (e.run != entry.run and e.iteration >= entry.iteration)]
        self.entries = [e for e in self.entries if e not in gone] + [entry]
        return gone

    def prune(self, keep: int, pinned: Collection[int] = ()) -> list[Entry]:
        """Keep the newest `keep` (0 = all) and the trainer checkpoints at the `pinned` iterations (the job's best
        evaluated checkpoint, issue 41); returns the entries dropped."""
        if keep <= 0 or len(self.entries) <= keep:
            return []
        ordered = self.newest_first()
        kept = ordered[:keep] + [e for e in ordered[keep:] if e.iteration in pinned and not e.snapshot]
        gone = [e for e in ordered if e not in kept]
        self.entries = [e for e in ordered if e in kept]
        return gone


def _entry_fields(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise TypeError(f"a checkpoint entry is a {type(raw).__name__}, not an object")
    known = set(Entry.__dataclass_fields__)
    return {k: v for k, v in raw.items() if k in known}  # fields a newer isaacd added are ignored
