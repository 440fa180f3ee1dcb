"""Runs INSIDE the systemd testbed (systemd 257 + Podman 5.4): drives SystemdRuntime through its
lifecycle with shell containers and prints one JSON object of observations for the test to check.

    python rt_probe.py /srv/probe            # Quadlet units
    ISAACD_FORCE_SERVICE_FALLBACK=1 python rt_probe.py /srv/probe   # the Podman < 4.4 .service
"""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from isaacd.config.schema import parse_config
from isaacd.runtimes.base import LaunchSpec
from isaacd.runtimes.systemd import SystemdRuntime

ARGS = ["plain", "with space", "100%", "$HOME", "${X}", 'dq"uote', "sq'uote", "back\\slash", "%n%t", "--f=v w",
        "tab\there", "new\nline"]
LOOPER = r"""
out="$0"
env > "$out/env.txt"
for a in "$@"; do printf '%s\0' "$a"; done > "$out/args.bin"
echo "looper up"
trap 'echo got INT; exit 4' INT
trap 'echo got TERM; exit 5' TERM
while :; do sleep 0.1; done
"""
QUICK = 'sleep "$1"; exit "$2"'
# takes its time to stop: SIGINT starts a 4 s "checkpoint save"
SLOW = r"""
trap 'echo saving; sleep 4; echo saved; exit 4' INT
echo slow up
while :; do sleep 0.1; done
"""

CALLS = ("start", "poll", "signal", "kill", "pids", "cleanup", "describe")
TIMES: dict[str, float] = {}  # the slowest call of each Runtime method, in ms (per scenario)
ALL: dict[str, float] = {}  # ... over the whole probe
# the commands a Runtime method ran in the caller's own thread (systemctl, podman, journalctl: each waits on a
# process): none may, they belong on the runtime's worker. Counted, not timed, so a loaded host cannot fail it.
SPAWNED_IN_CALLER: dict[str, list[str]] = {}
_IN_CALL = threading.local()
_popen_init = subprocess.Popen.__init__


def _watched_popen_init(self: subprocess.Popen, args: Any, *a: Any, **kw: Any) -> None:
    name = getattr(_IN_CALL, "name", None)
    if name is not None:
        argv = [str(x) for x in args] if isinstance(args, (list, tuple)) else [str(args)]
        SPAWNED_IN_CALLER.setdefault(name, []).append(" ".join(argv)[:120])
    _popen_init(self, args, *a, **kw)


subprocess.Popen.__init__ = _watched_popen_init  # type: ignore[method-assign]


def timed(rt: Any) -> Any:
    """Record how long every Runtime method takes in the caller (the supervisor's tick), and every process it
    starts there."""
    for name in CALLS:
        fn = getattr(rt, name)

        def wrap(*a: Any, _fn: Any = fn, _name: str = name, **kw: Any) -> Any:
            t0 = time.perf_counter()
            outer, _IN_CALL.name = getattr(_IN_CALL, "name", None), _name
            try:
                return _fn(*a, **kw)
            finally:
                _IN_CALL.name = outer
                ms = (time.perf_counter() - t0) * 1000
                TIMES[_name] = max(TIMES.get(_name, 0.0), ms)
                ALL[_name] = max(ALL.get(_name, 0.0), ms)

        setattr(rt, name, wrap)
    return rt


def job(base: Path, name: str, command: list[str]) -> Any:
    toml = f"""
[supervisor]
state_dir = "{base}/state"
[[jobs]]
name = "{name}"
runtime = "systemd"
log_root = "{base}/{name}"
command = {json.dumps(command)}
stop_timeout = 5
[jobs.container]
image = "/:O"
shm_size = "64m"
environment = {{ FROM_CFG = "yes" }}
"""
    cfg = parse_config(toml, "probe", base)
    return cfg, cfg.jobs[0]


def spec(j: Any, args: list[str], token: str = "") -> LaunchSpec:
    return LaunchSpec(job=j, argv=[], trainer_args=args, env={"HOST_ONLY": "x"}, cwd=Path("/"), log_path=Path("/tmp/x"),
                      token=token)


def wait_pids(rt: SystemdRuntime, h: Any, timeout: float = 20) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert rt.poll(h) is None
        if p := rt.pids(h):
            return p
        time.sleep(0.05)
    return []


def wait_exit(rt: SystemdRuntime, h: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = rt.poll(h)
        if st is not None:
            return st
        time.sleep(0.1)
    raise SystemExit(f"no exit within {timeout} s: {rt.show(h.state['unit'])}")


def wait_running(rt: SystemdRuntime, h: Any, timeout: float = 60) -> None:
    """start() only queues the launch: poll until our invocation of the unit runs the container."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert rt.poll(h) is None, "ended while waiting for it to run"
        if h.state.get("invocation") and rt.pids(h) and rt.show(h.state["unit"])["ActiveState"] == "active":
            return
        time.sleep(0.1)
    raise SystemExit("never ran")


def ex(st: Any) -> dict[str, Any]:
    return {**st.as_json(), "detail": st.detail, "start_failed": st.start_failed}


def cleanup(rt: SystemdRuntime, h: Any, timeout: float = 30) -> int:
    """Call cleanup() once per "tick" until it says done; returns how many calls it took."""
    deadline = time.monotonic() + timeout
    n = 1
    while not rt.cleanup(h):
        assert time.monotonic() < deadline, "cleanup never finished"
        time.sleep(0.05)
        n += 1
    return n


def containers(name: str) -> list[str]:
    return subprocess.run(["podman", "ps", "-aq", "--filter", f"label=isaacd.job={name}"], capture_output=True,
                          text=True).stdout.split()


def running(name: str) -> list[str]:
    return subprocess.run(["podman", "ps", "-q", "--filter", f"label=isaacd.job={name}"], capture_output=True,
                          text=True).stdout.split()


def podman_main(base: Path) -> None:
    import os

    from isaacd.runtimes.podman import SERVICE_UNIT, PodmanRuntime

    os.environ["ISAACD_PODMAN_URL"] = f"unix://{base}/podman.sock"
    cfg, j = job(base, "papi", ["sh", "-c", LOOPER])
    rt = PodmanRuntime(cfg)
    h = rt.start(spec(j, [str(j.log_root)]))  # queues the launch; the worker starts the API service
    deadline = time.monotonic() + 60
    while not h.state.get("id") and time.monotonic() < deadline:
        assert rt.poll(h) is None, "ended while starting"
        time.sleep(0.05)
    out: dict[str, Any] = {"service_unit_active": subprocess.run(
        ["systemctl", "is-active", f"{SERVICE_UNIT}.service"], capture_output=True, text=True).stdout.strip()}
    deadline = time.monotonic() + 30
    while not (j.log_root / "env.txt").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)
    env = (j.log_root / "env.txt").read_text()
    out["env_ok"] = "ACCEPT_EULA=Y" in env and "NOTIFY_SOCKET" not in env
    rt.signal(h, signal.SIGINT)
    deadline = time.monotonic() + 30
    st = None
    while st is None and time.monotonic() < deadline:
        st = rt.poll(h)
        time.sleep(0.1)
    out["sigint"] = ex(st)
    subprocess.run(["systemctl", "stop", f"{SERVICE_UNIT}.service"], capture_output=True)
    print(json.dumps(out))


def main() -> None:
    base = Path(sys.argv[1])
    if sys.argv[2:] == ["podman"]:
        base.mkdir(parents=True, exist_ok=True)
        podman_main(base)
        return
    base.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {}
    cfg, j = job(base, "looper", ["sh", "-c", LOOPER])
    rt = timed(SystemdRuntime(cfg))
    out["mode"] = "quadlet" if rt.quadlet else "service"

    # 1. start; what the container got; graceful stop by isaacd (SIGINT to the trainer)
    h = rt.start(spec(j, [str(j.log_root)] + ARGS))
    out["unit_file"] = h.state["unit_file"]
    wait_running(rt, h)
    deadline = time.monotonic() + 20
    while not (j.log_root / "args.bin").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)
    out["args"] = (j.log_root / "args.bin").read_bytes().decode().split("\0")[:-1]
    out["env"] = dict(ln.split("=", 1) for ln in (j.log_root / "env.txt").read_text().splitlines() if "=" in ln)
    out["describe"] = dataclasses.asdict(rt.describe(h))
    out["pids"] = rt.pids(h)
    out["containers_running"] = len(containers("looper"))
    rt.signal(h, signal.SIGINT)
    out["sigint"] = ex(wait_exit(rt, h))
    out["cleanup_calls"] = cleanup(rt, h)
    out["journal_has_output"] = "got INT" in subprocess.run(
        ["journalctl", "-u", h.state["unit"], "--no-pager", "-o", "cat"], capture_output=True, text=True).stdout

    # 2. an operator's `systemctl stop`: recorded as such
    h = rt.start(spec(j, [str(j.log_root)]))
    wait_running(rt, h)
    subprocess.run(["systemctl", "stop", h.state["unit"]], check=True)
    out["systemctl_stop"] = ex(wait_exit(rt, h))

    # 2b. ... also while the unit is still activating (before conmon's READY=1)
    h = rt.start(spec(j, [str(j.log_root)]))
    while rt.show(h.state["unit"])["ActiveState"] != "activating":
        assert rt.poll(h) is None
        time.sleep(0.01)
    subprocess.run(["systemctl", "stop", h.state["unit"]], check=True)
    out["systemctl_stop_activating"] = ex(wait_exit(rt, h))

    # 3. the container killed (podman kill): a crash, resumed by isaacd
    h = rt.start(spec(j, [str(j.log_root)]))
    wait_running(rt, h)
    subprocess.run(["podman", "kill", h.state["container"]], check=True, capture_output=True)
    out["podman_kill"] = ex(wait_exit(rt, h))

    # 4. isaacd's own SIGKILL after the grace period
    h = rt.start(spec(j, [str(j.log_root)]))
    wait_running(rt, h)
    rt.kill(h)
    out["isaacd_kill"] = ex(wait_exit(rt, h))

    # 5. exits by itself: 0 (systemd collects the unit at once: the journal has the end) and 7
    cfg2, q = job(base, "quick", ["sh", "-c", QUICK, "quick"])
    rtq = timed(SystemdRuntime(cfg2))
    h = rtq.start(spec(q, ["1", "0"]))
    out["exit0"] = ex(wait_exit(rtq, h))
    h = rtq.start(spec(q, ["1", "7"]))
    out["exit7"] = ex(wait_exit(rtq, h))
    h = rtq.start(spec(q, ["0", "3"]))  # ends before the first poll
    time.sleep(3)
    out["exit3_unpolled"] = ex(wait_exit(rtq, h))

    # 6. adoption by a new supervisor: by unit name and launch token; never a duplicate
    h = rt.start(spec(j, [str(j.log_root)]))
    wait_running(rt, h)
    state = json.loads(json.dumps(h.state))
    rt2 = timed(SystemdRuntime(cfg))
    out["adopt_wrong_token"] = rt2.adopt(j, {**state, "token": "nope"}) is None
    h2 = rt2.adopt(j, state)
    out["adopt_running"] = h2 is not None and rt2.poll(h2) is None and bool(rt2.pids(h2))
    # a start while it runs (adoption failed, e.g. the state dir was lost): old one stopped first
    h3 = rt2.start(spec(j, [str(j.log_root)]))
    wait_running(rt2, h3)
    out["containers_after_restart_over_live_unit"] = len(containers("looper"))
    rt2.signal(h3, signal.SIGINT)
    out["sigint_after_replace"] = ex(wait_exit(rt2, h3))

    # 7. ended cleanly while no supervisor ran (unit already collected): adopted, the journal has the end
    h = rtq.start(spec(q, ["0.5", "0"]))
    state = json.loads(json.dumps(h.state))
    time.sleep(3)
    rt3 = timed(SystemdRuntime(cfg2))
    h4 = rt3.adopt(q, state)
    out["adopt_ended"] = ex(wait_exit(rt3, h4)) if h4 is not None else None

    # 8. find(job, token): the supervisor died after start() and before it saved the handle
    h = rt.start(spec(j, [str(j.log_root)], token="tok-find-1"))
    wait_running(rt, h)
    rt4 = timed(SystemdRuntime(cfg))
    out["find_wrong_token"] = rt4.find(j, "tok-other") is None
    h5 = rt4.find(j, "tok-find-1")
    out["find_running"] = h5 is not None and rt4.poll(h5) is None and bool(set(wait_pids(rt4, h5)) & set(rt.pids(h)))
    rt4.signal(h5, signal.SIGINT)
    out["find_sigint"] = ex(wait_exit(rt4, h5))
    cleanup(rt4, h5)
    # ... and an attempt that ended meanwhile (unit collected): found, with its exit status from the journal
    h = rtq.start(spec(q, ["0.3", "0"], token="tok-find-2"))
    time.sleep(3)
    rt5 = timed(SystemdRuntime(cfg2))
    h6 = rt5.find(q, "tok-find-2")
    out["find_ended"] = ex(wait_exit(rt5, h6)) if h6 is not None else None
    # ... and a token whose unit file a later attempt has rewritten: nothing to find
    h = rtq.start(spec(q, ["0.3", "0"], token="tok-find-3"))
    wait_exit(rtq, h)
    out["find_superseded"] = SystemdRuntime(cfg2).find(q, "tok-find-2") is None

    # 9. a slow stop (the trainer takes 4 s to save) does not hold up the caller: the old attempt is
    # stopped by a new start across ticks, every call stays fast, and there is never a second container
    cfg3, sl = job(base, "slow", ["sh", "-c", SLOW])
    rts = timed(SystemdRuntime(cfg3))
    h = rts.start(spec(sl, []))
    wait_running(rts, h)
    TIMES.clear()
    t0 = time.monotonic()
    rts.signal(h, signal.SIGINT)
    most = 0
    while (st := rts.poll(h)) is None:
        most = max(most, len(running("slow")))
        rts.pids(h)
        rts.describe(h)
        time.sleep(0.02)
    out["slow_stop"] = {**ex(st), "seconds": round(time.monotonic() - t0, 2), "max_call_ms": dict(TIMES)}
    while not rts.cleanup(h):
        time.sleep(0.02)
    h = rts.start(spec(sl, []))
    wait_running(rts, h)
    TIMES.clear()
    t0 = time.monotonic()
    rt_new = timed(SystemdRuntime(cfg3))  # a second supervisor that did not adopt the running attempt
    h2 = rt_new.start(spec(sl, []))
    while rt_new.poll(h2) is None and not (h2.state.get("invocation") and rt_new.pids(h2)):
        most = max(most, len(running("slow")))
        rt_new.describe(h2)
        time.sleep(0.02)
    out["replace_slow"] = {"seconds": round(time.monotonic() - t0, 2), "max_call_ms": dict(TIMES),
                           "running": len(running("slow"))}
    out["slow_max_running"] = most
    rt_new.kill(h2)
    wait_exit(rt_new, h2)

    # 10. an ended spare's unit that takes its time to stop (its container saves for 4 s on the stop signal) does
    # not hold up the runtime's worker: another attempt's kill on the same runtime is carried out and its exit
    # seen meanwhile, and the spare's unit file still goes once its unit has stopped
    sp = rts.start(dataclasses.replace(spec(sl, [], token="tok-spare-slow"), spare=True,
                                       container_argv=("sh", "-c", SLOW)))
    wait_running(rts, sp)
    ha = rts.start(spec(sl, []))
    wait_running(rts, ha)
    t0 = time.monotonic()
    rts.cleanup(sp)  # queues the release: the stop of a unit whose container takes 4 s
    time.sleep(0.3)  # the release's first look has run
    rts.kill(ha)
    st = wait_exit(rts, ha)
    kill_seen = time.monotonic() - t0
    # the order, not a clock: the kill's exit was seen while the spare's unit was still stopping (its 4 s save)
    released_at_kill_seen = rts.cleanup(sp)
    while not rts.cleanup(sp):
        assert time.monotonic() - t0 < 60, "the spare's unit was never released"
        time.sleep(0.05)
    out["slow_spare_release"] = {
        "kill_seen_s": round(kill_seen, 2), "spare_released_s": round(time.monotonic() - t0, 2),
        "spare_released_when_kill_seen": released_at_kill_seen,
        "attempt": ex(st), "spare_file_left": Path(sp.state["unit_file"]).exists(),
        "spare_unit_state": rts.show(sp.state["unit"], ("ActiveState",), keep=False)["ActiveState"]}
    out["max_call_ms"] = dict(ALL)
    out["spawned_in_caller"] = dict(SPAWNED_IN_CALLER)

    print(json.dumps(out))


if __name__ == "__main__":
    main()
