"""isaacd inside the systemd testbed: install the supervisor unit, run a builtin job as a Quadlet
container, and read what the supervisor says. Shared by tests/test_systemd_testbed.py and
bench/container-recovery.py.

The checkout and its venv are bind-mounted into the testbed at the same paths (the venv's Python, pyenv's
or Debian's own interpreter and standard library, read-only: `python_mounts`), and the job container is an
overlay of the testbed's own root (`Rootfs=/:O`) with the same bind mounts: no image registry needed, and the built-in
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
    """The base Python the venv was made from (pyvenv.cfg `home`), e.g. /root/.pyenv/versions/3.11.7 or /usr."""
    for line in (VENV / "pyvenv.cfg").read_text().splitlines():
        k, _, v = line.partition("=")
        if k.strip() == "home":
            return str(Path(v.strip()).parent)
    return sys.base_prefix


def python_mounts() -> list[str]:
    """What the testbed and its job containers mount read-only so that the venv's symlinked interpreter runs there.

    A pyenv Python: its whole root. Debian's own /usr/bin/python3 (what scripts/install.sh prefers): only the
    interpreter, the `python3` name the venv links to, and its standard library, never the host's /usr, which would
    shadow the testbed's own (Debian trixie, with no Python 3.11 of its own: its systemd and Podman would not run)."""
    home = Path(python_home())
    if home.parent.name == "versions":
        return [str(home.parents[1])]
    if home != Path("/usr"):
        return [str(home)]
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"  # the tests run on the venv's Python
    names = [home / "bin" / version, home / "bin" / "python3", home / "lib" / version]
    return [str(p) for p in names if p.exists()]


def make_testbed(name: str = "isaacd-tb") -> Testbed:
    return Testbed(name=name, binds=[str(REPO)], ro_binds=python_mounts())


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
volumes = {json.dumps([f"{REPO}:{REPO}:ro", *(f"{m}:{m}:ro" for m in python_mounts())])}
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
