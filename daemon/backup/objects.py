"""The bucket, through fsspec: put a local file as one object, get one back, small JSON documents.

**Atomic upload.** A reader never sees half an object:
- object stores (s3://, gs://) publish an object only once its upload completes: s3fs sends a file below
  2 x its chunk size as one PUT and a larger one as a multipart upload that S3 assembles only at
  CompleteMultipartUpload (s3fs aborts the upload on any error); GCS finalises an upload the same way.
- a filesystem target (file://, an NFS or ossfs mount) gets the bytes under a temporary name in the same
  directory, then a rename onto the final name.

**Versioning.** Keys are unique per checkpoint (`<job>/<run dir>/<file>`), so every checkpoint is its own
object; a re-saved file of the same name overwrites its key. On a bucket with versioning enabled the store
keeps every version itself: an overwrite makes a new version, and the deletes that `keep` sends only add a
delete marker, so older versions stay until the bucket's lifecycle rules expire them. Where the store
reports one, the object's version id is recorded in the manifest.

Errors come back as `BackupError` whose text names the operation and the URL from the config (which carries
no credential: the config refuses one), never the client's settings.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

from .config import PROTOCOLS, BackupConfig

# a store that does not answer must not hold the uploader for minutes: isaacd retries with its own backoff
S3_CLIENT_CONFIG = {"connect_timeout": 5, "read_timeout": 60, "retries": {"max_attempts": 2, "mode": "standard"}}


class BackupError(Exception):
    """A store operation failed (unreachable, refused, missing package); str() is safe to show and log."""


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


class ObjectStore:
    """One job's part of a backup target: keys are relative to `<url>/<job>`."""

    def __init__(self, cfg: BackupConfig, job: str):
        self.cfg = cfg
        self.job = job
        self.url = f"{cfg.url}/{job}"  # what status and errors show
        self._fs: Any = None
        self._root = ""

    # ---- the filesystem object ---------------------------------------------------------
    def fs(self) -> Any:
        if self._fs is None:
            import fsspec

            proto = self.cfg.protocol
            opts: dict[str, Any] = {}
            if proto == "s3":
                # its own client: s3fs caches one per argument set, and credentials are read when it connects
                opts["skip_instance_cache"] = True
                opts["config_kwargs"] = dict(S3_CLIENT_CONFIG)
                if self.cfg.endpoint_url:
                    opts["client_kwargs"] = {"endpoint_url": self.cfg.endpoint_url}
            elif proto == "file":
                opts["auto_mkdir"] = True
            try:
                fs, root = fsspec.core.url_to_fs(self.url, **opts)
            except ImportError:
                module, package = PROTOCOLS[proto]
                raise BackupError(f"{proto}:// needs the {module} package, which is not installed in isaacd's "
                                  f"environment: install {package}") from None
            except Exception as exc:  # noqa: BLE001 - a client that cannot be built: say which and why
                raise BackupError(f"cannot open {self.url}: {_describe(exc)}") from None
            self._fs, self._root = fs, root.rstrip("/")
        return self._fs

    @property
    def local(self) -> bool:
        """A filesystem target (rename is atomic there), not an object store."""
        return self.cfg.protocol == "file"

    def path(self, key: str) -> str:
        self.fs()
        return f"{self._root}/{key}" if key else self._root

    def _call(self, what: str, key: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except FileNotFoundError:
            raise
        except BackupError:
            raise
        except Exception as exc:  # noqa: BLE001 - network, permission, throttling: all "the store said no"
            raise BackupError(f"{what} {self.url}/{key}: {_describe(exc)}") from None

    # ---- objects -------------------------------------------------------------------------
    def put_file(self, local: Path, key: str) -> str | None:
        """Upload `local` as `key`, atomically (see the module doc); the object's version id, if any."""
        fs, dest = self.fs(), self.path(key)
        if self.local:
            tmp = f"{dest}.isaacd-upload-{uuid.uuid4().hex[:12]}"
            try:
                self._call("upload to", key, fs.put_file, str(local), tmp)
                self._call("rename in", key, fs.mv, tmp, dest)
            finally:
                if fs.exists(tmp):
                    fs.rm_file(tmp)
            return None
        self._call("upload to", key, fs.put_file, str(local), dest)
        return self._version_id(key)

    def _version_id(self, key: str) -> str | None:
        try:
            fs = self.fs()
            fs.invalidate_cache(self.path(key))
            vid = fs.info(self.path(key)).get("VersionId")
        except Exception:  # noqa: BLE001 - the id is a nicety; the upload itself succeeded
            return None
        return str(vid) if vid and vid != "null" else None

    def get_file(self, key: str, local: Path) -> None:
        """Download `key` to `local` (the caller verifies it and renames it into place)."""
        self._call("download from", key, self.fs().get_file, self.path(key), str(local))

    def size(self, key: str) -> int:
        fs = self.fs()
        fs.invalidate_cache(self.path(key))
        return int(self._call("stat", key, fs.info, self.path(key))["size"])

    def read_bytes(self, key: str) -> bytes | None:
        """The object's bytes, or None when there is no such object (a store that fails raises)."""
        try:
            return self._call("read", key, self.fs().cat_file, self.path(key))
        except FileNotFoundError:
            return None

    def write_bytes(self, key: str, data: bytes) -> None:
        """One small document, atomically: one PUT on an object store, temp file + rename on a filesystem."""
        fs, dest = self.fs(), self.path(key)
        if self.local:
            tmp = f"{dest}.isaacd-upload-{uuid.uuid4().hex[:12]}"
            self._call("write", key, fs.pipe_file, tmp, data)
            self._call("rename in", key, fs.mv, tmp, dest)
        else:
            self._call("write", key, fs.pipe_file, dest, data)

    def delete(self, key: str) -> None:
        try:
            self._call("delete", key, self.fs().rm_file, self.path(key))
        except FileNotFoundError:
            pass

    def probe(self) -> None:
        """Write, read back and delete a small object under the job's prefix (doctor's reachable + writable)."""
        key = f".isaacd-probe-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        payload = b"isaacd backup probe\n"
        self.write_bytes(key, payload)
        try:
            got = self.read_bytes(key)
            if got != payload:
                raise BackupError(f"read back {self.url}/{key}: got {len(got or b'')} bytes, wrote {len(payload)}")
        finally:
            self.delete(key)
