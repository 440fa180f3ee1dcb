"""The real Isaac Lab 3.0.0 (pip form) in a Podman container, driven by the real `isaacd run`.

`runtime = "podman"` with `image = "/:O"`: the container is an overlay of this host's root, so `.venv-isaaclab3`
(the launcher) and the repository's USD assets are inside at the same paths; isaacd bind-mounts the shim, the log
root and the shim's side channel. What a container job of a pip install needs beyond a process job:
`isaaclab_version = "3.0"` (isaacd reads a pip install's generation by running the launcher on the host, and a
rootfs image has no tag to read it from) and, for speed, the Warp kernel cache as a volume (every container
starts from the image again: without it each launch compiles Warp's kernels anew). No `container.user`: the
overlay's root runs the trainer. `device = "cpu"`: no CDI device is passed (`bench/isaaclab3_h200.sh` runs the
same job on an H200 with `nvidia.com/gpu=0`).

Needs root and a working podman (`tests/testbed/host-setup.sh`, run by scripts/test.sh) and `.venv-isaaclab3`
(scripts/isaaclab3-venv.sh). In CI (`CI` set, as root) a missing piece fails the test instead of skipping it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from helpers import builtin_job, wait_for, write_config
from isaaclab3_helpers import ASSET_ROOT, BOOT, PY, events, run_dirs, started, steps

from isaacd.observations.checkpoints import newest_complete

pytestmark = [pytest.mark.podman, pytest.mark.slow, pytest.mark.isaaclab3]

def _problem() -> str | None:
    if os.geteuid() != 0:
        return "the podman tests run rootful podman (needs root)"
    if not PY.exists():
        return f"{PY} missing: scripts/isaaclab3-venv.sh builds it (scripts/test.sh runs it)"
    if not (ASSET_ROOT / "Isaac/IsaacLab/Robots/Classic/Cartpole/cartpole.usd").exists():
        return f"the cart-pole USD is missing under {ASSET_ROOT}"
    try:
        r = subprocess.run(["podman", "info", "--format", "{{.Host.OCIRuntime.Name}}"], capture_output=True,
                           text=True, timeout=60)
    except FileNotFoundError:
        return "podman is not installed: run tests/testbed/host-setup.sh"
    if r.returncode != 0:
        return f"podman does not work here ({r.stderr.strip()[-200:]}): run tests/testbed/host-setup.sh"
    return None


@pytest.fixture
def podman_api(monkeypatch):
    """A private Podman API service for this test's supervisor; the job's containers removed afterwards."""
    why = _problem()
    if why:
        if os.environ.get("CI") and os.geteuid() == 0:
            pytest.fail(why)  # CI runs as root with Podman set up: a skip there would prove nothing
        pytest.skip(why)
    # outside tmp_path: supervisor_factory's teardown SIGKILLs whatever mentions tmp_path
    sock = Path(f"/tmp/isaacd-il3-podman-{uuid.uuid4().hex[:8]}.sock")
    url = f"unix://{sock}"
    proc = subprocess.Popen(["podman", "system", "service", "--time=0", url], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, cwd="/")
    wait_for(lambda: sock.exists(), 30, what="the podman API socket")
    monkeypatch.setenv("ISAACD_PODMAN_URL", url)
    jobs: list[str] = []
    yield jobs
    for job in jobs:
        ids = subprocess.run(["podman", "ps", "-aq", "--filter", f"label=isaacd.job={job}"], capture_output=True,
                             text=True).stdout.split()
        if ids:
            subprocess.run(["podman", "rm", "-f", "-v", *ids], capture_output=True)
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
    sock.unlink(missing_ok=True)


def il3_podman_job(tmp_path: Path, name: str, total: int, spare: str) -> str:
    """The real Isaac Lab's cart-pole as a podman job on CPU, the host's Warp cache mounted at the same path."""
    warp = Path.home() / ".cache" / "warp"
    warp.mkdir(parents=True, exist_ok=True)
    return builtin_job(name, workflow="rsl_rl", launcher=[str(PY)], task="Isaac-Cartpole-Direct", num_envs=16,
                       device="cpu", max_iterations=total, save_interval=5, stop_timeout=60.0, runtime="podman",
                       isaaclab_version="3.0", log_root=str(tmp_path / "logs"), spare=spare,
                       environment={"ISAACSIM_ASSET_ROOT": str(ASSET_ROOT), "WARP_CACHE_PATH": str(warp)},
                       container={"image": "/:O", "shm_size": "1g", "volumes": [f"{warp}:{warp}"]})


def test_real_isaac_lab_in_podman_kill_stop_start_completed_exactly(tmp_path, podman_api, supervisor_factory):
    total = 10
    name = f"ilp{uuid.uuid4().hex[:6]}"
    podman_api.append(name)
    job = il3_podman_job(tmp_path, name, total, spare="off")  # a cold container restart; a spare's: the test below
    # the divergence watchdog off: a value-loss spike right after a resume of a barely trained cart-pole would roll
    # the run back (this is about crashes and resumes; the watchdog has tests of its own)
    sp = supervisor_factory(write_config(tmp_path, job + "\n[jobs.watchdogs.divergence]\nenabled = false\n"))
    argv = wait_for(lambda: started(sp, name), 60, what="started")[0]["argv"]
    # the container's command: the venv's python runs the bind-mounted shim, which runs `python -m isaaclab train`
    assert argv[:5] == [str(PY), "/opt/isaacd/isaacd_shim.py", "-m", "isaaclab", "train"], argv
    assert argv[5:7] == ["--rl_library", "rsl_rl"] and "agent.device=cpu" in argv and "--device" in argv

    # kill -9 of the trainer (the container's PID 1, by its host pid): a cold start of a new container, resumed
    # from the newest complete checkpoint or snapshot of the job's own run
    j = wait_for(lambda: (x := sp.job(name))["state"] == "running" and (x["iteration"] or 0) >= 2 and x, BOOT,
                 interval=0.2, what="iteration 2")
    assert j["runtime"] == "podman" and j["container_id"]
    os.kill(j["pid"], signal.SIGSTOP)  # frozen: the newest resume point cannot move between the look and the kill
    first = newest_complete(run_dirs(sp, name)[0]).iteration
    os.kill(j["pid"], signal.SIGKILL)
    t_kill = time.time()
    wait_for(lambda: len(started(sp, name)) == 2, 60, what="the restart")
    s = started(sp, name)[-1]
    assert s["resume_from"]["iteration"] == first and s["warm_spare"] is False
    assert s["argv"][s["argv"].index("--checkpoint") + 1] == s["resume_from"]["path"]
    wait_for(lambda: len(run_dirs(sp, name)) == 2 and (x := sp.job(name))["run_dir"] == str(run_dirs(sp, name)[-1])
             and x["state"] == "running" and (x["iteration"] or 0) >= first + 2, BOOT, what="training again")
    print(f"real Isaac Lab 3.0 in Podman, CPU: kill -9 -> training again {time.time() - t_kill:.1f} s (cold)")

    # isaacd stop: SIGINT to the container's processes; the shim saves the last finished iteration, exit 0
    run_dir = Path(sp.job(name)["run_dir"])
    sp.cli("stop", name)
    wait_for(lambda: sp.job(name)["state"] == "stopped", 120, what="stopped")
    saved = events(sp, name, "trainer_saved_on_stop")[-1]
    assert events(sp, name, "exited")[-1]["code"] == 0
    assert saved["iteration"] == steps(run_dir)[-1] and Path(saved["checkpoint"]).is_file()

    # isaacd start: resumes from that save, completes at exactly max_iterations
    sp.cli("start", name)
    j = wait_for(lambda: (x := sp.job(name))["state"] in ("completed", "failed") and x, 600, what="completed")
    assert j["state"] == "completed", j["state_reason"]
    runs = started(sp, name)
    assert len(runs) == 3 and runs[-1]["resume_from"]["iteration"] == saved["iteration"]
    for r in runs[1:]:
        a = r["argv"]
        assert a[a.index("--max_iterations") + 1] == str(total - r["resume_from"]["iteration"])
    dirs = run_dirs(sp, name)
    assert len(dirs) == 3
    logged = [steps(d) for d in dirs]
    assert set().union(*map(set, logged)) == set(range(total)) and max(logged[-1]) == total - 1
    assert [x[0] for x in logged[1:]] == [first, saved["iteration"]]  # rsl_rl re-runs the loaded iteration
    assert "device: cpu" in (dirs[0] / "params" / "agent.yaml").read_text()
    out = subprocess.run(["podman", "logs", f"isaaclab-job-{name}"], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True).stdout
    assert "Training time" in out  # the last container's output: the resumed run trained to the end
    for bad in ("Error parsing override", "unrecognized arguments", "error: argument", "Could not override",
                "Torch not compiled with CUDA", "Traceback"):
        assert bad not in out, bad


def test_a_booted_spare_container_takes_over_exactly_as_a_cold_resume(tmp_path, podman_api, supervisor_factory):
    """Issue 21 item 3 on the real Isaac Lab 3.0: a booted spare in a second container of the job's spec. It boots
    the train script into its staging (mounted at the same path), parks at learn(), and at a kill -9 becomes the
    attempt in its own container: the checkpoint isaacd chose, the run dir a cold start would make, its TensorBoard
    steps; `isaacd logs` shows its output."""
    total = 400
    name = f"ibs{uuid.uuid4().hex[:6]}"
    podman_api.append(name)
    job = il3_podman_job(tmp_path, name, total, spare="booted")
    sp = supervisor_factory(write_config(tmp_path, job + "\n[jobs.watchdogs.divergence]\nenabled = false\n"))

    def ready():  # noqa: ANN202
        x = sp.job(name)
        s = x["spare"]
        return x["state"] == "running" and (x["iteration"] or 0) >= 3 and s.get("state") == "ready" \
            and s.get("mode") == "booted" and x

    # the trainer held (SIGSTOP) from iteration 3 until the spare container is ready: its iterations past the kill
    # point would only take the CPU from the spare's boot (suite time, session 18). And held only once a resume point
    # past model_0.pt is complete (a snapshot is written beside training, so on a loaded host iteration 3 can come
    # first: CI of a341eed resumed from model_0.pt), else the takeover's own output starts at "Learning iteration 0/"
    # and could not be told from the first container's below
    held = wait_for(lambda: (x := sp.job(name))["state"] == "running" and (x["iteration"] or 0) >= 3
                    and (c := newest_complete(Path(x["run_dir"]))) is not None and c.iteration >= 1 and x,
                    3 * BOOT, interval=0.2, what="iteration 3 and a resume point past iteration 0")
    os.kill(held["pid"], signal.SIGSTOP)
    j = wait_for(ready, 3 * BOOT, interval=0.2, what="a booted spare container ready")
    assert j["pid"] == held["pid"], (j, held)
    exp = Path(j["run_dir"]).parent
    assert [d.name for d in exp.iterdir()] == [Path(j["run_dir"]).name]  # the boot's run is staged, not here
    spare_container = next(n for n in subprocess.run(
        ["podman", "ps", "--format", "{{.Names}}", "--filter", f"label=isaacd.job={name}"], capture_output=True,
        text=True).stdout.split() if n.startswith(f"isaaclab-job-{name}-spare-"))
    os.kill(j["pid"], signal.SIGSTOP)
    point = newest_complete(run_dirs(sp, name)[0]).iteration
    os.kill(j["pid"], signal.SIGKILL)
    t_kill = time.time()
    wait_for(lambda: len(started(sp, name)) == 2, 60, what="the takeover")
    s = started(sp, name)[-1]
    assert s["warm_spare"] is True and s["pid"] == j["spare"]["pid"] and s["resume_from"]["iteration"] == point
    wait_for(lambda: len(run_dirs(sp, name)) == 2 and (x := sp.job(name))["state"] == "running"
             and (x["iteration"] or 0) >= point + 2, BOOT, what="training again in the spare's container")
    print(f"real Isaac Lab 3.0 in Podman, CPU, booted spare container: kill -9 -> training again "
          f"{time.time() - t_kill:.1f} s")
    assert sp.job(name)["container_id"] == subprocess.run(
        ["podman", "inspect", "-f", "{{.Id}}", spare_container], capture_output=True, text=True).stdout.strip()

    sp.cli("stop", name)
    wait_for(lambda: sp.job(name)["state"] == "stopped", 120, what="stopped")
    saved = events(sp, name, "trainer_saved_on_stop")[-1]
    assert events(sp, name, "exited")[-1]["code"] == 0
    dirs = run_dirs(sp, name)
    assert len(dirs) == 2 and sorted(d.name for d in exp.iterdir()) == sorted(d.name for d in dirs)
    logged = [steps(d) for d in dirs]
    assert set().union(*map(set, logged)) == set(range(saved["iteration"] + 1)) and logged[1][0] == point
    agent = (dirs[1] / "params" / "agent.yaml").read_text()
    assert f"max_iterations: {total - point}\n" in agent and f"load_checkpoint: {s['resume_from']['path']}\n" in agent
    staging = tmp_path / "state" / "spare" / name
    wait_for(lambda: not [d for d in staging.iterdir() if d.is_dir()], 30, what="no staging left")
    res = sp.cli("logs", name, "-n", "100000")
    out = res.stdout + res.stderr  # podman logs keeps the container's two streams apart
    assert "booted spare: took over as the attempt" in out and f"Learning iteration {point}/" in out, out[-3000:]
    assert "Learning iteration 0/" not in out  # the first container's output: not the attempt's
    assert "Traceback" not in out
