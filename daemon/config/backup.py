"""`[jobs.backup]`: where a job's complete checkpoints are copied, off the host (issue 22).

Only *where* and *how many* live in the TOML. Credentials never do: the S3 client reads them from the
standard places (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE and ~/.aws, an instance role), so a
URL carrying a key or a secret is refused here, and nothing in isaacd ever logs one.
"""

from __future__ import annotations

import importlib.util
import re
from typing import Annotated
from urllib.parse import parse_qs, urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# protocol -> (the module that implements it, the pip package that brings it)
PROTOCOLS: dict[str, tuple[str, str]] = {
    "file": ("fsspec", "fsspec"),
    "s3": ("s3fs", "s3fs (pip install 'isaacd[s3]')"),
    "gs": ("gcsfs", "gcsfs (pip install 'isaacd[gcs]')"),
    "gcs": ("gcsfs", "gcsfs (pip install 'isaacd[gcs]')"),
}
# query parameters that would put a credential into the config file
_SECRET_QUERY = re.compile(r"(key|secret|token|password|credential|signature)", re.IGNORECASE)


class BackupConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    # an fsspec URL: "s3://bucket/prefix", "gs://bucket/prefix", "file:///mnt/backup"; the job's objects go
    # under <url>/<job name>/
    url: str
    # S3-compatible services (MinIO, Ceph RGW, Alibaba OSS, SeaweedFS): their endpoint, e.g. "https://oss-cn-
    # hangzhou.aliyuncs.com"; unset = AWS S3 (region from AWS_REGION / the profile)
    endpoint_url: str | None = None
    # the newest N complete checkpoints are kept in the bucket (older objects are deleted; a versioned bucket
    # keeps their versions); 0 = keep all
    keep: Annotated[int, Field(ge=0)] = 5
    # isaacd's per-iteration snapshots (isaacd_snapshot_<N>.pt) are uploaded at most once per this many seconds;
    # the trainer's own checkpoints (model_N.pt, ...) are always uploaded
    snapshot_min_seconds: Annotated[float, Field(ge=0)] = 60.0
    # one writer per <url>/<job>/ (issue 28): the supervisor that holds `lease.json` there renews it every third
    # of this; another host takes it over only once it is this old (or by `isaacd backup takeover JOB`). Longer
    # than a store outage you want to ride out, shorter than you would wait for a replacement host.
    lease_seconds: Annotated[float, Field(ge=3, le=86400)] = 120.0

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        parts = urlsplit(v)
        proto = parts.scheme.lower()
        # credentials first, and never echoed: this message may end up in a log
        if parts.username or parts.password or "@" in parts.netloc:
            raise ValueError("must not carry credentials: give them to isaacd's environment (AWS_ACCESS_KEY_ID / "
                             "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, an instance role), never to the config file")
        if any(_SECRET_QUERY.search(k) for k in parse_qs(parts.query)):
            raise ValueError("must not carry credentials in its query: use the standard credential places "
                             "(environment, ~/.aws profile, instance role)")
        if proto not in PROTOCOLS:
            raise ValueError(f'"{v}" is not a supported backup URL: use s3://bucket/prefix, gs://bucket/prefix or '
                             "file:///absolute/path")
        if proto == "file":
            if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
                raise ValueError(f'"{v}": a file URL needs an absolute path, e.g. "file:///mnt/backup"')
        elif not parts.netloc:
            raise ValueError(f'"{v}" names no bucket: e.g. "{proto}://my-bucket/isaacd"')
        module, package = PROTOCOLS[proto]
        if importlib.util.find_spec(module) is None:
            raise ValueError(f"{proto}:// needs the {module} package, which is not installed in isaacd's "
                             f"environment: install {package}")
        return v.rstrip("/")

    @field_validator("endpoint_url")
    @classmethod
    def _endpoint(cls, v: str | None) -> str | None:
        if v is None:
            return v
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f'"{v}" is not an endpoint URL: e.g. "https://s3.example.com" or "http://127.0.0.1:9000"')
        if parts.username or parts.password:
            raise ValueError("must not carry credentials: use the environment or an ~/.aws profile")
        return v.rstrip("/")

    @model_validator(mode="after")
    def _endpoint_needs_s3(self) -> "BackupConfig":
        if self.endpoint_url is not None and self.protocol != "s3":
            raise ValueError(f"endpoint_url is for S3-compatible services (s3:// URLs), not {self.protocol}://")
        return self

    @property
    def protocol(self) -> str:
        return urlsplit(self.url).scheme.lower()
