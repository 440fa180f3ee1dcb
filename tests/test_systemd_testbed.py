"""runtime = "systemd" with real systemd (257, PID 1) and real Podman (5.4, Quadlet), in the testbed
of tests/testbed/systemd-testbed.sh (a Debian trixie rootfs booted with systemd-nspawn; see tests/testbed/tb.py).

- the runtime's lifecycle through Quadlet units, and through the `.service` isaacd writes for
  Podman < 4.4 (forced here, on Podman 5.4, since the testbed has no 4.3);
- the product end to end: `isaacd install-units`, `systemctl start isaaclab-supervisor` (Type=notify),
  a built-in training job as a Quadlet container; the container killed -> resumed from its
  checkpoint; `systemctl restart isaaclab-supervisor` -> adopted, not duplicated; an operator's
  `systemctl stop` of the job unit -> recorded as an operator stop and not fought.

Needs root, systemd-nspawn and debootstrap (`tests/testbed/systemd-testbed.sh prep`); the rootfs
is built once (~60 s) and cached in /tmp/testbed.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "testbed"))
import harness as H  # noqa: E402
import tb as testbed  # noqa: E402

pytestmark = [pytest.mark.systemd, pytest.mark.slow]

PROBE = Path(__file__).parent / "testbed" / "rt_probe.py"
# No Runtime method may wait on a process in the caller (the supervisor's tick): the probe counts every command a
# method starts in the caller's own thread (before: poll ran systemctl show + journalctl there, 20-100 ms; start
# over a live unit waited 15 s for its stop), and that count must be 0. A clock cannot say this on a loaded box (a
# 5 ms call takes 60 when the testbed shares 2 cores with 3 test workers), so the time is only a gross bound, for
# a wait that starts no process (a lock, a sleep): the 15 s one, never a few ms of load.
CALL_MS = 2000


def booted_testbed(name: str):  # noqa: ANN201 - a fixture's generator
    """The testbed `name` booted for a module's tests (skipped where it cannot run), stopped afterwards."""
    why = testbed.unavailable_reason()
    if why:
        pytest.skip(why)
    t = H.make_testbed(name)
    try:
        t.boot()
    except testbed.TestbedUnavailable as exc:
        t.stop()
        pytest.skip(f"testbed does not boot here: {exc}")
    yield t
    t.stop()


@pytest.fixture(scope="module")
def tbed():
    yield from booted_testbed("isaacd-tb-test")


def _probe(t, env: str = "") -> dict:
    r = t.shx(f"{env} {H.VENV}/bin/python {PROBE} /srv/probe-{int(time.time() * 1000)}", check=False, timeout=400)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _check_probe(out: dict) -> None:
    from rt_probe import ARGS

    assert out["args"] == ARGS  # every word arrives verbatim through systemd quoting, % and $ included
    env = out["env"]
    assert env["ACCEPT_EULA"] == "Y" and env["PRIVACY_CONSENT"] == "Y" and env["FROM_CFG"] == "yes"
    assert "NOTIFY_SOCKET" not in env and "HOST_ONLY" not in env
    assert out["describe"]["unit"] == "isaaclab-job-looper.service" and out["describe"]["container_id"]
    assert out["pids"] and out["containers_running"] == 1
    assert out["sigint"]["code"] == 4 and not out["sigint"]["external_stop"], out["sigint"]
    assert out["journal_has_output"]
    assert out["systemctl_stop"]["external_stop"], out["systemctl_stop"]
    assert out["systemctl_stop_activating"]["external_stop"], out["systemctl_stop_activating"]
    assert out["podman_kill"]["signal"] == 9 and not out["podman_kill"]["external_stop"], out["podman_kill"]
    assert out["isaacd_kill"]["signal"] == 9 and not out["isaacd_kill"]["external_stop"]
    assert out["exit0"]["code"] == 0 and out["exit0"]["signal"] is None and not out["exit0"]["external_stop"]
    assert out["exit7"]["code"] == 7
    assert out["exit3_unpolled"]["code"] == 3
    assert out["adopt_wrong_token"] and out["adopt_running"]
    assert out["containers_after_restart_over_live_unit"] == 1
    assert out["sigint_after_replace"]["code"] == 4
    assert out["adopt_ended"] is not None and out["adopt_ended"]["code"] == 0
    assert out["cleanup_calls"] >= 1
    # find(job, token): what a supervisor that died between start() and saving the handle gets back
    assert out["find_wrong_token"] and out["find_running"], out
    assert out["find_sigint"]["code"] == 4 and not out["find_sigint"]["external_stop"], out["find_sigint"]
    assert out["find_ended"] is not None and out["find_ended"]["code"] == 0, out["find_ended"]
    assert out["find_superseded"]
    # a trainer that takes 4 s to save on SIGINT: the stop is polled, no call waits for it
    slow = out["slow_stop"]
    assert slow["code"] == 4 and slow["seconds"] >= 3.5, slow
    assert max(slow["max_call_ms"].values()) < CALL_MS, slow
    # a new start over a live, unadopted unit of the job: stopped first across ticks, never two containers
    rep = out["replace_slow"]
    assert rep["running"] == 1 and out["slow_max_running"] == 1 and rep["seconds"] >= 3.5, rep
    assert max(rep["max_call_ms"].values()) < CALL_MS, rep
    # an ended spare's unit still stopping (4 s) does not hold up the worker: another attempt's kill is carried out
    # and seen first; the spare's unit is stopped and its file gone after
    rel = out["slow_spare_release"]
    print("slow_spare_release", rel)
    assert rel["attempt"]["signal"] == 9 and not rel["spare_released_when_kill_seen"], rel
    assert not rel["spare_file_left"] and rel["spare_unit_state"] == "inactive", rel
    # no Runtime method, over the whole probe, kept the caller (the supervisor's tick) waiting on a process
    assert out["spawned_in_caller"] == {}, out["spawned_in_caller"]
    assert max(out["max_call_ms"].values()) < CALL_MS, out["max_call_ms"]


def test_systemd_runtime_with_quadlet_units(tbed):
    out = _probe(tbed)
    assert out["mode"] == "quadlet" and out["unit_file"].startswith("/etc/containers/systemd/")
    _check_probe(out)


def test_systemd_runtime_with_fallback_service(tbed):
    out = _probe(tbed, "ISAACD_FORCE_SERVICE_FALLBACK=1")
    assert out["mode"] == "service" and out["unit_file"] == "/etc/systemd/system/isaaclab-job-looper.service"
    _check_probe(out)


def test_podman_runtime_under_systemd(tbed):
    """runtime = "podman" on a systemd host with no API socket up: isaacd starts `podman system
    service` as a transient unit of its own, outside the supervisor's cgroup."""
    r = tbed.shx(f"{H.VENV}/bin/python {PROBE} /srv/pprobe-{int(time.time() * 1000)} podman", check=False,
                 timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["service_unit_active"] == "active", out
    assert out["sigint"]["code"] == 4 and not out["sigint"]["external_stop"]
    assert out["env_ok"]


def test_supervisor_unit_end_to_end(tbed):
    t = tbed
    H.install_supervisor(t, H.job_config(backoff_initial=0.5))
    t.sh("systemctl start isaaclab-supervisor", timeout=200)  # Type=notify: returns after READY=1
    show = t.sh("systemctl show isaaclab-supervisor -p ActiveState,Type,WatchdogUSec,NRestarts,StatusText,MainPID "
                "--no-pager").stdout
    props = dict(ln.split("=", 1) for ln in show.splitlines())
    assert props["ActiveState"] == "active" and props["Type"] == "notify" and props["WatchdogUSec"] == "30s"
    assert props["StatusText"]  # STATUS= one-line summary
    main_comm = t.sh(f"cat /proc/{props['MainPID']}/comm").stdout.strip()
    assert main_comm == "isaacd", main_comm  # podman never took over MAINPID

    j = H.wait_job(t, lambda j: j["checkpoint"] and j["checkpoint"]["iteration"] >= 1, 180, "a checkpoint")
    assert j["runtime"] == "systemd" and j["unit"] == H.UNIT and j["container_id"]
    assert len(H.containers(t)) == 1
    logs = t.sh(f"{H.ISAACD} --config /etc/isaacd/isaacd.toml logs -n 200 {H.JOB}").stdout
    assert "Learning iteration" in logs  # the trainer's output is in the journal of the job unit

    # 1. the container is killed -> isaacd resumes it from the checkpoint
    t.shx(f"podman kill {H.CONTAINER}")
    j = H.wait_job(t, lambda j: j["restarts"] == 1 and j["state"] == "running", 180, "the resume")
    started = [e for e in H.events(t) if e["event"] == "started"]
    assert len(started) == 2 and started[-1]["resume_from"] is not None
    exited = [e for e in H.events(t) if e["event"] == "exited"][-1]
    assert exited["signal"] == 9 and not exited["external_stop"]
    assert j["iteration"] >= started[-1]["resume_from"]["iteration"]  # rsl_rl re-runs the loaded iteration
    # each attempt's own output, from the unit's journal (isaacd logs --attempt, docs/history.md)
    one, two = (t.sh(f"{H.ISAACD} --config /etc/isaacd/isaacd.toml logs --attempt {n} -n 5000 {H.JOB}").stdout
                for n in (1, 2))
    assert "Learning iteration 0/" in one and "Loading model checkpoint" not in one, one[-2000:]
    assert "Loading model checkpoint" in two and "Learning iteration 0/" not in two, two[-2000:]
    cid = H.containers(t)
    assert len(cid) == 1

    # 2. the supervisor restarts -> the job is adopted, not duplicated, restarts still counted
    t.sh("systemctl restart isaaclab-supervisor", timeout=200)
    H.wait(lambda: any(e["event"] == "adopted" for e in H.events(t)), 60, "adoption")
    j = H.wait_job(t, lambda j: j["state"] == "running", 60, "running after adoption")
    assert j["restarts"] == 1 and H.containers(t) == cid
    assert len([e for e in H.events(t) if e["event"] == "started"]) == 2

    # 3. an operator stops the job unit -> operator stop, not restarted
    t.sh(f"systemctl stop {H.UNIT}", timeout=120)
    j = H.wait_job(t, lambda j: j["state"] == "stopped", 60, "the operator stop")
    assert "operator stop outside isaacd" in j["state_reason"] and "systemctl stop" in j["state_reason"]
    time.sleep(3)  # longer than the backoff: still stopped, no container, unit inactive
    assert H.job_status(t)["state"] == "stopped" and H.containers(t) == []
    assert t.sh(f"systemctl is-active {H.UNIT}", check=False).stdout.strip() in ("inactive", "failed")
    assert len([e for e in H.events(t) if e["event"] == "started"]) == 2

    # 4. ... and across a supervisor restart too; `isaacd start` resumes it
    t.sh("systemctl restart isaaclab-supervisor", timeout=200)
    time.sleep(2)
    assert H.job_status(t)["state"] == "stopped" and H.containers(t) == []
    t.sh(f"{H.ISAACD} --config /etc/isaacd/isaacd.toml start {H.JOB}")
    H.wait_job(t, lambda j: j["state"] == "running" and j["attempt"] == 3, 120, "the operator start")

    # 5. isaacd's own graceful stop from inside its (hardened) unit: SIGINT to the trainer, which saves
    t.sh(f"{H.ISAACD} --config /etc/isaacd/isaacd.toml restart {H.JOB}")
    H.wait_job(t, lambda j: j["state"] == "running" and j["attempt"] == 4, 120, "the operator restart")
    exited = [e for e in H.events(t) if e["event"] == "exited"][-1]
    assert exited["attempt"] == 3 and exited["code"] == 0 and not exited["external_stop"], exited
    assert len(H.containers(t)) == 1
    t.sh("systemctl stop isaaclab-supervisor")
    assert len(H.containers(t)) == 1  # the job outlives the supervisor
