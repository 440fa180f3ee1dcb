#!/usr/bin/env python3
"""`isaacd status` and /metrics latency while a job is stopping, per runtime (issue 10): prints p50/p99/max.

    python3 bench/status_latency.py                          # this checkout, every runtime that works here
    python3 bench/status_latency.py --repo /work/main        # another checkout (its .venv is used)
    python3 bench/status_latency.py --runtimes process,podman --cycles 3 --stop-timeout 10

For each runtime (`process` always; `podman` with this host's Podman and a private API service the bench
starts; `systemd` inside the systemd testbed of tests/testbed/tb.py, systemd 257 + Podman 5.4 + Quadlet,
whose cached rootfs must exist), a real `isaacd run` supervises ONE job whose trainer ignores SIGINT
(`sh -c "trap '' INT; while :; do sleep 0.2; done"`, as a container on the container runtimes), so a
stop takes the whole `stop_timeout` and then a SIGKILL. While three clients poll the supervisor back to
back from this host:

  socket   {"cmd": "status"} on the control socket, the wire protocol itself (no CLI start-up)
  metrics  GET /metrics on a fresh connection (the exporter builds it from the same status)
  cli      `isaacd status --json`, a fresh interpreter each time (what a user's shell pays)

the bench runs phases and reports each client's latency per phase:

  running    the job running, nothing else happening: the baseline, same supervisor, same run
  stopping   from `isaacd stop JOB` until the job is `stopped` (signal, grace, SIGKILL, settle)
  starting   `isaacd start JOB` until the trainer has a pid again
  restarting `isaacd restart JOB` until the next attempt's trainer has a pid (stop, grace, SIGKILL, exit
             recorded, launch: on systemd a start waits for the old unit to finish deactivating)

Issue 10's goal: p99 < 50 ms whatever the runtimes are doing. Latency is from before connect() to the
last byte of the reply, for requests that started in the phase. `isaacd stop`'s own latency is printed
too. A runtime that cannot run here is skipped with the reason. Figures depend on the machine and its
load (the cli client itself costs a core on a small box): compare runs made on the same machine.
Needs root for podman and systemd. Only the standard library: run it with any python3.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _supervised import Checkout, HostSupervisor, ask, free_port, get_metrics, summary, wait_until  # noqa: E402

TRAINER = "trap '' INT; echo trainer up, ignoring SIGINT; while :; do sleep 0.2; done"
CLIENTS = ("socket", "metrics", "cli")
PHASES = ("running", "stopping", "starting", "restarting")


def config(d: Path, rt: str, job: str, port: int, tick: float, stop_timeout: float) -> str:
    return f"""
[supervisor]
state_dir = "{d}/state"
control_socket = "{d}/isaacd.sock"
log_format = "json"
tick_interval = {tick}

[metrics]
enabled = true
listen = "127.0.0.1:{port}"

[gpu]
source = "none"

[[jobs]]
name = "{job}"
runtime = "{rt}"
command = {json.dumps(["sh", "-c", TRAINER, "trainer"])}
log_root = "{d}/logs"
stop_timeout = {stop_timeout}

[jobs.container]
image = "/:O"
shm_size = "64m"
"""


# ---- the three clients ------------------------------------------------------------------------------
class Sampler:
    """Clients polling back to back in threads; every sample is (start, seconds, ok)."""

    def __init__(self, sock: Path, port: int, cli: list[str], job: str, gap: float, with_cli: bool):
        self.sock, self.port, self.cli, self.job, self.gap = sock, port, cli, job, gap
        self.samples: dict[str, list[tuple[float, float, bool]]] = {c: [] for c in CLIENTS}
        self.errors: dict[str, list[str]] = {c: [] for c in CLIENTS}
        self.job_state: str | None = None
        self.job_pid: int | None = None
        self.job_attempt: int | None = None
        self._stop = threading.Event()
        fns: dict[str, Callable[[], None]] = {"socket": self._status, "metrics": lambda: get_metrics(self.port)}
        if with_cli:
            fns["cli"] = self._cli
        self.threads = [threading.Thread(target=self._loop, args=(c, f), daemon=True) for c, f in fns.items()]

    def _status(self) -> None:
        st = ask(self.sock, {"cmd": "status"})
        j = next(j for j in st["jobs"] if j["name"] == self.job)
        self.job_state, self.job_pid, self.job_attempt = j["state"], j.get("pid"), j.get("attempt")

    def _cli(self) -> None:
        r = subprocess.run(self.cli, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"exit {r.returncode}: {r.stderr.decode(errors='replace').strip()[-200:]}")
        json.loads(r.stdout)

    def _loop(self, name: str, fn: Callable[[], None]) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            ok = True
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - a timeout or refusal is a figure, not a crash
                ok = False
                self.errors[name].append(str(exc)[:200])
            self.samples[name].append((t0, time.monotonic() - t0, ok))
            self._stop.wait(self.gap if name != "cli" else 0.0)

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        for t in self.threads:
            t.join(130)


# ---- runtimes: where the supervisor runs --------------------------------------------------------------
class Env:
    """Where a runtime's supervisor runs. `why_not()` -> a reason to skip, or None."""

    name = ""

    def __init__(self, co: Checkout, d: Path):
        self.co, self.d = co, d

    def why_not(self) -> str | None:
        return None

    def up(self) -> None:
        pass

    def start_supervisor(self, cfg: Path) -> None:
        self.sup = HostSupervisor(self.co, cfg, self.sup_env())

    def sup_env(self) -> dict[str, str]:
        return {}

    def supervisor_alive(self) -> bool:
        return self.sup.proc.poll() is None

    def stop_supervisor(self) -> None:
        self.sup.stop()

    def down(self, job: str) -> None:
        pass


class ProcessEnv(Env):
    name = "process"


class PodmanEnv(Env):
    """This host's Podman, through a private `podman system service` the bench starts (and ends)."""

    name = "podman"

    def why_not(self) -> str | None:
        if os.geteuid() != 0:
            return "rootful Podman needs root"
        if shutil.which("podman") is None:
            return "podman is not installed (tests/testbed/host-setup.sh)"
        r = subprocess.run(["podman", "info", "--format", "{{.Version.Version}}"], capture_output=True, text=True,
                           timeout=60)
        if r.returncode != 0:
            return f"podman does not work here: {r.stderr.strip()[-200:]}"
        self.version = r.stdout.strip()
        if subprocess.run([str(self.co.python), "-c", "import podman"], capture_output=True).returncode != 0:
            return "podman-py is not in the checkout's venv (pip install 'isaacd[podman]')"
        return None

    def up(self) -> None:
        self.sock = Path(f"/tmp/isaacd-bench-podman-{os.getpid()}.sock")
        self.url = f"unix://{self.sock}"
        self.log = open(self.d / "podman-service.log", "ab")
        self.service = subprocess.Popen(["podman", "system", "service", "--time=0", self.url], stdout=self.log,
                                        stderr=subprocess.STDOUT, start_new_session=True)
        wait_until(lambda: self.sock.exists(), 30, "the Podman API socket")

    def sup_env(self) -> dict[str, str]:
        return {"ISAACD_PODMAN_URL": self.url}

    def down(self, job: str) -> None:
        ids = subprocess.run(["podman", "ps", "-aq", "--filter", f"label=isaacd.job={job}"], capture_output=True,
                             text=True).stdout.split()
        if ids:
            subprocess.run(["podman", "rm", "-f", "-v", *ids], capture_output=True)
        self.service.terminate()
        try:
            self.service.wait(20)
        except subprocess.TimeoutExpired:
            self.service.kill()
            self.service.wait()
        self.log.close()
        self.sock.unlink(missing_ok=True)


class SystemdEnv(Env):
    """The supervisor as a transient unit inside the systemd testbed (systemd 257, Podman 5.4, Quadlet).

    The testbed shares this host's network namespace (metrics port reachable from here) and bind-mounts
    the checkout and the bench's temp dir at the same paths (the control socket reachable from here)."""

    name = "systemd"
    UNIT = "isaacd-bench-supervisor"

    def _tb(self) -> Any:
        for p in (self.co.repo / "tests" / "testbed", Path(__file__).resolve().parents[1] / "tests" / "testbed"):
            if (p / "tb.py").exists():
                sys.path.insert(0, str(p))
                import tb  # noqa: PLC0415

                return tb
        return None

    def why_not(self) -> str | None:
        self.tb = self._tb()
        if self.tb is None:
            return "no tests/testbed/tb.py (the systemd testbed helper) in either checkout"
        why = self.tb.unavailable_reason()
        if why:
            return why
        if not (self.tb.LOWER / ".testbed-built").exists():
            return (f"the testbed rootfs is not built ({self.tb.LOWER}); build it once (~60 s, apt + debootstrap): "
                    "tests/testbed/systemd-testbed.sh prep build")
        if not shutil.which("systemd-nspawn"):
            return "systemd-nspawn missing (apt-get install systemd-container)"
        return None

    def _python_mount(self) -> str:
        home = None
        for line in (self.co.venv / "pyvenv.cfg").read_text().splitlines():
            k, _, v = line.partition("=")
            if k.strip() == "home":
                home = Path(v.strip()).parent
        if home is None:
            return sys.base_prefix
        return str(home.parents[1]) if home.parent.name == "versions" else str(home)

    def up(self) -> None:
        ro = [self._python_mount()]
        for pth in self.co.venv.glob("lib/python*/site-packages/*.pth"):  # a venv that borrows packages elsewhere
            for line in pth.read_text().splitlines():
                p = Path(line.strip())
                if p.is_absolute() and p.is_dir() and self.co.repo not in p.parents and str(p) not in ro:
                    ro.append(str(p))
        self.t = self.tb.Testbed(name="isaacd-bench-lat", binds=[str(self.co.repo), str(self.d)], ro_binds=ro)
        self.t.boot()

    def start_supervisor(self, cfg: Path) -> None:
        log = self.d / "supervisor.log"
        self.t.sh(f"systemctl reset-failed {self.UNIT} 2>/dev/null; systemd-run --quiet --unit={self.UNIT} "
                  f"-E XDG_RUNTIME_DIR={self.d} -p StandardOutput=append:{log} -p StandardError=append:{log} "
                  f"-- {self.co.isaacd} run --config {cfg}")

    def supervisor_alive(self) -> bool:
        return self.t.sh(f"systemctl is-active {self.UNIT}", check=False).stdout.strip() in ("active", "activating")

    def stop_supervisor(self) -> None:
        self.t.sh(f"systemctl stop {self.UNIT}", check=False, timeout=120)

    def down(self, job: str) -> None:
        self.t.stop()


ENVS = {"process": ProcessEnv, "podman": PodmanEnv, "systemd": SystemdEnv}


# ---- one runtime --------------------------------------------------------------------------------------
def bench_runtime(env: Env, args: argparse.Namespace) -> dict[str, Any] | None:
    co, d = env.co, env.d
    job = f"lat{uuid.uuid4().hex[:6]}"
    port = free_port()
    cfg = d / "isaacd.toml"
    cfg.write_text(config(d, env.name, job, port, args.tick, args.stop_timeout))
    sock = d / "isaacd.sock"
    cli = [str(co.isaacd), "--config", str(cfg)]
    env.up()
    windows: list[tuple[str, float, float]] = []
    stop_cmd: list[float] = []
    stop_total: list[float] = []
    restart_cmd: list[float] = []
    restart_total: list[float] = []
    sampler = None
    try:
        env.start_supervisor(cfg)
        wait_until(lambda: ask(sock, {"cmd": "status"}, timeout=5), 60, "the control socket")

        def trainer_up() -> bool:
            j = next(j for j in ask(sock, {"cmd": "status"})["jobs"] if j["name"] == job)
            if j["state"] in ("failed", "stopped"):
                raise SystemExit(f"{env.name}: job {j['state']}: {j['state_reason']} (see {d}/supervisor.log)")
            return bool(j.get("pid")) and j["state"] in ("starting", "running")

        wait_until(trainer_up, 180, "the trainer to start")
        time.sleep(1.0)
        sampler = Sampler(sock, port, cli + ["status", "--json"], job, args.gap, not args.no_cli)
        sampler.start()
        t0 = time.monotonic()
        time.sleep(args.baseline)
        windows.append(("running", t0, time.monotonic()))
        for cycle in range(args.cycles):
            t0 = time.monotonic()
            subprocess.run(cli + ["stop", job], check=True, capture_output=True, timeout=300)
            stop_cmd.append(time.monotonic() - t0)
            wait_until(lambda: sampler.job_state == "stopped", args.stop_timeout + 120, "the job to be stopped",
                       interval=0.02)
            t1 = time.monotonic()
            stop_total.append(t1 - t0)
            windows.append(("stopping", t0, t1))
            print(f"  {env.name}: cycle {cycle + 1}: `isaacd stop` returned in {stop_cmd[-1] * 1000:.0f} ms, "
                  f"stopped after {stop_total[-1]:.1f} s", flush=True)
            if cycle + 1 < args.cycles:
                t0 = time.monotonic()
                subprocess.run(cli + ["start", job], check=True, capture_output=True, timeout=300)
                wait_until(lambda: sampler.job_pid and sampler.job_state in ("starting", "running"), 180,
                           "the trainer to start again", interval=0.02)
                windows.append(("starting", t0, time.monotonic()))
                time.sleep(1.0)
        if args.restarts:
            subprocess.run(cli + ["start", job], check=True, capture_output=True, timeout=300)
            wait_until(lambda: sampler.job_pid and sampler.job_state in ("starting", "running"), 180,
                       "the trainer to start again", interval=0.02)
            time.sleep(1.0)
        for cycle in range(args.restarts):
            before = sampler.job_attempt or 0
            t0 = time.monotonic()
            subprocess.run(cli + ["restart", job], check=True, capture_output=True, timeout=300)
            restart_cmd.append(time.monotonic() - t0)
            wait_until(lambda: (sampler.job_attempt or 0) > before and sampler.job_pid
                       and sampler.job_state in ("starting", "running"), args.stop_timeout + 180,
                       "the restarted trainer", interval=0.02)
            t1 = time.monotonic()
            restart_total.append(t1 - t0)
            windows.append(("restarting", t0, t1))
            print(f"  {env.name}: restart {cycle + 1}: `isaacd restart` returned in {restart_cmd[-1] * 1000:.0f} ms, "
                  f"new trainer up after {restart_total[-1]:.1f} s", flush=True)
            time.sleep(1.0)
        sampler.stop()
    except BaseException:
        print(f"  {env.name}: supervisor log: {d}/supervisor.log", file=sys.stderr)
        raise
    finally:
        if sampler is not None:
            sampler.stop()
        try:
            env.stop_supervisor()
        finally:
            env.down(job)
    out: dict[str, Any] = {"stop_cmd": stop_cmd, "stop_total": stop_total, "restart_cmd": restart_cmd,
                           "restart_total": restart_total, "phases": {}, "errors": sampler.errors}
    for phase in PHASES:
        for client in CLIENTS:
            xs = [dt for (ts, dt, ok) in sampler.samples[client]
                  if any(p == phase and a <= ts < b for (p, a, b) in windows)]
            fails = sum(1 for (ts, dt, ok) in sampler.samples[client]
                        if not ok and any(p == phase and a <= ts < b for (p, a, b) in windows))
            out["phases"][(phase, client)] = (xs, fails)
    return out


def report(name: str, res: dict[str, Any]) -> None:
    print(f"\n== runtime {name}")
    for phase in PHASES:
        for client in CLIENTS:
            xs, fails = res["phases"][(phase, client)]
            if not xs:
                continue
            base = res["phases"][("running", client)][0]
            ratio = ""
            if phase != "running" and base:
                from _supervised import pct  # noqa: PLC0415

                ratio = f"   p99 x{pct(xs, 99) / pct(base, 99):.1f} of running"
            print(f"  {phase:<9} {client:<8} {summary(xs)}{ratio}" + (f"   FAILED {fails}" if fails else ""))
    if res["stop_cmd"]:
        print(f"  `isaacd stop` command: {', '.join(f'{x * 1000:.0f} ms' for x in res['stop_cmd'])};  "
              f"stop -> stopped: {', '.join(f'{x:.1f} s' for x in res['stop_total'])}")
    if res["restart_cmd"]:
        print(f"  `isaacd restart` command: {', '.join(f'{x * 1000:.0f} ms' for x in res['restart_cmd'])};  "
              f"restart -> new trainer up: {', '.join(f'{x:.1f} s' for x in res['restart_total'])}")
    for client, errs in res["errors"].items():
        if errs:
            print(f"  {client} errors ({len(errs)}), first: {errs[0]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", help="the checkout to run (its .venv/bin/isaacd); default: this script's checkout")
    ap.add_argument("--runtimes", default="process,podman,systemd")
    ap.add_argument("--stop-timeout", type=float, default=6.0, help="the job's stop_timeout (the grace period)")
    ap.add_argument("--cycles", type=int, default=2, help="stop/start cycles per runtime")
    ap.add_argument("--restarts", type=int, default=1, help="`isaacd restart` cycles per runtime, after the stops")
    ap.add_argument("--baseline", type=float, default=6.0, help="seconds of the `running` phase")
    ap.add_argument("--tick", type=float, default=0.2, help="[supervisor] tick_interval (0.2 is the default)")
    ap.add_argument("--gap", type=float, default=0.01, help="pause between two socket/metrics requests, s")
    ap.add_argument("--no-cli", action="store_true", help="skip the `isaacd status --json` client")
    ap.add_argument("--keep", action="store_true", help="keep the temp dirs (configs, supervisor logs)")
    args = ap.parse_args()

    co = Checkout(args.repo)
    print(f"checkout: {co.describe()}")
    print(f"one job, trainer ignores SIGINT, stop_timeout {args.stop_timeout:g} s, tick_interval {args.tick:g} s, "
          f"{args.cycles} stop cycles, {args.restarts} restarts, {args.baseline:g} s running baseline; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start")
    results: dict[str, dict[str, Any]] = {}
    skipped: dict[str, str] = {}
    for name in [r.strip() for r in args.runtimes.split(",") if r.strip()]:
        if name not in ENVS:
            sys.exit(f"unknown runtime {name!r}; one of {', '.join(ENVS)}")
        d = Path(tempfile.mkdtemp(prefix=f"isaacd-bench-lat-{name}-"))
        env = ENVS[name](co, d)
        why = env.why_not()
        if why:
            skipped[name] = why
            print(f"  {name}: SKIPPED: {why}", flush=True)
            continue
        print(f"  {name}: running (temp dir {d})", flush=True)
        t0 = time.monotonic()
        try:
            results[name] = bench_runtime(env, args)
        except Exception as exc:  # noqa: BLE001 - e.g. the testbed does not boot: say so, go on
            skipped[name] = f"failed here: {type(exc).__name__}: {exc}"
            print(f"  {name}: FAILED: {exc}", flush=True)
            continue
        finally:
            if not args.keep and name in results:
                shutil.rmtree(d, ignore_errors=True)
        print(f"  {name}: done in {time.monotonic() - t0:.0f} s", flush=True)
    for name, res in results.items():
        report(name, res)
    for name, why in skipped.items():
        print(f"\n== runtime {name}: not measured: {why}")
    print(f"\ngoal (issue 10): p99 < 50 ms for socket and metrics in every phase; load average "
          f"{os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
