"""`isaacd doctor` for backup targets: credentials present, store reachable and writable (a probe object is
written, read back and deleted under the job's prefix), whether the store refuses a conditional write that must
fail (the lease's safety rests on it), and who holds the prefix's lease (issue 28). Never prints a credential:
only where it came from."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .checks import Check
import os
import time
import uuid

from ..config.backup import BackupConfig
from ..backup.lease import FIX, LEASE_KEY, Identity, Verdict, decide, holder_text, machine_id, parse
from ..backup.objects import BackupError, Conflict, ObjectStore

if TYPE_CHECKING:
    from ..config.schema import Config

CREDENTIALS_FIX = ("give isaacd's environment credentials the standard way: AWS_ACCESS_KEY_ID and "
                   "AWS_SECRET_ACCESS_KEY (systemd: an EnvironmentFile= readable by root only), AWS_PROFILE with "
                   "~/.aws/credentials, or an instance role; never in isaacd.toml")


def s3_credentials_source(cfg: BackupConfig) -> tuple[str | None, str | None]:
    """(where botocore found credentials, None) or (None, why there are none). The chain is the S3 client's
    own: environment, shared credentials/config files, container and instance roles."""
    try:
        import botocore.session
    except ImportError:
        return None, "botocore (with s3fs) is not installed"
    try:
        creds = botocore.session.get_session().get_credentials()
    except Exception as exc:  # noqa: BLE001 - a broken profile file, say
        return None, f"reading AWS credentials failed: {type(exc).__name__}: {exc}"
    if creds is None:
        return None, "no AWS credentials: none in the environment, ~/.aws or an instance role"
    return str(getattr(creds, "method", "") or "found"), None


def check_backup(cfg: "Config") -> list[Check]:
    out: list[Check] = []
    for job in cfg.jobs:
        b = job.backup
        if b is None:
            continue
        name = f"backup:{job.name}"
        store = ObjectStore(b, job.name)
        source = ""
        if b.protocol == "s3":
            found, why = s3_credentials_source(b)
            if found is None:
                out.append(Check(name, "fail", f"{store.url}: {why}", CREDENTIALS_FIX))
                continue
            source = f"; credentials from {found}"
        try:
            store.probe()
        except BackupError as exc:
            out.append(Check(name, "fail", f"{store.url}: {exc}",
                             "check the URL and endpoint_url, that the bucket exists, and that the credentials may "
                             "put, get and delete objects under the prefix"))
            continue
        out.append(Check(name, "pass", f"{store.url}: reachable and writable (a probe object was written, read "
                                       f"back and deleted){source}"))
        out.append(_lease_check(store, Identity(machine_id(), str(cfg.supervisor.state_dir), "doctor")))
    return out


def conditional_writes(store: ObjectStore) -> str | None:
    """None when the store refuses both writes that must fail (a create over an existing object, a replace
    naming a stale tag); else what it did instead. A probe object under the prefix, deleted after."""
    if not store.conditional:
        return f"{store.cfg.protocol}:// writes are unconditional in isaacd"
    key = f".isaacd-probe-cas-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        tag = store.write_if(key, b"1", None)
        for what, again in (("a create over an existing object (If-None-Match: *)", None),
                            ("a replace naming a stale ETag (If-Match)", '"00000000000000000000000000000000"')):
            try:
                store.write_if(key, b"2", again)
            except Conflict:
                continue
            if not store.conditional:
                return "the store answers NotImplemented to If-None-Match / If-Match on PUT"
            return f"the store accepted {what}, which must fail"
        return None if tag is not None or store.local else "the store returned no ETag for a PUT"
    finally:
        store.delete(key)


def _lease_check(store: ObjectStore, me: Identity) -> Check:
    name = f"backup-lease:{store.job}"
    try:
        why = conditional_writes(store)
        got = store.read_tagged(LEASE_KEY)
    except BackupError as exc:
        return Check(name, "fail", f"{store.url}: {exc}", "check that the credentials may put, get and delete")
    doc = parse(None if got is None else got[0])
    now = time.time()
    verdict = decide(doc, now, me)
    if verdict is Verdict.REFUSE:
        return Check(name, "fail", f"{store.url} is held by another supervisor: {holder_text(doc, now)}; this one "
                                   "would neither upload to it nor resume from it", FIX.format(job=store.job))
    held = {Verdict.TAKE: "no lease yet: this supervisor takes it at start",
            Verdict.RETAKE: "held by this host and state dir",
            Verdict.EXPIRED: f"stale lease ({holder_text(doc, now)}): this supervisor takes it over"}[verdict]
    if why is not None:
        return Check(name, "warn", f"{store.url}: {held}; conditional writes: {why}, so the one-writer lease is "
                                   "best-effort (read back after each write)",
                     "give each host its own job name or url; or use a store that honours If-None-Match / If-Match "
                     "on PUT (AWS S3, MinIO, SeaweedFS >= 3.97; docs/backup.md)")
    return Check(name, "pass", f"{store.url}: {held}; the store refuses conditional writes that must fail")  # no job with a target: nothing to say (as for images without container jobs)
