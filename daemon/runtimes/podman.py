"""runtime = "podman": the job's container through the Podman API (podman-py), no systemd needed.

For hosts, or containers, where systemd is not PID 1. The container is the same one the systemd
runtime runs (see container_spec.ContainerSpec): image, trainer command with resume flags, CDI GPUs,
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
- Nothing here waits in the caller (base.py's contract): every API call (create, start, inspect,
  kill, events) runs on this runtime's worker thread; `start` queues the launch, `poll` the next
  inspect. A running container of the job that nobody adopted is stopped before the new one is
  created (SIGINT, SIGKILL after STALE_STOP_MAX), one look per poll.
- Launch token: label `isaacd.token=<LaunchSpec.token>`; `find` lists containers by it.
- Warm spares (spare.py, issue 21): a `LaunchSpec.spare` is a second container of the job's spec under a name of
  its own (`isaaclab-job-<job>-spare-<token>`), no published ports; at the go it becomes the attempt as it is (the
  attempt's token is the spare's, saved before the go), so `poll`, `signal`, `adopt` and `find` treat it like any
  launch. Ended spare containers are removed at the job's next launch.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal as _signal
import subprocess
import time
from pathlib import Path
from typing import Any

from ..config.schema import Config, JobConfig
from ..daemon_log import log
from .base import ExitStatus, Handle, LaunchSpec, RuntimeFailure
from .container_runtime import STALE_KILL_WAIT, STALE_STOP_MAX, ContainerRuntime
from .container_spec import LEGACY_TOKEN_LABEL, TOKEN_LABEL, container_name, is_spare_container, prepare_log_root
from .host import clean_env, podman_binary
from ..os_seam.proctree import process_tree
from .worker import Slot, Worker
from .view import RuntimeView

__all__ = ["PodmanRuntime", "DEFAULT_URL"]

DEFAULT_URL = "unix:///run/podman/podman.sock"
RUNNING_STATES = ("created", "configured", "initialized", "running", "paused", "stopping", "restarting")
SERVICE_UNIT = "isaacd-podman-api"


def _import_podman() -> Any:
    try:
        import podman  # noqa: PLC0415
    except ImportError:
        raise RuntimeFailure("runtime = \"podman\" needs podman-py: pip install 'isaacd[podman]'") from None
    return podman


class PodmanRuntime(ContainerRuntime):
    name = "podman"
    poll_failed_event = "podman_poll_failed"

    def __init__(self, config: Config | None = None, url: str | None = None):
        self.config = config
        self.url = url or os.environ.get("ISAACD_PODMAN_URL") or DEFAULT_URL
        self._client: Any = None
        self._inspect: dict[str, dict[str, Any]] = {}  # written by the worker (and recovery), read by describe
        self._slots: dict[str, Slot] = {}  # by launch token
        self.worker = Worker("podman")
        self.service_proc: subprocess.Popen[bytes] | None = None
        self._stop_events: bool | None = None  # whether the server logs "stop" events (_logs_stop_events)

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
                    raise RuntimeFailure(f"the Podman API at {self.url} does not answer; start it with "
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
            raise RuntimeFailure(f"no Podman API at {self.url} and {'no podman binary' if podman is None else 'not a unix socket'}"
                                " to start one")
        sock.parent.mkdir(parents=True, exist_ok=True)
        if self.service_proc is not None:  # one we started before that has died: reaped, not left a zombie (issue 37)
            self.service_proc.poll()
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
        logf = self.state_dir / "logs" / "podman-service.log"
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

    # ---- Runtime (see base.py for the timing contract) -------------------------------------
    def start(self, spec: LaunchSpec) -> Handle:
        """Queues the launch and returns: ~5 ms here (the spec, the log root). On the worker the launch
        costs a `podman create` + `start` through the API (0.3-1 s measured on Podman 4.3), plus, only
        when a container of the job is still running unclaimed, its stop across ticks (SIGINT, SIGKILL
        after STALE_STOP_MAX)."""
        job = spec.job
        if importlib.util.find_spec("podman") is None:
            _import_podman()  # raises with the install hint
        cs = self._container_spec(spec)
        body = cs.libpod_create_body()
        prepare_log_root(job, spec.run_as)
        h = Handle("podman", job.name, {"container": cs.name, "token": cs.token, "attempt": cs.attempt, "pid": None,
                                         "started_at": time.time()})
        return self._queue_launch(h, cs.name, (job.name, cs.name, body))

    def _not_launched(self, st: dict[str, Any]) -> str:
        return f"stopped before container {st['container']} was created"

    def _launch_step(self, slot: Slot, snap: dict[str, Any], st: dict[str, Any]) -> None:
        """Worker: one step of the launch. A still-running container of the job is stopped across
        several steps (one per poll), never waited for here."""
        job, name, body = slot.cache["launch"]
        client = self.client()
        old = self._get(name)
        if old is not None:
            # Never two of a job: whatever has this name (the previous attempt's exited container,
            # or a live one that adoption did not claim) goes before the new one starts.
            state = old.attrs.get("State", {}).get("Status")
            if state in RUNNING_STATES:
                self._stop_stale(job, name, old, slot)
                return
            old.remove(force=True, v=True)
        self._remove_ended_spares(client, job)
        resp = client.api.post("/containers/create", data=json.dumps(body),
                               headers={"content-type": "application/json"})
        if resp.status_code >= 400:
            raise RuntimeFailure(f"podman create {name}: {_api_error(resp)}")
        cid = resp.json()["Id"]
        resp = client.api.post(f"/containers/{cid}/start")
        if resp.status_code >= 400:
            err = _api_error(resp)
            try:
                client.api.delete(f"/containers/{cid}", params={"force": True, "v": True})
            except Exception:  # noqa: BLE001
                pass
            raise RuntimeFailure(f"podman start {name}: {err}")
        attrs = self._attrs(cid) or {}
        st["id"], st["pid"] = cid, attrs.get("State", {}).get("Pid") or None
        log.info("container_started", job=job, container=name, id=cid[:12], attempt=st.get("attempt"),
                 pid=st["pid"])
        slot.record(snap, st)
        cancel = self._launch_done(slot, None)
        if cancel is not None:  # a stop arrived while the container was being created
            self._api_kill(job, cid, cancel)

    @staticmethod
    def _remove_ended_spares(client: Any, job: str) -> None:
        """Worker: the job's ended spare containers (killed unused, or taken over as an attempt that has ended): a
        launch removes them as it replaces the attempt's own exited container. Running ones are left alone: the
        parked spare, or the attempt one became (a leftover of a previous supervisor is killed by its token)."""
        try:
            for c in client.containers.list(all=True, filters={"label": f"isaacd.job={job}"}):
                attrs = c.attrs or {}
                state = attrs.get("State")
                state = state.get("Status") if isinstance(state, dict) else state
                names = attrs.get("Names") or [attrs.get("Name") or ""]
                if is_spare_container(job, str(names[0])) and state not in RUNNING_STATES:
                    c.remove(force=True, v=True)
        except Exception as exc:  # noqa: BLE001 - housekeeping, never a reason to fail a launch
            log.info("podman_spare_cleanup_failed", job=job, error=str(exc))

    def _stop_stale(self, job: str, name: str, old: Any, slot: Slot) -> None:
        """SIGINT to a running container of the job that nobody adopted, SIGKILL after STALE_STOP_MAX."""
        def stop() -> None:
            log.warning("stale_container_stopped", job=job, container=name,
                        detail="a container of this job was running but not adopted; stopping it first")
            self._api_kill(job, old.id, _signal.SIGINT)

        self._stop_stale_step(slot, STALE_STOP_MAX, stop, lambda: self._api_kill(job, old.id, _signal.SIGKILL),
                              lambda _s: f"container {name} of an earlier attempt would not stop "
                                         f"(SIGKILL {STALE_KILL_WAIT:g} s ago)")

    def _api_kill(self, job: str, ref: str, sig: int) -> None:
        c = self._get(ref)
        if c is not None:
            try:
                c.kill(signal=_signal.Signals(sig).name)
            except Exception as exc:  # noqa: BLE001 - it may have exited meanwhile
                log.info("podman_kill_failed", job=job, error=str(exc))

    def _look(self, st: dict[str, Any], slot: Slot) -> ExitStatus | None:
        signalled = bool(st.get("signalled") or slot.signalled)
        attrs = self._attrs(st["id"])
        if attrs is None:
            if signalled:
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
        if not signalled and not oom:
            how = self._stopped_by(st)
            external = bool(how) and not slot.signalled
        detail = f"container {st['container']} exit status {status}" + (f", {s['Error']}" if s.get("Error") else "")
        if external:
            detail = f"`podman {how}` of {st['container']}, exit status {status}"
        return ExitStatus(code=code, signal=sig, oom_killed=oom, external_stop=external, detail=detail)

    def _stopped_by(self, st: dict[str, Any]) -> str:
        """"stop" when a Podman event says someone ran `podman stop` on it (Podman >= 4.4 logs one;
        4.3 does not), else "". A `podman kill` is a crash like any other: isaacd resumes."""
        if not self._logs_stop_events():
            return ""
        since = int(st.get("started_at") or time.time() - 3600) - 1
        try:
            events = self.client().events(since=since, until=int(time.time()) + 1, decode=True,
                                          filters={"container": st["id"]})
            for ev in events:
                if ev.get("Action") == "stop":
                    return str(ev["Action"])
        except Exception as exc:  # noqa: BLE001 - the events log is best effort
            log.warning("podman_events_failed", error=str(exc))
        return ""

    def _logs_stop_events(self) -> bool:
        """Podman >= 4.4 logs a "stop" event for `podman stop`; 4.3 (Debian 12's) does not, so there is nothing to
        look for there, and the look would cost up to a second of the worker before a crash is reported (the events
        call waits for its `until`, the next whole second): measured 0.86 s, most of a booted spare's takeover."""
        if self._stop_events is None:
            try:
                m = re.match(r"(\d+)\.(\d+)", str(self.client().version().get("Version", "")))
            except Exception:  # noqa: BLE001 - unknown: look, as before
                return True
            self._stop_events = m is None or (int(m.group(1)), int(m.group(2))) >= (4, 4)
        return self._stop_events

    def _trainer_pids(self, handle: Handle) -> list[int]:
        pid, cid = handle.state.get("pid"), handle.state.get("id")
        if not pid or not cid or not Path(f"/proc/{pid}").exists():
            return []
        try:
            cg = Path(f"/proc/{pid}/cgroup").read_text()
        except OSError:
            return []
        if cid not in cg:
            return []  # not in our PID namespace (or PID reused): leave it to the API
        return process_tree(pid)

    def _kill_on_worker(self, handle: Handle, sig: int) -> None:
        cid = handle.state.get("id")
        if cid:
            self.worker.submit(f"kill {handle.job}", lambda: self._api_kill(handle.job, cid, sig))

    def _handle_from(self, job: JobConfig, attrs: dict[str, Any], state: dict[str, Any]) -> Handle:
        labels = attrs.get("Config", {}).get("Labels") or {}
        st = dict(state)
        st.pop("signalled", None)
        st.update(id=attrs.get("Id") or st.get("id"), container=st.get("container") or container_name(job.name),
                  pid=attrs.get("State", {}).get("Pid") or None, token=_token_label(labels))
        if "attempt" not in st and str(labels.get("isaacd.attempt", "")).isdigit():
            st["attempt"] = int(labels["isaacd.attempt"])
        self._slots.pop(st["token"], None)  # a fresh slot: launched, nothing observed yet
        log.info("container_adopted", job=job.name, container=st["container"],
                 state=attrs.get("State", {}).get("Status"))
        return Handle("podman", job.name, st)

    def adopt(self, job: JobConfig, state: dict[str, Any]) -> Handle | None:
        """Synchronous (recovery): one inspect, or the find below when the launch had not reported
        the container id before the state was saved."""
        token = state.get("token")
        if not token:
            return None
        if not state.get("id"):
            return self.find(job, token)
        try:
            attrs = self._attrs(state["id"])
        except RuntimeFailure as exc:
            log.warning("podman_adopt_failed", job=job.name, error=str(exc))
            return None
        if attrs is None or _token_label(attrs.get("Config", {}).get("Labels") or {}) != token:
            return None
        return self._handle_from(job, attrs, state)

    def find(self, job: JobConfig, token: str) -> Handle | None:
        """The container labelled isaacd.token=<token> (running, or exited with its status kept):
        one list call through the API (synchronous, recovery only)."""
        if not token:
            return None
        try:
            client = self.client()
            found = []
            for label in (TOKEN_LABEL, LEGACY_TOKEN_LABEL):
                found = client.containers.list(all=True, filters={"label": f"{label}={token}"})
                if found:
                    break
        except RuntimeFailure as exc:
            log.warning("podman_find_failed", job=job.name, error=str(exc))
            return None
        if not found:
            return None
        c = found[0]
        c.reload()
        if c.attrs.get("State", {}).get("Status") == "created":
            # created but never started (the supervisor died between the two API calls): no trainer
            # ever ran; remove it so the relaunch owns the name
            c.remove(force=True, v=True)
            return None
        self._inspect[c.id] = c.attrs
        return self._handle_from(job, c.attrs, {"token": token})

    def cleanup(self, handle: Handle) -> bool:
        # Nothing to release: the exited container stays until the next start replaces it, so
        # `isaacd logs` (podman logs) still shows why it ended.
        return True

    def describe(self, handle: Handle) -> RuntimeView:
        self._slot(handle)
        st = handle.state
        attrs = self._inspect.get(st.get("id") or "") or {}
        pid = attrs.get("State", {}).get("Pid") or st.get("pid")
        cg = None
        if pid:
            try:
                cg = Path(f"/proc/{pid}/cgroup").read_text().strip().splitlines()[-1].split(":", 2)[2]
            except (OSError, IndexError):
                cg = None
        return RuntimeView(container=st.get("container"), container_id=st.get("id"), pid=pid or None, cgroup=cg,
                           attempt=st.get("attempt"))


def _token_label(labels: dict[str, str]) -> str | None:
    return labels.get(TOKEN_LABEL) or labels.get(LEGACY_TOKEN_LABEL)


def _api_error(resp: Any) -> str:
    try:
        return str(resp.json().get("message") or resp.text)
    except Exception:  # noqa: BLE001
        return str(resp.text)[:500]
