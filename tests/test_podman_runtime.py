"""runtime = "podman" and the fallback `.service` for Podman < 4.4, on this host's real Podman (4.3.1).

Containers run from an overlay of the host's own root (`--rootfs /:O`: no registry is reachable
here), so the built-in trainer with the venv runs in them exactly as on the host. Needs a working
podman: `tests/testbed/host-setup.sh` (CI runs it through scripts/test.sh).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from isaacd.config.schema import parse_config
from isaacd.runtimes.base import LaunchSpec
from isaacd.runtimes.podman import PodmanRuntime
from isaacd.runtimes.container_spec import ContainerSpec
from isaacd.runtimes.host import cgroup_pids, podman_version
from isaacd.runtimes.quadlet import render_service
from isaacd.runtimes.unit_syntax import sd_split

sys.path.insert(0, str(Path(__file__).parent))
from helpers import builtin_job, wait_for, write_config  # noqa: E402

pytestmark = pytest.mark.podman

REPO = Path(__file__).resolve().parents[1]
TRAINER = REPO / ".venv/bin/isaacd-train"
ARGS = ["plain", "with space", "100%", "$HOME", 'dq"uote', "sq'uote", "back\\slash", "%n%t", "--f=v w"]
PROBE = r"""
out="$0"
env > "$out/env.txt"
printf '%s\n' "$@" > "$out/args.txt"
grep -i 'locked memory' /proc/self/limits > "$out/limits.txt"
df -k /dev/shm | tail -1 > "$out/shm.txt"
trap 'echo got INT; exit 4' INT
trap 'echo got TERM; exit 5' TERM
: > "$out/ready"
echo probe ready
while :; do sleep 0.1; done
"""


def _podman_works() -> str | None:
    if os.geteuid() != 0:
        return "the podman tests run rootful podman (needs root)"
    try:
        r = subprocess.run(["podman", "info", "--format", "{{.Host.OCIRuntime.Name}}"], capture_output=True,
                           text=True, timeout=60)
    except FileNotFoundError:
        return "podman is not installed: run tests/testbed/host-setup.sh"
    if r.returncode != 0:
        return f"podman does not work here ({r.stderr.strip()[-200:]}): run tests/testbed/host-setup.sh"
    return None


@pytest.fixture(scope="module")
def podman_url():
    why = _podman_works()
    if why:
        pytest.skip(why)
    # A private API socket: the runtime finds nothing there and starts `podman system service` itself.
    url = f"unix:///tmp/isaacd-test-podman-{os.getpid()}.sock"
    old = os.environ.get("ISAACD_PODMAN_URL")
    os.environ["ISAACD_PODMAN_URL"] = url
    yield url
    if old is None:
        del os.environ["ISAACD_PODMAN_URL"]
    else:
        os.environ["ISAACD_PODMAN_URL"] = old
    for line in os.popen(f"pgrep -f 'podman system service --time=0 {url}'").read().split():
        os.kill(int(line), signal.SIGTERM)
    Path(url.removeprefix("unix://")).unlink(missing_ok=True)


@pytest.fixture
def cleanup_containers():
    labels: list[str] = []
    yield labels
    for job in labels:
        ids = subprocess.run(["podman", "ps", "-aq", "--filter", f"label=isaacd.job={job}"], capture_output=True,
                             text=True).stdout.split()
        if ids:
            subprocess.run(["podman", "rm", "-f", "-v", *ids], capture_output=True)


def _job(tmp_path: Path, name: str, command: list[str], ports: str = "[]", extra: str = ""):
    toml = f"""
[supervisor]
state_dir = "{tmp_path}/state"
[[jobs]]
name = "{name}"
runtime = "podman"
log_root = "{tmp_path}/logs"
command = {json.dumps(command)}
stop_timeout = 10
{extra}
[jobs.container]
image = "/:O"
shm_size = "64m"
ports = {ports}
environment = {{ FROM_CONTAINER_CFG = "1" }}
"""
    cfg = parse_config(toml, "test", tmp_path)
    return cfg, cfg.jobs[0]


def _spec(job, args):
    return LaunchSpec(job=job, argv=[], trainer_args=args, env={}, cwd=Path("/"), log_path=Path("/tmp/x.log"))


def _wait_exit(rt, h, timeout=30.0):
    return wait_for(lambda: rt.poll(h), timeout, what="container exit")


def _running(rt, h, timeout=30.0):
    """start() only queues the launch: poll until the container runs (its id and processes known)."""
    def up():
        assert rt.poll(h) is None, "ended while starting"
        return h.state.get("id") and rt.pids(h)

    wait_for(up, timeout, what="the container running")


def _ready(job, timeout=30.0):
    """The probe has set its signal traps (written after them)."""
    wait_for(lambda: (job.log_root / "ready").exists(), timeout, what="the probe's traps")


def test_podman_runtime_runs_the_container_as_specified(tmp_path, podman_url, cleanup_containers, monkeypatch):
    name = f"pt{uuid.uuid4().hex[:6]}"
    cleanup_containers.append(name)
    cfg, job = _job(tmp_path, name, ["sh", "-c", PROBE])
    rt = PodmanRuntime(cfg)
    monkeypatch.setenv("NOTIFY_SOCKET", "/run/systemd/notify")  # as under a Type=notify supervisor
    monkeypatch.setenv("HOST_ONLY_VAR", "secret")
    out = job.log_root  # the probe writes next to checkpoints: same path inside and outside
    h = rt.start(_spec(job, [str(out)] + ARGS))
    assert rt.client() is not None
    _running(rt, h)
    _ready(job)  # written after the probe's other files and its traps
    assert (out / "args.txt").read_text().splitlines() == ARGS
    env = dict(ln.split("=", 1) for ln in (out / "env.txt").read_text().splitlines() if "=" in ln)
    assert env["ACCEPT_EULA"] == "Y" and env["PRIVACY_CONSENT"] == "Y" and env["FROM_CONTAINER_CFG"] == "1"
    assert "NOTIFY_SOCKET" not in env and "HOST_ONLY_VAR" not in env
    assert int((out / "shm.txt").read_text().split()[1]) == 64 * 1024
    assert "Max locked memory" in (out / "limits.txt").read_text()
    assert rt.poll(h) is None
    d = rt.describe(h)
    assert d.container == f"isaaclab-job-{name}" and d.container_id == h.state["id"]
    pids = rt.pids(h)
    assert pids and pids[0] == h.state["pid"]
    attrs = rt._attrs(h.state["id"])
    assert attrs["Config"]["Labels"]["isaacd.job"] == name and attrs["Config"]["Labels"]["isaacd.token"] == h.state["token"]
    assert not attrs["HostConfig"].get("Privileged")
    rt.signal(h, signal.SIGINT)  # graceful stop: Ctrl-C to the trainer
    st = _wait_exit(rt, h)
    assert st.code == 4 and st.signal is None and not st.external_stop and not st.oom_killed
    logs = subprocess.run(["podman", "logs", f"isaaclab-job-{name}"], capture_output=True, text=True).stdout
    assert "got INT" in logs  # the exited container stays for `isaacd logs` until the next start


def test_podman_kill_is_a_crash_rm_is_an_operator_stop(tmp_path, podman_url, cleanup_containers):
    name = f"pk{uuid.uuid4().hex[:6]}"
    cleanup_containers.append(name)
    cfg, job = _job(tmp_path, name, ["sh", "-c", PROBE])
    rt = PodmanRuntime(cfg)
    h = rt.start(_spec(job, [str(job.log_root)]))
    _running(rt, h)
    subprocess.run(["podman", "kill", f"isaaclab-job-{name}"], check=True, capture_output=True)
    st = _wait_exit(rt, h)
    assert st.signal == 9 and not st.external_stop, st  # resumed by isaacd like any crash

    h = rt.start(_spec(job, [str(job.log_root)]))  # replaces the exited container: never two
    _running(rt, h)
    ids = subprocess.run(["podman", "ps", "-aq", "--filter", f"label=isaacd.job={name}"], capture_output=True,
                         text=True).stdout.split()
    assert ids and len(ids) == 1 and h.state["id"].startswith(ids[0])
    subprocess.run(["podman", "rm", "-f", f"isaaclab-job-{name}"], check=True, capture_output=True)
    st = _wait_exit(rt, h)
    assert st.external_stop and "removed outside isaacd" in st.describe()

    h = rt.start(_spec(job, [str(job.log_root)]))
    _running(rt, h)
    rt.kill(h)
    st = _wait_exit(rt, h)
    assert st.signal == 9 and not st.external_stop


def test_podman_adopt_after_supervisor_restart(tmp_path, podman_url, cleanup_containers):
    name = f"pa{uuid.uuid4().hex[:6]}"
    cleanup_containers.append(name)
    cfg, job = _job(tmp_path, name, ["sh", "-c", PROBE])
    rt = PodmanRuntime(cfg)
    h = rt.start(_spec(job, [str(job.log_root)]))
    _running(rt, h)
    _ready(job)
    state = json.loads(json.dumps(h.state))  # what the state store keeps

    rt2 = PodmanRuntime(cfg)  # a new supervisor
    assert rt2.adopt(job, {**state, "token": "someone-else"}) is None
    h2 = rt2.adopt(job, state)
    assert h2 is not None and rt2.poll(h2) is None and rt2.pids(h2)[0] == h.state["pid"]
    rt2.signal(h2, signal.SIGINT)
    assert _wait_exit(rt2, h2).code == 4

    # ended while no supervisor ran: the exit code is still there for the next one
    rt3 = PodmanRuntime(cfg)
    h3 = rt3.adopt(job, state)
    assert h3 is not None and _wait_exit(rt3, h3).code == 4


def test_podman_ports_are_published_on_loopback(tmp_path, podman_url, cleanup_containers):
    name = f"pp{uuid.uuid4().hex[:6]}"
    cleanup_containers.append(name)
    port = 20000 + os.getpid() % 20000
    cfg, job = _job(tmp_path, name, ["sh", "-c", "sleep 60"], ports=f'["{port}"]')
    rt = PodmanRuntime(cfg)
    h = rt.start(_spec(job, []))
    _running(rt, h)
    attrs = rt._attrs(h.state["id"])
    binding = attrs["HostConfig"]["PortBindings"][f"{port}/tcp"]
    assert binding == [{"HostIp": "127.0.0.1", "HostPort": str(port)}]
    from isaacd.cli.doctor import wildcard_listeners

    assert not [w for w in wildcard_listeners() if w["port"] == port]
    rt.kill(h)
    _wait_exit(rt, h)


SLOW = r"""
trap 'echo saving; sleep 4; echo saved; exit 4' INT
: > "$0/ready"
while :; do sleep 0.1; done
"""
CALL_MS = 50  # the most any Runtime method may keep its caller (the supervisor's tick); measured 0.1-5 ms


class Timed:
    """A runtime whose methods record how long they keep the caller."""

    CALLS = ("start", "poll", "signal", "kill", "pids", "cleanup", "describe")

    def __init__(self, rt):
        self.rt, self.ms = rt, {}

    def __getattr__(self, name):
        fn = getattr(self.rt, name)
        if name not in self.CALLS:
            return fn

        def wrap(*a, **kw):
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.ms[name] = max(self.ms.get(name, 0.0), (time.perf_counter() - t0) * 1000)

        return wrap


def _running_ids(name):
    return subprocess.run(["podman", "ps", "-q", "--filter", f"label=isaacd.job={name}"], capture_output=True,
                          text=True).stdout.split()


def test_podman_find_by_launch_token(tmp_path, podman_url, cleanup_containers):
    """The supervisor died after start() and before it saved the handle: the token finds the container."""
    name = f"pf{uuid.uuid4().hex[:6]}"
    cleanup_containers.append(name)
    cfg, job = _job(tmp_path, name, ["sh", "-c", PROBE])
    rt = PodmanRuntime(cfg)
    token = f"tok-{uuid.uuid4().hex[:8]}"
    h = rt.start(LaunchSpec(job=job, argv=[], trainer_args=[str(job.log_root)], env={}, cwd=Path("/"),
                            log_path=Path("/tmp/x.log"), token=token))
    assert h.state["token"] == token
    _running(rt, h)
    _ready(job)

    rt2 = PodmanRuntime(cfg)
    assert rt2.find(job, "someone-else") is None
    h2 = rt2.find(job, token)
    assert h2 is not None and h2.state["id"] == h.state["id"] and h2.state["attempt"] == h.state["attempt"]
    assert rt2.adopt(job, {"token": token}) is not None  # a state saved before the id was known
    # the container's main process (its `sleep 0.1` children come and go between two reads)
    assert rt2.poll(h2) is None and rt2.pids(h2)[0] == h.state["pid"] == h2.state["pid"]
    assert rt2.describe(h2).container_id == h.state["id"]
    rt2.signal(h2, signal.SIGINT)
    st = _wait_exit(rt2, h2)
    assert st.code == 4 and not st.external_stop
    assert rt2.cleanup(h2) is True
    # ended while no supervisor ran: found with its exit status (the container stays until the next start)
    rt3 = PodmanRuntime(cfg)
    h3 = rt3.find(job, token)
    assert h3 is not None and _wait_exit(rt3, h3).code == 4


def test_podman_calls_never_wait_while_a_container_stops(tmp_path, podman_url, cleanup_containers):
    """A trainer that takes 4 s to save on SIGINT: stopping it, and starting the job again over it
    (a second supervisor that did not adopt it), keep every call in the caller within milliseconds;
    the launch waits for the old container across polls, and there are never two."""
    name = f"ps{uuid.uuid4().hex[:6]}"
    cleanup_containers.append(name)
    cfg, job = _job(tmp_path, name, ["sh", "-c", SLOW])
    rt = Timed(PodmanRuntime(cfg))
    rt.client()  # the API service up (a supervisor has it from its first launch on)
    h = rt.start(_spec(job, [str(job.log_root)]))
    _running(rt, h)
    _ready(job)
    rt.ms.clear()
    t0 = time.monotonic()
    rt.signal(h, signal.SIGINT)
    while (st := rt.poll(h)) is None:
        rt.pids(h)
        rt.describe(h)
        time.sleep(0.02)
    assert st.code == 4 and time.monotonic() - t0 >= 3.5, st
    assert rt.cleanup(h) is True
    print(f"stopping a slow trainer: {time.monotonic() - t0:.1f} s, slowest call per method (ms): {rt.ms}")
    assert max(rt.ms.values()) < CALL_MS, rt.ms

    (job.log_root / "ready").unlink()
    h = rt.start(_spec(job, [str(job.log_root)]))
    _running(rt, h)
    _ready(job)
    new = Timed(PodmanRuntime(cfg))  # did not adopt the running container
    new.client()
    t0 = time.monotonic()
    h2 = new.start(_spec(job, [str(job.log_root)]))
    most = 0
    while new.poll(h2) is None and not (h2.state.get("id") and new.pids(h2)):
        most = max(most, len(_running_ids(name)))
        new.describe(h2)
        time.sleep(0.02)
    assert new.poll(h2) is None, "the new attempt did not start"
    assert time.monotonic() - t0 >= 3.5  # the old one had its 4 s to save
    assert most == 1 and len(_running_ids(name)) == 1
    print(f"start over a live unadopted container: {time.monotonic() - t0:.1f} s, slowest call (ms): {new.ms}")
    assert max(new.ms.values()) < CALL_MS, new.ms
    new.kill(h2)
    assert _wait_exit(new, h2).signal == 9
    assert max(new.ms.values()) < CALL_MS, new.ms


def test_podman_stop_before_the_launch_ran(tmp_path, podman_url, cleanup_containers):
    """A stop that arrives while the launch is still queued cancels it: an exit is reported and no
    container of the job keeps running."""
    name = f"pc{uuid.uuid4().hex[:6]}"
    cleanup_containers.append(name)
    cfg, job = _job(tmp_path, name, ["sh", "-c", PROBE])
    rt = PodmanRuntime(cfg)
    h = rt.start(_spec(job, [str(job.log_root)]))
    rt.signal(h, signal.SIGINT)
    st = _wait_exit(rt, h)
    assert not st.external_stop and not st.start_failed, st
    wait_for(lambda: not _running_ids(name), 20, what="no container left running")


# ---- the fallback .service on Podman 4.3 ----------------------------------------------------------
_sd_split = sd_split  # systemd's own splitting rules, as the fallback unit is read


def _unquote_exec(line: str, unit: str) -> list[str]:
    """ExecStart= -> argv, as systemd would run it (specifiers, $$, %% and quoting)."""
    cmd = line.split("=", 1)[1]
    cmd = cmd.replace("%%", "\x00").replace("%t", "/run").replace("%N", unit).replace("%n", unit + ".service")
    return [w.replace("\x00", "%").replace("$$", "$") for w in _sd_split(cmd)]


def test_fallback_service_execstart_runs_on_podman_43(tmp_path, cleanup_containers):
    """Podman 4.3 has no Quadlet: isaacd writes the .service itself. With no systemd on this host,
    play systemd's part: a cgroup for the unit, a NOTIFY_SOCKET, %t/%N, then ExecStart= and
    ExecStop= exactly as written, and check Type=notify works (READY=1, MAINPID=conmon)."""
    why = _podman_works()
    if why:
        pytest.skip(why)
    ver = podman_version()
    name = f"fb{uuid.uuid4().hex[:6]}"
    cleanup_containers.append(name)
    cfg, job = _job(tmp_path, name, ["sh", "-c", PROBE])
    cs = ContainerSpec.from_launch(_spec(job, [str(job.log_root)] + ARGS), "tok", 1)
    job.log_root.mkdir(parents=True)  # SystemdRuntime.start does this before it starts the unit
    text = render_service(cs, podman="/usr/bin/podman")
    unit = cs.name
    start = _unquote_exec(next(ln for ln in text.splitlines() if ln.startswith("ExecStart=")), unit)
    stop = _unquote_exec(next(ln for ln in text.splitlines() if ln.startswith("ExecStop=")), unit)
    assert "--sdnotify=conmon" in start and "--cgroups=split" in start and "--rm" in start

    notify = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(notify))
    sock.settimeout(30)
    cg = f"isaacd-test-{name}"
    roots = [r for r in ("/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd", "/sys/fs/cgroup")
             if os.path.exists(f"{r}/cgroup.procs")]
    for r in roots:
        os.makedirs(f"{r}/{cg}", exist_ok=True)
    moves = "; ".join(f"echo $$ > {r}/{cg}/cgroup.procs" for r in roots)
    env = {**{k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}, "NOTIFY_SOCKET": str(notify),
           "PODMAN_SYSTEMD_UNIT": unit + ".service"}
    try:
        r = subprocess.run(["sh", "-c", f'{moves}; exec "$@"', "sh", *start], env=env, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, f"podman {ver}: {r.stderr}"
        msgs = ""
        while "READY=1" not in msgs:
            msgs += sock.recv(4096).decode() + "\n"
        mainpid = int(re.search(r"MAINPID=(\d+)", msgs).group(1))
        assert Path(f"/proc/{mainpid}/comm").read_text().strip() == "conmon"
        cid = Path(f"/run/{unit}.cid").read_text().strip()
        _ready(job)
        assert (job.log_root / "args.txt").read_text().splitlines() == ARGS
        # the container's processes are in the unit's payload cgroup (what the systemd runtime signals)
        payload = cgroup_pids("/" + cg, only_prefix="libpod-payload-")
        assert payload
        for p in payload:
            os.kill(p, signal.SIGINT)
        wait_for(lambda: not Path(f"/proc/{mainpid}").exists(), 20, what="conmon (the unit's main PID) to exit")
        r = subprocess.run(["podman", "events", "--stream=false", "--since", "2m", "--filter", f"container={cid}",
                            "--filter", "event=died", "--format", "json"], capture_output=True, text=True)
        died = [json.loads(ln) for ln in r.stdout.splitlines() if ln.strip()]
        # what the unit's ExecMainStatus and `isaacd status` report: the trainer's own exit code from its
        # SIGINT handler (4), not 130 (killed by SIGINT: the signal arrived before the handler, or missed it)
        codes = [{k.lower(): v for k, v in e.items()}.get("containerexitcode") for e in died]
        assert codes == [4], r.stdout
        r = subprocess.run(stop, capture_output=True, text=True, env=env)  # ExecStop= / ExecStopPost=
        assert r.returncode == 0, r.stderr
        assert subprocess.run(["podman", "container", "exists", cid]).returncode == 1
    finally:
        sock.close()
        subprocess.run(["podman", "rm", "-f", "-i", f"isaaclab-job-{name}"], capture_output=True)
        Path(f"/run/{unit}.cid").unlink(missing_ok=True)
        for r in roots:
            for d in sorted(Path(f"{r}/{cg}").glob("**/"), key=lambda p: -len(p.parts)):
                try:
                    d.rmdir()
                except OSError:
                    pass


# ---- the supervisor with runtime = "podman", end to end ------------------------------------------
@pytest.mark.slow
def test_supervisor_podman_job_resumes_adopts_and_stops(tmp_path, podman_url, supervisor_factory,
                                                        cleanup_containers):
    name = f"sp{uuid.uuid4().hex[:6]}"
    cleanup_containers.append(name)
    # the venv's python in the container (a rootfs overlay of this host) runs the trainer through the shim,
    # bind-mounted read-only, exactly as an Isaac Lab image runs isaaclab.sh -p <shim> train.py
    jobs = builtin_job(name, runtime="podman", launcher=[str(TRAINER.with_name("python"))], save_interval=1,
                       log_root=str(tmp_path / "logs"),
                       extra_args=["agent.num_steps_per_env=8"], restart={"backoff_initial": 0.2},
                       container={"image": "/:O", "shm_size": "256m"}, spare="off")  # spares: the next test
    cfg = write_config(tmp_path, jobs)
    sup = supervisor_factory(cfg)

    def job():
        return sup.job(name)

    wait_for(lambda: (j := job())["checkpoint"] and j["checkpoint"]["iteration"] >= 1, 120, what="a checkpoint")
    j = job()
    assert j["runtime"] == "podman" and j["container_id"] and j["pid"]
    subprocess.run(["podman", "kill", f"isaaclab-job-{name}"], check=True, capture_output=True)
    j = wait_for(lambda: (j := job())["restarts"] == 1 and j["state"] == "running" and j, 120, what="the resume")
    started = [e for e in sup.events(name) if e["event"] == "started"]
    assert started[-1]["resume_from"] is not None  # from the checkpoint, not from scratch
    assert "/opt/isaacd/isaacd_shim.py" in started[-1]["argv"]  # the container command runs the shim
    assert j["iteration"] >= started[-1]["resume_from"]["iteration"]  # rsl_rl re-runs the loaded iteration
    cid = j["container_id"]

    sup.stop()  # container jobs keep running without the supervisor
    assert subprocess.run(["podman", "container", "inspect", "-f", "{{.State.Running}}", cid],
                          capture_output=True, text=True).stdout.strip() == "true"
    sup = supervisor_factory(cfg)
    wait_for(lambda: any(e["event"] == "adopted" for e in sup.events(name)), 30, what="adoption")
    j = job()
    assert j["container_id"] == cid and j["restarts"] == 1
    ids = subprocess.run(["podman", "ps", "-q", "--filter", f"label=isaacd.job={name}"], capture_output=True,
                         text=True).stdout.split()
    assert len(ids) == 1  # adopted, not duplicated

    sup.cli("stop", name)
    j = wait_for(lambda: (j := job())["state"] == "stopped" and j, 60, what="graceful stop")
    ex = [e for e in sup.events(name) if e["event"] == "exited"][-1]
    assert ex["code"] == 0 and not ex["external_stop"]  # the shim caught SIGINT and saved
    saved = [e for e in sup.events(name) if e["event"] == "trainer_saved_on_stop"]
    assert saved and saved[-1]["checkpoint"]  # reported through the side channel mounted into the container


def _containers(job: str, running_only: bool = False) -> dict[str, str]:
    """name -> id of the job's containers (running ones, or all)."""
    out = subprocess.run(["podman", "ps", "--format", "{{.Names}} {{.ID}}", "--filter", f"label=isaacd.job={job}"]
                         + ([] if running_only else ["-a"]), capture_output=True, text=True).stdout
    return dict(line.split() for line in out.splitlines() if line.strip())


def _spare_ready(sup, name: str, not_pid: int | None = None):  # noqa: ANN001, ANN202
    j = sup.job(name)
    s = j["spare"]
    return j["state"] == "running" and s.get("state") == "ready" and s.get("pid") != not_pid and j


@pytest.mark.slow
def test_a_spare_container_takes_the_attempt_over_and_dies_with_its_supervisor(tmp_path, podman_url,
                                                                              supervisor_factory, cleanup_containers):
    """runtime = "podman" with a warm spare: a second container of the job's spec, parked; at a crash it becomes the
    attempt (its container, its logs); a supervisor killed with SIGKILL takes its parked spare with it, the next one
    adopts the attempt and does not duplicate it; ended spare containers are removed at the next launch."""
    name = f"ss{uuid.uuid4().hex[:6]}"
    cleanup_containers.append(name)
    jobs = builtin_job(name, runtime="podman", launcher=[str(TRAINER.with_name("python"))], save_interval=1,
                       log_root=str(tmp_path / "logs"), extra_args=["agent.num_steps_per_env=8"],
                       restart={"backoff_initial": 0.2}, container={"image": "/:O", "shm_size": "256m"},
                       spare="imports")
    cfg = write_config(tmp_path, jobs)
    sup = supervisor_factory(cfg)
    j = wait_for(lambda: _spare_ready(sup, name), 180, what="a ready spare")
    spare_pid = j["spare"]["pid"]
    live = _containers(name, running_only=True)
    spares = [n for n in live if n.startswith(f"isaaclab-job-{name}-spare-")]
    assert len(live) == 2 and len(spares) == 1 and f"isaaclab-job-{name}" in live, live
    assert "warm spare" in sup.cli("status").stdout
    # a resume point past model_0.pt first (the spare can be ready before one on a loaded host): the takeover's output
    # then starts past "Learning iteration 0/", which tells it from the first container's below
    j = wait_for(lambda: (x := sup.job(name))["checkpoint"] and x["checkpoint"]["iteration"] >= 1 and x, 120,
                 what="a checkpoint past iteration 0")

    # kill -9 of the trainer: the spare's container is the next attempt's, under its own name
    os.kill(j["pid"], signal.SIGKILL)
    wait_for(lambda: len([e for e in sup.events(name) if e["event"] == "started"]) == 2, 60, what="the takeover")
    s = [e for e in sup.events(name) if e["event"] == "started"][-1]
    assert s["warm_spare"] is True and s["pid"] == spare_pid and s["resume_from"] is not None
    j = wait_for(lambda: (x := sup.job(name))["state"] == "running" and (x["iteration"] or 0)
                 > s["resume_from"]["iteration"] and x, 60, what="training in the spare's container")
    assert j["container_id"].startswith(live[spares[0]]) or live[spares[0]].startswith(j["container_id"][:12])
    logs = sup.cli("logs", name, "-n", "100000").stdout
    # `isaacd logs` follows the attempt into the spare's container: its output starts at the resume point (the
    # crashed first container's, `isaaclab-job-<name>`, starts at iteration 0)
    r = s["resume_from"]["iteration"]
    assert f"Learning iteration {r}/" in logs and "Learning iteration 0/" not in logs, logs[-2000:]

    # a new spare parks; the supervisor dies (SIGKILL): the parked spare's container exits by itself (EOF on its
    # FIFO), the attempt's runs on
    j = wait_for(lambda: _spare_ready(sup, name, spare_pid), 180, what="a second ready spare")
    parked = next(n for n in _containers(name, running_only=True) if n != spares[0])
    attempt_cid = j["container_id"]
    sup.stop(signal.SIGKILL)
    wait_for(lambda: parked not in _containers(name, running_only=True), 30, what="the parked spare gone")
    assert spares[0] in _containers(name, running_only=True)
    sup = supervisor_factory(cfg)
    wait_for(lambda: any(e["event"] == "adopted" for e in sup.events(name)), 60, what="adoption")
    assert sup.job(name)["container_id"] == attempt_cid and sup.job(name)["restarts"] == 1

    # stop: the attempt (the former spare) saves and exits 0; at rest no container of the job runs
    sup.cli("stop", name)
    wait_for(lambda: sup.job(name)["state"] == "stopped", 60, what="stopped")
    assert [e for e in sup.events(name) if e["event"] == "exited"][-1]["code"] == 0
    wait_for(lambda: not _containers(name, running_only=True), 30, what="no container of the job running")
    # the next launch removes the ended spare containers (the killed parked one, the former attempt's)
    sup.cli("start", name)
    wait_for(lambda: sup.job(name)["state"] == "running", 60, what="running again")
    ended = [n for n, _ in _containers(name).items() if n in (parked, spares[0])]
    assert ended == [], ended
