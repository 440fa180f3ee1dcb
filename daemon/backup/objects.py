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

import fcntl
import hashlib
import os
import uuid
from pathlib import Path
from typing import Any

from ..config.backup import PROTOCOLS, BackupConfig

# a store that does not answer must not hold the uploader for minutes: isaacd retries with its own backoff
S3_CLIENT_CONFIG = {"connect_timeout": 5, "read_timeout": 60, "retries": {"max_attempts": 2, "mode": "standard"}}


class BackupError(Exception):
    """A store operation failed (unreachable, refused, missing package); str() is safe to show and log."""


class Conflict(BackupError):
    """A conditional write lost: the object changed (or appeared) since it was read. Read again, decide again."""


# S3 error codes that mean "the precondition did not hold" (412), or "another conditional write to this key is in
# flight" (409, AWS: "retry"); both are a lost race, never a broken store
_S3_CONFLICT = {"PreconditionFailed", "ConditionalRequestConflict", "412", "409", "NoSuchKey"}
# ...and those a store answers when it does not implement If-Match / If-None-Match on PUT
_S3_UNSUPPORTED = {"NotImplemented", "501"}


def _s3_code(exc: BaseException) -> str | None:
    """The S3 error code behind an exception s3fs translated (it keeps botocore's ClientError as the cause)."""
    for e in (exc, exc.__cause__):
        resp = getattr(e, "response", None)
        if isinstance(resp, dict):
            err = resp.get("Error") or {}
            return str(err.get("Code") or resp.get("ResponseMetadata", {}).get("HTTPStatusCode") or "") or None
    return None


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
        self._no_cas = False  # the store answered NotImplemented to a conditional PUT (Alibaba OSS does)

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

    # ---- compare-and-swap documents (the lease, the manifest: issue 28) ---------------------------
    @property
    def conditional(self) -> bool:
        """Whether this store can refuse a write whose precondition fails (s3: If-None-Match / If-Match on PUT;
        file: link(2) for an exclusive create, a lock file around compare + rename for a replace)."""
        return self.cfg.protocol in ("s3", "file") and not self._no_cas

    def read_tagged(self, key: str) -> tuple[bytes, str | None] | None:
        """The object's bytes and the tag a `write_if` names to replace exactly these bytes (S3: the ETag of the
        same GET; file: their sha256); None when there is no such object."""
        if self.cfg.protocol == "s3":
            try:
                return self._call("read", key, self._s3_get, key)
            except FileNotFoundError:
                return None
        data = self.read_bytes(key)
        return None if data is None else (data, hashlib.sha256(data).hexdigest())

    def _s3_get(self, key: str) -> tuple[bytes, str | None]:
        from fsspec.asyn import sync

        fs = self.fs()
        bucket, obj, _ = fs.split_path(self.path(key))

        async def get() -> tuple[bytes, str | None]:
            resp = await fs._call_s3("get_object", Bucket=bucket, Key=obj)
            body = resp["Body"]
            try:
                data = await body.read()
            finally:
                body.close()
            return data, resp.get("ETag")
        return sync(fs.loop, get)

    def write_if(self, key: str, data: bytes, tag: str | None) -> str | None:
        """Write `data` only if the object is still what `read_tagged` returned as `tag` (None: only if there is
        no such object). Raises Conflict when it is not; returns the new tag. A store that cannot check (gs:// in
        isaacd; an S3 store that answers NotImplemented) is written unconditionally from then on, and
        `conditional` turns False: callers that must know read back."""
        if self.cfg.protocol == "file":
            return self._file_write_if(key, data, tag)
        if not self.conditional:
            self.write_bytes(key, data)
            return None
        fs, dest = self.fs(), self.path(key)
        cond: dict[str, Any] = {"mode": "create"} if tag is None else {"IfMatch": tag}
        try:
            out = fs.pipe_file(dest, data, **cond)
        except FileExistsError:  # s3fs's word for a 412 on If-None-Match
            raise Conflict(f"write {self.url}/{key}: it was created meanwhile") from None
        except FileNotFoundError:  # AWS: If-Match on a key that is gone -> 404
            raise Conflict(f"write {self.url}/{key}: it was deleted meanwhile") from None
        except Exception as exc:  # noqa: BLE001 - sorted below by the S3 error code
            code = _s3_code(exc)
            if code in _S3_CONFLICT:
                raise Conflict(f"write {self.url}/{key}: changed meanwhile ({code})") from None
            if code in _S3_UNSUPPORTED:
                self._no_cas = True
                self.write_bytes(key, data)
                return None
            raise BackupError(f"write {self.url}/{key}: {_describe(exc)}") from None
        return (out or {}).get("ETag") if isinstance(out, dict) else None

    def _file_write_if(self, key: str, data: bytes, tag: str | None) -> str:
        """link(2) of a complete temp file is an exclusive create (EEXIST if the name exists, also on NFS);
        a replace holds `<key>.lock` (flock) while it compares the current bytes and renames over them."""
        dest = Path(self.path(key))
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(f"{dest.name}.isaacd-upload-{uuid.uuid4().hex[:12]}")
            tmp.write_bytes(data)
            try:
                if tag is None:
                    try:
                        os.link(tmp, dest)
                    except FileExistsError:
                        raise Conflict(f"write {self.url}/{key}: it was created meanwhile") from None
                else:
                    with open(dest.with_name(dest.name + ".lock"), "a") as lock:
                        fcntl.flock(lock, fcntl.LOCK_EX)
                        try:
                            now = hashlib.sha256(dest.read_bytes()).hexdigest()
                        except FileNotFoundError:
                            now = None
                        if now != tag:
                            raise Conflict(f"write {self.url}/{key}: changed meanwhile")
                        os.replace(tmp, dest)
            finally:
                tmp.unlink(missing_ok=True)
        except OSError as exc:
            raise BackupError(f"write {self.url}/{key}: {_describe(exc)}") from None
        return hashlib.sha256(data).hexdigest()

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
