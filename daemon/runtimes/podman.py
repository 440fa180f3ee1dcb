"""runtime = "podman": the job's container through the Podman API (podman-py), no systemd needed.

For hosts, or containers, where systemd is not PID 1. The container is the same one the systemd
runtime runs (see quadlet.ContainerSpec): image, trainer command with resume flags, CDI GPUs,
shm size, memlock, the log root at the same path, loopback-only ports, `isaacd.*` labels.

- API socket: `unix:///run/podman/podman.sock` (root; `ISAACD_PODMAN_URL` overrides). When nothing
  answers there, isaacd starts `podman system service --time=0` on it (as a transient systemd unit
  when systemd runs, else as a detached process) and says so in its log.
- Not `--rm`: an exited container keeps its exit code and OOM flag for `poll` (and a supervisor
  that was down at the time), and its output for `isaacd logs`; the next start replaces it.
- Stop: SIGINT to every process of the container (Ctrl-C semantics, as the process runtime's
  killpg), then SIGKILL through the API.
- Stopped by someone else (`podman stop`/`podman kill`/`podman rm -f` while isaacd sent nothing):
  an operator stop, which isaacd records and does not fight.
"""

from __future__ import annotations

import os
import signal as _signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

from ..config import Config, JobConfig
from ..logs import log
from .base import ExitStatus, Handle, LaunchSpec, RuntimeError_
from .process import process_tree
from .quadlet import (
    ContainerSpec,
    attempt_number,
    clean_env,
    container_name,
    prepare_log_root,
    podman_binary,
)

__all__ = ["PodmanRuntime", "container_name", "DEFAULT_URL"]

DEFAULT_URL = "unix:///run/podman/podman.sock"
RUNNING_STATES = ("created", "configured", "initialized", "running", "paused", "stopping", "restarting")
SERVICE_UNIT = "isaacd-podman-api"


def _import_podman() -> Any:
    try:
        import podman  # noqa: PLC0415
    except ImportError:
        raise RuntimeError_("runtime = \"podman\" needs podman-py: pip install 'isaacd[podman]'") from None
    return podman


class PodmanRuntime:
    name = "podman"

    def __init__(self, config: Config | None = None, url: str | None = None):
        self.config = config
        self.url = url or os.environ.get("ISAACD_PODMAN_URL") or DEFAULT_URL
        self._client: Any = None
        self._inspect: dict[str, dict[str, Any]] = {}
        self.service_proc: subprocess.Popen[bytes] | None = None

    # ---- the API connection ---------------------------------------------------------------
    @property
    def socket_path(self) -> Path | None:
        return Path(self.url.removeprefix("unix://")) if self.url.startswith("unix://") else None

    def client(self) -> Any:
        if self._client is not None:
            return self._client
        podman = _import_podman()
        c = podman.PodmanClient(base_url=self.url, timeout=30)
        if not self._ping(c):
            self._start_service()
            deadline = time.monotonic() + 20
            while not self._ping(c):
                if time.monotonic() > deadline:
                    raise RuntimeError_(f"the Podman API at {self.url} does not answer; start it with "
                                        "`systemctl enable --now podman.socket` (or `podman system service --time=0`)")
                time.sleep(0.1)
        self._client = c
        return c

    @staticmethod
    def _ping(c: Any) -> bool:
        try:
            return bool(c.ping())
        except Exception:  # noqa: BLE001 - connection refused, no socket, ...
            return False

    def _start_service(self) -> None:
        sock = self.socket_path
        podman = podman_binary()
        if sock is None or podman is None:
            raise RuntimeError_(f"no Podman API at {self.url} and {'no podman binary' if podman is None else 'not a unix socket'}"
                                " to start one")
        sock.parent.mkdir(parents=True, exist_ok=True)
        argv = [podman, "system", "service", "--time=0", self.url]
        if Path("/run/systemd/system").exists():
            # its own transient unit: outside our cgroup and sandbox, so it outlives a supervisor
            # restart and its containers do not inherit our unit's restrictions
            subprocess.run(["systemctl", "reset-failed", f"{SERVICE_UNIT}.service"], capture_output=True,
                           env=clean_env())
            r = subprocess.run(["systemd-run", f"--unit={SERVICE_UNIT}", "--description=Podman API for isaacd",
                                "--quiet", "--", *argv], capture_output=True, text=True, env=clean_env())
            if r.returncode == 0:
                log.warning("podman_service_started", url=self.url, unit=f"{SERVICE_UNIT}.service",
                            detail="nothing answered on the Podman API socket; started `podman system service "
                                   "--time=0` (prefer `systemctl enable --now podman.socket`)")
                return
            log.warning("podman_service_systemd_run_failed", error=r.stderr.strip())
        state_dir = self.config.supervisor.state_dir if self.config else Path("/var/lib/isaacd")
        logf = state_dir / "logs" / "podman-service.log"
        logf.parent.mkdir(parents=True, exist_ok=True)
        with open(logf, "ab") as fh:
            self.service_proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                                                 start_new_session=True, env=clean_env(), cwd="/")
        log.warning("podman_service_started", url=self.url, pid=self.service_proc.pid, log=str(logf),
                    detail="nothing answered on the Podman API socket; started `podman system service --time=0` "
                           "detached (it outlives the supervisor)")

    def _get(self, ref: str) -> Any | None:
        from podman.errors import NotFound  # noqa: PLC0415

        try:
            return self.client().containers.get(ref)
        except NotFound:
            return None

    def _attrs(self, ref: str) -> dict[str, Any] | None:
        c = self._get(ref)
        if c is None:
            return None
        self._inspect[ref] = c.attrs
        return c.attrs

    # ---- Runtime ---------------------------------------------------------------------------
    def start(self, spec: LaunchSpec) -> Handle:
        job = spec.job
        state_dir = self.config.supervisor.state_dir if self.config else Path("/var/lib/isaacd")
        token = uuid.uuid4().hex[:16]
        attempt = attempt_number(spec, state_dir)
        cs = ContainerSpec.from_launch(spec, token, attempt)
        client = self.client()
        old = self._get(cs.name)
        if old is not None:
            # Never two of a job: whatever has this name (the previous attempt's exited container,
            # or a live one that adoption did not claim) goes before the new one starts.
            st = old.attrs.get("State", {}).get("Status")
            if st in RUNNING_STATES:
                log.warning("stale_container_removed", job=job.name, container=cs.name, state=st)
            old.remove(force=True, v=True)
        prepare_log_root(job)
        body = cs.libpod_create_body()
        import json  # noqa: PLC0415

        resp = client.api.post("/containers/create", data=json.dumps(body),
                               headers={"content-type": "application/json"})
        if resp.status_code >= 400:
            raise RuntimeError_(f"podman create {cs.name}: {_api_error(resp)}")
        cid = resp.json()["Id"]
        resp = client.api.post(f"/containers/{cid}/start")
        if resp.status_code >= 400:
            err = _api_error(resp)
            try:
                client.api.delete(f"/containers/{cid}", params={"force": True, "v": True})
            except Exception:  # noqa: BLE001
                pass
            raise RuntimeError_(f"podman start {cs.name}: {err}")
        attrs = self._attrs(cid) or {}
        pid = attrs.get("State", {}).get("Pid") or None
        log.info("container_started", job=job.name, container=cs.name, id=cid[:12], attempt=attempt, pid=pid)
        return Handle("podman", job.name, {"container": cs.name, "id": cid, "token": token, "attempt": attempt,
                                           "pid": pid, "started_at": time.time()})

    def poll(self, handle: Handle) -> ExitStatus | None:
        st = handle.state
        attrs = self._attrs(st["id"])
        if attrs is None:
            if st.get("signalled"):
                return ExitStatus(detail="container gone after isaacd stopped it")
            return ExitStatus(external_stop=True, detail=f"container {st['container']} removed outside isaacd")
        s = attrs.get("State", {})
        if s.get("Status") in RUNNING_STATES:
            if s.get("Pid"):
                st["pid"] = s["Pid"]
            return None
        status = int(s.get("ExitCode") or 0)
        code = sig = None
        if 128 < status <= 128 + 64:
            sig = status - 128
        else:
            code = status
        oom = bool(s.get("OOMKilled"))
        external = False
        how = ""
        if not st.get("signalled") and not oom:
            how = self._stopped_by(st)
            external = bool(how)
        detail = f"container {st['container']} exit status {status}" + (f", {s['Error']}" if s.get("Error") else "")
        if external:
            detail = f"`podman {how}` of {st['container']}, exit status {status}"
        return ExitStatus(code=code, signal=sig, oom_killed=oom, external_stop=external, detail=detail)

    def _stopped_by(self, st: dict[str, Any]) -> str:
        """"stop" when a Podman event says someone ran `podman stop` on it (Podman >= 4.4 logs one;
        4.3 does not), else "". A `podman kill` is a crash like any other: isaacd resumes."""
        since = int(st.get("started_at", time.time() - 3600)) - 1
        try:
            events = self.client().events(since=since, until=int(time.time()) + 1, decode=True,
                                          filters={"container": st["id"]})
            for ev in events:
                if ev.get("Action") == "stop":
                    return str(ev["Action"])
        except Exception as exc:  # noqa: BLE001 - the events log is best effort
            log.warning("podman_events_failed", error=str(exc))
        return ""

    def _container_pids(self, handle: Handle) -> list[int]:
        pid = handle.state.get("pid")
        if not pid or not Path(f"/proc/{pid}").exists():
            return []
        try:
            cg = Path(f"/proc/{pid}/cgroup").read_text()
        except OSError:
            return []
        if handle.state["id"] not in cg:
            return []  # not in our PID namespace (or PID reused): leave it to the API
        return process_tree(pid)

    def signal(self, handle: Handle, sig: int) -> None:
        handle.state["signalled"] = True
        pids = self._container_pids(handle)
        if pids and sig != _signal.SIGKILL:
            # Ctrl-C semantics: every process of the trainer, not just the container's PID 1
            # (which ignores signals it has no handler for, e.g. a wrapper shell)
            for p in pids:
                try:
                    os.kill(p, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            return
        c = self._get(handle.state["id"])
        if c is not None:
            try:
                c.kill(signal=_signal.Signals(sig).name)
            except Exception as exc:  # noqa: BLE001 - it may have exited meanwhile
                log.info("podman_kill_failed", job=handle.job, error=str(exc))

    def kill(self, handle: Handle) -> None:
        self.signal(handle, _signal.SIGKILL)

    def pids(self, handle: Handle) -> list[int]:
        return self._container_pids(handle)

    def adopt(self, job: JobConfig, state: dict[str, Any]) -> Handle | None:
        if not state.get("id") or not state.get("token"):
            return None
        try:
            attrs = self._attrs(state["id"])
        except RuntimeError_ as exc:
            log.warning("podman_adopt_failed", job=job.name, error=str(exc))
            return None
        if attrs is None or attrs.get("Config", {}).get("Labels", {}).get("isaacd.launch") != state["token"]:
            return None
        st = dict(state)
        st.pop("signalled", None)
        st["pid"] = attrs.get("State", {}).get("Pid") or None
        log.info("container_adopted", job=job.name, container=state.get("container"),
                 state=attrs.get("State", {}).get("Status"))
        return Handle("podman", job.name, st)

    def cleanup(self, handle: Handle) -> None:
        # The exited container stays until the next start replaces it: `isaacd logs` (podman logs)
        # still shows why it ended.
        pass

    def describe(self, handle: Handle) -> dict[str, Any]:
        st = handle.state
        attrs = self._inspect.get(st["id"]) or {}
        pid = attrs.get("State", {}).get("Pid") or st.get("pid")
        cg = None
        if pid:
            try:
                cg = Path(f"/proc/{pid}/cgroup").read_text().strip().splitlines()[-1].split(":", 2)[2]
            except (OSError, IndexError):
                cg = None
        return {"container": st.get("container"), "container_id": st.get("id"), "pid": pid or None, "cgroup": cg,
                "attempt": st.get("attempt")}


def _api_error(resp: Any) -> str:
    try:
        return str(resp.json().get("message") or resp.text)
    except Exception:  # noqa: BLE001
        return str(resp.text)[:500]
