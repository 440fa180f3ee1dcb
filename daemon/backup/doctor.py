"""`isaacd doctor` for backup targets: credentials present, store reachable and writable (a probe object is
written, read back and deleted under the job's prefix). Never prints a credential: only where it came from."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..checks import Check
from .config import BackupConfig
from .objects import BackupError, ObjectStore

if TYPE_CHECKING:
    from ..config import Config

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
    return out  # no job with a target: nothing to say (as for images without container jobs)
