"""End-to-end tests of isaacd's built-in trainer (``isaacd-train``): real rsl_rl, real processes, no mocks.

Every training run is a separate ``python -m isaacd_trainer`` process on the CPU with tiny settings, read back
through its stdout markers, its checkpoints and its TensorBoard event files.
"""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

TRAIN = [sys.executable, "-m", "isaacd_trainer"]
TASK = "Isaacd-Cartpole-v0"
# small and quick: one iteration is 16 envs x 8 steps
QUICK = ["--task", TASK, "--device", "cpu", "--num_envs", "16", "--num_steps_per_env", "8"]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")  # tiny networks: one thread each is faster, and runs overlap
    env.pop("WORLD_SIZE", None)
    env.pop("LOCAL_RANK", None)
    env.pop("RANK", None)
    return env


def run_trainer(args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(TRAIN + args, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)


def start_trainer(args: list[str], cwd: Path) -> tuple[subprocess.Popen, Path, Path]:
    out, err = cwd / "stdout.txt", cwd / "stderr.txt"
    proc = subprocess.Popen(
        TRAIN + args, cwd=cwd, env=_env(), stdout=open(out, "w"), stderr=open(err, "w"), text=True
    )
    return proc, out, err


def run_dir_of(stdout: str) -> Path:
    first = stdout.splitlines()[0]
    m = re.fullmatch(r"ISAACD_RUN_DIR=(.+)", first)
    assert m, f"first stdout line is not the run-dir marker: {first!r}"
    path = Path(m.group(1))
    assert path.is_absolute()
    return path


def wait_run_dir(out: Path, timeout: float = 60) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = out.read_text() if out.exists() else ""
        if "\n" in text:
            return run_dir_of(text)
        time.sleep(0.1)
    raise AssertionError("no ISAACD_RUN_DIR line on stdout")


def scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """All scalars of a run's TensorBoard event files: tag -> [(step, value)] (rsl_rl's SummaryWriter format)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    data: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for f in sorted(run_dir.glob("events.out.tfevents.*")):
        for ev in EventFileLoader(str(f)).Load():
            for v in ev.summary.value:
                val = v.tensor.float_val[0] if v.tensor.float_val else v.simple_value
                data[v.tag].append((ev.step, float(val)))
    return data


def iteration_steps(run_dir: Path) -> list[int]:
    """Iteration numbers logged so far (tags ending in /time are stepped by seconds, not iterations)."""
    return sorted({s for t, vals in scalars(run_dir).items() if not t.endswith("/time") for s, _ in vals})


def checkpoints(run_dir: Path) -> list[int]:
    return sorted(int(p.stem.split("_")[1]) for p in run_dir.glob("model_*.pt"))


def wait_for(cond, timeout: float, what: str, proc: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"trainer exited ({proc.returncode}) while waiting for {what}")
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def procs():
    started: list[subprocess.Popen] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
            p.wait(10)


# ------------------------------------------------------------------------------------------------ cheap checks
def test_help_is_fast_and_imports_no_torch():
    code = (
        "import sys, isaacd_trainer.cli as c\n"
        "assert 'torch' not in sys.modules and 'rsl_rl' not in sys.modules\n"
        "try:\n    c.main(['--help'])\nexcept SystemExit as e:\n    assert e.code == 0\n"
        "assert 'torch' not in sys.modules\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    for flag in ("--task", "--num_envs", "--seed", "--max_iterations", "--device", "--experiment_name", "--run_name",
                 "--resume", "--load_run", "--checkpoint", "--logger", "--log_root", "--save_interval",
                 "--learning_rate", "--num_steps_per_env", "--fault_inf_reward_after", "--fault_hang_after",
                 "--fault_exit_after", "--step_delay"):
        assert flag in r.stdout


def test_argument_parsing():
    from isaacd_trainer.cli import parse_args

    a, o = parse_args(["--task", TASK, "--resume"])
    assert a.resume is True and o == []
    a, _ = parse_args(["--task", TASK, "--resume", "True", "--load_run", "x"])
    assert a.resume is True and a.load_run == "x"
    a, _ = parse_args(["--task", TASK, "--resume", "False"])
    assert a.resume is False
    a, _ = parse_args(["--task", TASK, "--fault_exit_after", "3:17", "--step_delay", "0.5"])
    assert a.fault_exit_after == (3, 17) and a.step_delay == 0.5
    a, o = parse_args(["--task", TASK, "agent.save_interval=7", "agent.algorithm.entropy_coef=0.01", "env.dt=0.01"])
    assert o == [("agent", ["save_interval"], 7), ("agent", ["algorithm", "entropy_coef"], 0.01), ("env", ["dt"], 0.01)]
    for bad in (["--task", TASK, "--bogus"], ["--task", TASK, "stray"], ["--task", TASK, "--fault_exit_after", "3"],
                ["--task", TASK, "--num_envs", "0"], ["--task", TASK, "--logger", "wandb"], []):
        with pytest.raises(SystemExit) as e:
            parse_args(bad)
        assert e.value.code == 2


def test_unknown_task_and_bad_override_fail_clearly(tmp_path):
    r = run_trainer(["--task", "Isaac-Nope-v0", "--device", "cpu"], tmp_path, timeout=60)
    assert r.returncode == 2
    assert "unknown task 'Isaac-Nope-v0'" in r.stderr and TASK in r.stderr
    assert r.stdout == ""
    r = run_trainer(QUICK + ["--max_iterations", "1", "agent.no_such_key=1"], tmp_path, timeout=60)
    assert r.returncode == 2 and "agent.no_such_key" in r.stderr
    assert not (tmp_path / "logs").exists() or not any((tmp_path / "logs").rglob("model_*.pt"))


def test_env_batched_step_and_auto_reset():
    import torch

    from isaacd_trainer.envs.cartpole import CartpoleEnv

    env = CartpoleEnv(num_envs=8, device="cpu", seed=0)
    obs = env.get_observations()
    assert obs["policy"].shape == (8, 4) and env.num_actions == 1 and env.max_episode_length == 500
    # push every cart hard to the right: all fail well before the time limit, each reset in place
    ended = torch.zeros(8, dtype=torch.bool)
    for _ in range(200):
        obs, rew, dones, extras = env.step(torch.ones(8, 1))
        assert rew.shape == (8,) and dones.shape == (8,) and extras["time_outs"].shape == (8,)
        assert not extras["time_outs"].any()
        ended |= dones.bool()
        if dones.any():
            assert (env.episode_length_buf[dones.bool()] == 0).all()
            assert "Episode_Termination/pole_fallen" in extras["log"]
            assert (obs["policy"][dones.bool()].abs() <= 0.05).all()  # fresh episode
    assert ended.all()
    # time-out path: runner may set episode_length_buf (init_at_random_ep_len)
    env.episode_length_buf[:] = env.max_episode_length - 1
    env.state.zero_()
    _, rew, dones, extras = env.step(torch.zeros(8, 1))
    assert dones.all() and extras["time_outs"].all() and (rew == 1.0).all()


# ------------------------------------------------------------------------------------------------ training runs
@pytest.mark.timeout(180)
def test_learning_beats_untrained_policy(tmp_path):
    t0 = time.monotonic()
    r = run_trainer(["--task", TASK, "--device", "cpu", "--num_envs", "128", "--max_iterations", "20",
                     "--seed", "42", "--save_interval", "100"], tmp_path, timeout=170)
    elapsed = time.monotonic() - t0
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = run_dir_of(r.stdout)
    rewards = dict(scalars(run_dir)["Train/mean_reward"])
    untrained = rewards[0]  # episodes collected with the initial policy
    trained = max(rewards[s] for s in (17, 18, 19))
    print(f"learning: mean_reward it0={untrained:.1f} it17-19 max={trained:.1f} in {elapsed:.1f}s")
    assert untrained < 40
    assert trained > 3 * untrained and trained > 75
    assert checkpoints(run_dir) == [0, 19]  # save_interval 100: iteration 0, then the final one


@pytest.mark.timeout(240)
def test_layout_checkpoints_and_resume(tmp_path):
    r = run_trainer(QUICK + ["--max_iterations", "3", "--save_interval", "1", "--experiment_name", "exp",
                             "--run_name", "first"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    run1 = run_dir_of(r.stdout)
    assert run1.parent == (tmp_path / "logs" / "rsl_rl" / "exp").resolve()
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}_first", run1.name)
    assert checkpoints(run1) == [0, 1, 2]
    assert iteration_steps(run1) == [0, 1, 2]
    tags = set(scalars(run1))
    for tag in ("Loss/value", "Loss/surrogate", "Loss/entropy", "Loss/learning_rate", "Policy/mean_std",
                "Perf/total_fps", "Perf/collection_time", "Perf/learning_time", "Train/mean_reward",
                "Train/mean_episode_length"):
        assert tag in tags, sorted(tags)
    assert (run1 / "params" / "agent.yaml").is_file() and (run1 / "params" / "env.yaml").is_file()
    assert f"ISAACD_DONE iteration=2 checkpoint={run1 / 'model_2.pt'}" in r.stdout

    import torch

    ck = torch.load(run1 / "model_2.pt", map_location="cpu", weights_only=False)
    assert {"actor_state_dict", "critic_state_dict", "optimizer_state_dict", "iter", "infos"} <= set(ck)
    assert ck["iter"] == 2

    # resume from model_2.pt: new run dir, numbering continues at 3
    r = run_trainer(QUICK + ["--max_iterations", "2", "--save_interval", "1", "--experiment_name", "exp",
                             "--run_name", "second", "--resume", "--load_run", run1.name,
                             "--checkpoint", "model_2.pt"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    run2 = run_dir_of(r.stdout)
    assert run2 != run1 and run2.parent == run1.parent and run2.name.endswith("_second")
    assert f"Loading model checkpoint from: {run1 / 'model_2.pt'}" in r.stdout
    steps = iteration_steps(run2)
    assert steps == [3, 4] and min(steps) > 2
    assert checkpoints(run2) == [3, 4]
    assert torch.load(run2 / "model_4.pt", map_location="cpu", weights_only=False)["iter"] == 4
    assert checkpoints(run1) == [0, 1, 2]  # the old run is left alone

    # Isaac Lab defaults: bare --resume True picks the newest run and its newest checkpoint; 0 iterations just
    # re-saves it under its own number in the new run dir
    r = run_trainer(QUICK + ["--max_iterations", "0", "--experiment_name", "exp", "--resume", "True"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    run3 = run_dir_of(r.stdout)
    assert f"Loading model checkpoint from: {run2 / 'model_4.pt'}" in r.stdout
    assert checkpoints(run3) == [4] and iteration_steps(run3) == []


def test_resume_missing_or_corrupt_checkpoint_fails_clearly(tmp_path):
    exp = tmp_path / "logs" / "rsl_rl" / "cartpole"
    run = exp / "2024-01-01_00-00-00"
    run.mkdir(parents=True)
    r = run_trainer(QUICK + ["--max_iterations", "1", "--resume", "True", "--load_run", run.name,
                             "--checkpoint", "model_7.pt"], tmp_path, timeout=60)
    assert r.returncode == 3
    assert str(run / "model_7.pt") in r.stderr
    assert "ISAACD_RUN_DIR" not in r.stdout
    assert [p.name for p in exp.iterdir()] == [run.name]  # no new run dir

    (run / "model_7.pt").write_bytes(b"PK\x03\x04 truncated")
    r = run_trainer(QUICK + ["--max_iterations", "1", "--resume", "--load_run", run.name,
                             "--checkpoint", "model_7.pt"], tmp_path, timeout=60)
    assert r.returncode == 3
    assert "cannot read checkpoint" in r.stderr and str(run / "model_7.pt") in r.stderr

    r = run_trainer(QUICK + ["--max_iterations", "1", "--resume", "--load_run", "2099-no-such-run"], tmp_path,
                    timeout=60)
    assert r.returncode == 3 and str(exp / "2099-no-such-run") in r.stderr


# ------------------------------------------------------------------------------------------------ stop + faults
@pytest.mark.timeout(150)
def test_sigint_and_sigterm_stop_gracefully_with_checkpoint(tmp_path, procs):
    runs = {}
    for sig in (signal.SIGINT, signal.SIGTERM):  # two trainers side by side
        cwd = tmp_path / sig.name
        cwd.mkdir()
        proc, out, err = start_trainer(QUICK + ["--max_iterations", "10000", "--save_interval", "1000",
                                                "--step_delay", "0.02"], cwd)
        procs.append(proc)
        runs[sig] = (proc, out, err)
    for sig, (proc, out, err) in runs.items():
        run_dir = wait_run_dir(out, 90)
        wait_for(lambda: len(iteration_steps(run_dir)) >= 2, 90, "two logged iterations", proc)
        proc.send_signal(sig)
        rc = proc.wait(60)
        assert rc == 0, err.read_text()[-3000:]
        last = max(iteration_steps(run_dir))
        assert last >= 1
        assert checkpoints(run_dir) == [0, last]
        assert out.read_text().splitlines()[-1] == (
            f"ISAACD_STOPPED signal={sig.name} iteration={last} checkpoint={run_dir / f'model_{last}.pt'}"
        )
        import torch

        assert torch.load(run_dir / f"model_{last}.pt", map_location="cpu", weights_only=False)["iter"] == last
        assert not list(run_dir.glob(".*.tmp"))


@pytest.mark.timeout(150)
def test_fault_injection(tmp_path, procs):
    """The three faults run side by side: exit with a code, hang, and +inf rewards."""
    started = {}
    for name, extra in (("exit", ["--fault_exit_after", "2:42"]), ("hang", ["--fault_hang_after", "2"]),
                        ("inf", ["--save_interval", "1", "--fault_inf_reward_after", "2"])):
        cwd = tmp_path / name
        cwd.mkdir()
        proc, out, err = start_trainer(QUICK + ["--max_iterations", "10"] + extra, cwd)
        procs.append(proc)
        started[name] = (proc, out, err)

    # --fault_exit_after 2:42: status 42 before iteration 2 is logged
    proc, out, err = started["exit"]
    assert proc.wait(120) == 42
    assert "FAULT INJECTION: exiting with status 42 at iteration 2" in err.read_text()
    assert iteration_steps(run_dir_of(out.read_text())) == [0, 1]

    # --fault_inf_reward_after 2: the update of iteration 2 diverges; rsl_rl 5.5 crashes inside it
    # ("normal expects all elements of std >= 0.0"), so TensorBoard never sees iteration 2
    proc, out, err = started["inf"]
    assert proc.wait(120) == 1
    stderr = err.read_text()
    assert "FAULT INJECTION: rewards are +inf from iteration 2 on" in stderr
    assert "training diverged" in stderr
    stdout = out.read_text()
    assert stdout.splitlines()[-1].startswith("ISAACD_FAILED iteration=2 nonfinite=1 ")
    run_dir = run_dir_of(stdout)
    assert iteration_steps(run_dir) == [0, 1]
    for _, v in scalars(run_dir)["Loss/value"]:
        assert math.isfinite(v)
    assert checkpoints(run_dir) == [0, 1]  # nothing written from the diverged policy

    # --fault_hang_after 2: alive, silent, deaf to SIGTERM
    proc, out, err = started["hang"]
    run_dir = wait_run_dir(out)
    wait_for(lambda: "FAULT INJECTION: hanging at iteration 2" in err.read_text(), 90, "the hang", proc)
    assert iteration_steps(run_dir) == [0, 1]
    proc.send_signal(signal.SIGTERM)
    time.sleep(3)
    assert proc.poll() is None
    assert iteration_steps(run_dir) == [0, 1]
    proc.kill()
    assert proc.wait(10) == -signal.SIGKILL


def test_distributed_cpu_is_refused(tmp_path):
    env = _env()
    env.update(WORLD_SIZE="2", LOCAL_RANK="0", RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="29599")
    r = subprocess.run(TRAIN + QUICK + ["--max_iterations", "1"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2
    assert "NCCL" in r.stderr and "cuda:<LOCAL_RANK>" in r.stderr
