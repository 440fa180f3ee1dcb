"""isaacd inside the systemd testbed: install the supervisor unit, run a builtin job as a Quadlet
container, and read what the supervisor says. Shared by tests/test_systemd_testbed.py and
bench/container-recovery.py.

The checkout and its venv are bind-mounted into the testbed at the same paths (the venv's Python
comes from pyenv, bind-mounted read-only), and the job container is an overlay of the testbed's own
root (`Rootfs=/:O`) with the same two bind mounts: no image registry needed, and the built-in
trainer (torch + rsl_rl) runs in the container exactly as on the host.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tb import Testbed  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
VENV = REPO / ".venv"
ISAACD = VENV / "bin" / "isaacd"
TRAINER = VENV / "bin" / "isaacd-train"
JOB = "cartpole"
UNIT = f"isaaclab-job-{JOB}.service"
CONTAINER = f"isaaclab-job-{JOB}"
LOG_ROOT = "/srv/isaacd/logs"
STATE_DIR = "/var/lib/isaacd"


def python_home() -> str:
    """The base Python the venv was made from (pyvenv.cfg `home`), e.g. /root/.pyenv/versions/3.11.7."""
    for line in (VENV / "pyvenv.cfg").read_text().splitlines():
        k, _, v = line.partition("=")
        if k.strip() == "home":
            return str(Path(v.strip()).parent)
    return sys.base_prefix


def python_mount() -> str:
    home = Path(python_home())
    # mount the pyenv root (or the base prefix) so the venv's symlinked interpreter resolves
    return str(home.parents[1]) if home.parent.name == "versions" else str(home)


def make_testbed(name: str = "isaacd-tb") -> Testbed:
    return Testbed(name=name, binds=[str(REPO)], ro_binds=[python_mount()])


def job_config(max_iterations: int = 400, backoff_initial: float = 0.5, num_envs: int = 64,
               steps_per_env: int = 8, spare: str = "off") -> str:
    """`spare`: off unless asked (test_systemd_spare.py): a spare's second container and unit would change what
    the tests and bench/container-recovery.py count and time."""
    extra = f'extra_args = ["agent.num_steps_per_env={steps_per_env}"]\nspare = "{spare}"\n'
    return f"""
[supervisor]
state_dir = "{STATE_DIR}"
control_socket = "/run/isaacd/isaacd.sock"
tick_interval = 0.2
log_format = "json"

[metrics]
enabled = false

[gpu]
source = "none"

[[jobs]]
name = "{JOB}"
runtime = "systemd"
workflow = "builtin"
task = "Isaacd-Cartpole-v0"
num_envs = {num_envs}
max_iterations = {max_iterations}
save_interval = 1
device = "cpu"
log_root = "{LOG_ROOT}"
stop_timeout = 20
launcher = ["{TRAINER.with_name("python")}"]  # the venv python runs the trainer through the shim
{extra}
[jobs.restart]
backoff_initial = {backoff_initial}
max_restarts = 20

[jobs.container]
image = "/:O"
shm_size = "256m"
volumes = ["{REPO}:{REPO}:ro", "{python_mount()}:{python_mount()}:ro"]
"""


def install_supervisor(tb: Testbed, config: str) -> None:
    r = tb.sh(f"{ISAACD} install-units --bin {ISAACD}")
    assert "isaaclab-supervisor.service" in r.stdout, r
    tb.path("/etc/isaacd/isaacd.toml").write_text(config)
    tb.sh(f"{ISAACD} check-config /etc/isaacd/isaacd.toml")
    tb.sh("systemctl daemon-reload")


def status(tb: Testbed) -> dict[str, Any] | None:
    r = tb.sh(f"{ISAACD} --config /etc/isaacd/isaacd.toml status --json", check=False)
    if r.returncode != 0:
        return None
    try:
        return json.loads(r.stdout)
    except json.JSONDecodeError:
        return None


def job_status(tb: Testbed) -> dict[str, Any] | None:
    st = status(tb)
    if not st:
        return None
    return next((j for j in st["jobs"] if j["name"] == JOB), None)


def events(tb: Testbed) -> list[dict[str, Any]]:
    p = tb.path(f"{STATE_DIR}/jobs/{JOB}.events.jsonl")
    out = []
    try:
        for line in p.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    except FileNotFoundError:
        pass
    return out


def containers(tb: Testbed) -> list[str]:
    r = tb.shx(f"podman ps -q --no-trunc --filter label=isaacd.job={JOB}", check=False)
    return r.stdout.split()


def wait(pred: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (last: {last!r})")


def wait_job(tb: Testbed, cond: Callable[[dict[str, Any]], bool], timeout: float, what: str) -> dict[str, Any]:
    seen: list[dict[str, Any] | None] = [None]

    def check() -> dict[str, Any] | None:
        j = seen[0] = job_status(tb)
        return j if j and cond(j) else None

    try:
        return wait(check, timeout, what)
    except AssertionError as exc:  # say what the job was doing instead, and its last events
        j = seen[0] or {}
        brief = {k: j.get(k) for k in ("state", "state_reason", "attempt", "restarts", "pid", "iteration")}
        tail = [{k: e.get(k) for k in ("event", "detail", "reason", "origin") if e.get(k) is not None}
                for e in events(tb)[-8:]]
        raise AssertionError(f"{exc}; the job: {brief}; its last events: {tail}") from None
