"""Contract tests of isaacd's built-in trainer against Isaac Lab's documented/observed behaviour (no mocks).

Real hydra-core parses the overrides, real rsl-rl-lib trains, every run is its own process on the CPU with tiny
settings, read back through its run dirs under ``<cwd>/logs/rsl_rl/<experiment>/``, its checkpoints and its
TensorBoard event files. Modes: ``python -m isaacd_trainer`` (Isaac Lab 2.1 - 2.3), ``-m isaacd_trainer.isaaclab20``
(<= 2.0), ``-m isaacd_trainer.isaaclab30 --rl_library rsl_rl`` (3.x unified entry point). The launcher shim has its
own file, tests/test_shim.py.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

PY = sys.executable
V23 = [PY, "-m", "isaacd_trainer"]
V20 = [PY, "-m", "isaacd_trainer.isaaclab20"]
V30 = [PY, "-m", "isaacd_trainer.isaaclab30", "--rl_library", "rsl_rl"]
TASK = "Isaacd-Cartpole-v0"
# small and quick: one iteration is 16 envs x 8 steps. --device sets only the simulation's device; the policy stays
# on the agent config's (cuda:0) unless agent.device=... is given, as upstream (this torch has no CUDA)
QUICK_SIM = ["--task", TASK, "--device", "cpu", "--num_envs", "16", "agent.num_steps_per_env=8"]
QUICK = QUICK_SIM + ["agent.device=cpu"]


def trainer_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")  # tiny networks: one thread each is faster, and runs overlap
    for k in ("WORLD_SIZE", "LOCAL_RANK", "RANK", "ISAACD_SHIM_EVENTS", "ISAACD_SHIM_SAVE_ON_STOP",
              "HYDRA_FULL_ERROR"):
        env.pop(k, None)
    return env


def run(cmd: list[str], cwd: Path, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env or trainer_env(), capture_output=True, text=True, timeout=timeout)


def start(cmd: list[str], cwd: Path, env: dict | None = None, name: str = "trainer") -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=cwd, env=env or trainer_env(), stdout=open(cwd / f"{name}.out", "w"),
                            stderr=open(cwd / f"{name}.err", "w"), text=True)


def run_dirs(cwd: Path, experiment: str = "cartpole") -> list[Path]:
    root = cwd / "logs" / "rsl_rl" / experiment
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


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
    """Iteration numbers logged (tags ending in /time are stepped by seconds, not iterations)."""
    return sorted({s for t, vals in scalars(run_dir).items() if not t.endswith("/time") for s, _ in vals})


def printed_iterations(stdout: str) -> list[int]:
    """Iteration numbers rsl_rl printed ("Learning iteration N/M"). For a run that has exited, this and not
    TensorBoard is the record of its last iterations: rsl_rl's SummaryWriter is never closed (its Logger's
    stop_logging_writer stops only W&B/Neptune writers) and writes from a daemon thread, so the scalars still queued
    at the interpreter's exit are lost, upstream as here: under load, a 1-iteration run's file held none (CI, stop 47)."""
    return [int(n) for n in re.findall(r"Learning iteration (\d+)/\d+", stdout)]


def checkpoints(run_dir: Path) -> list[int]:
    return sorted(int(p.stem.split("_")[1]) for p in run_dir.glob("model_*.pt"))


def loaded_from(stdout: str) -> str:
    m = re.search(r"Loading model checkpoint from: (\S+)", stdout)
    assert m, f"no 'Loading model checkpoint' line in stdout:\n{stdout[-2000:]}"
    return m.group(1)


def wait_for(cond, timeout: float, what: str, proc: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"trainer exited ({proc.returncode}) while waiting for {what}")
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def procs():
    started: list[subprocess.Popen] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
            p.wait(10)


# ------------------------------------------------------------------------------------------------ parsers (no torch)
def test_help_is_fast_and_imports_no_torch():
    code = (
        "import sys, isaacd_trainer.cli as c\n"
        "try:\n    c.main(['--help'])\nexcept SystemExit as e:\n    assert e.code == 0\n"
        "assert 'torch' not in sys.modules and 'rsl_rl' not in sys.modules and 'hydra' not in sys.modules\n"
    )
    r = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    for flag in ("--task", "--num_envs", "--seed", "--max_iterations", "--device", "--headless", "--experiment_name",
                 "--run_name", "--resume", "--load_run", "--checkpoint", "--logger", "--distributed",
                 "--fault_inf_reward_after", "--fault_hang_after", "--fault_exit_after", "--fault_once",
                 "--fault_reward_scale_after", "--fault_cuda_oom_above_envs", "--fault_cuda_oom_after_iterations",
                 "--step_delay"):
        assert flag in r.stdout
    # isaacd's old conveniences are gone (Isaac Lab has none of them)
    for gone in ("--log_root", "--save_interval", "--learning_rate", "--num_steps_per_env", "ISAACD_RUN_DIR"):
        assert gone not in r.stdout


def test_parsers_follow_each_generation():
    from isaacd_trainer.isaaclab30 import build_parser as p30
    from isaacd_trainer.train_v2 import build_parser

    p21, p20 = build_parser("2.1"), build_parser("2.0")
    # 2.1 - 2.3: store_true; "--resume True" leaves a stray "True" for Hydra
    a, rest = p21.parse_known_args(["--task", TASK, "--resume", "True", "--load_run", "x"])
    assert a.resume is True and a.load_run == "x" and rest == ["True"]
    a, rest = p21.parse_known_args(["--task", TASK])
    assert a.resume is False and rest == []
    # <= 2.0: type=bool, any non-empty value is True (even "False"); a bare --resume is an argparse error
    assert p20.parse_known_args(["--resume", "True"])[0].resume is True
    assert p20.parse_known_args(["--resume", "False"])[0].resume is True
    assert p20.parse_known_args([])[0].resume is None
    with pytest.raises(SystemExit) as e:
        p20.parse_known_args(["--resume"])
    assert e.value.code == 2
    # 3.x: no --resume, no --load_run (left over, for Hydra to reject). 3.0.0's rsl_rl parser has
    # --[no-]resume_optimizer_state, and argparse takes a bare --resume as its abbreviation (seen on the real one)
    a, rest = p30().parse_known_args(["--task", TASK, "--resume", "--load_run", "x", "--checkpoint", "latest"])
    assert rest == ["--load_run", "x"] and a.checkpoint == "latest" and a.resume_optimizer_state is True
    # isaacd's fault flags are parsed in their own group and never reach Hydra
    a, rest = p21.parse_known_args(["--fault_exit_after", "3:17", "--step_delay", "0.5", "agent.seed=1"])
    assert a.fault_exit_after == (3, 17) and a.step_delay == 0.5 and rest == ["agent.seed=1"]


def test_get_checkpoint_path_semantics(tmp_path):
    from isaacd_trainer.upstream import get_checkpoint_path

    root = tmp_path / "cartpole"
    for run in ("2026-01-01_10-00-00_job", "2026-01-01_10-00-00_jobx", "2026-01-01_09-00-00_job"):
        (root / run).mkdir(parents=True)
        for n in (2, 9, 10):
            (root / run / f"model_{n}.pt").write_bytes(b"x")
    (root / "2026-01-01_10-00-00_job" / "model_7.pt").write_bytes(b"x")
    # re.match is a prefix match: the unanchored name of "..._job" also matches its sibling "..._jobx", which sorts last
    assert get_checkpoint_path(str(root), "2026-01-01_10-00-00_job", "model_.*.pt") == \
        str(root / "2026-01-01_10-00-00_jobx" / "model_10.pt")
    with pytest.raises(ValueError, match=r"No checkpoints in the directory: '.*_jobx' match 'model_7.pt'\."):
        get_checkpoint_path(str(root), "2026-01-01_10-00-00_job", "model_7.pt")
    assert get_checkpoint_path(str(root), "^" + re.escape("2026-01-01_10-00-00_job") + "$", r"^model_7\.pt$") == \
        str(root / "2026-01-01_10-00-00_job" / "model_7.pt")
    # default regexes: newest run, and model_10 sorts after model_9 (key f"{m:0>15}")
    assert get_checkpoint_path(str(root), ".*", "model_.*.pt") == str(root / "2026-01-01_10-00-00_jobx" / "model_10.pt")
    assert get_checkpoint_path(str(root), None) == str(root / "2026-01-01_10-00-00_jobx" / "model_10.pt")
    with pytest.raises(ValueError, match=re.escape(f"No runs present in the directory: '{root}' match: 'nope'.")):
        get_checkpoint_path(str(root), "nope", "model_.*.pt")


def test_env_batched_step_and_auto_reset():
    import torch

    from isaacd_trainer.envs.cartpole import CartpoleEnv

    env = CartpoleEnv(num_envs=8, device="cpu", seed=0)
    obs = env.get_observations()
    assert obs["policy"].shape == (8, 4) and env.num_actions == 1 and env.max_episode_length == 500
    ended = torch.zeros(8, dtype=torch.bool)
    for _ in range(200):
        obs, rew, dones, extras = env.step(torch.ones(8, 1))
        assert rew.shape == (8,) and dones.shape == (8,) and extras["time_outs"].shape == (8,)
        ended |= dones.bool()
        if dones.any():
            assert (env.episode_length_buf[dones.bool()] == 0).all()
            assert (obs["policy"][dones.bool()].abs() <= 0.05).all()  # fresh episode
    assert ended.all()
    env.episode_length_buf[:] = env.max_episode_length - 1
    env.state.zero_()
    _, rew, dones, extras = env.step(torch.zeros(8, 1))
    assert dones.all() and extras["time_outs"].all() and (rew == 1.0).all()


# ------------------------------------------------------------------------------------------------ Hydra (real)
def test_stray_true_and_bad_overrides_exit_1_like_upstream(tmp_path):
    # the pre-fix isaacd argv on Isaac Lab 2.1+: "--resume True" -> Hydra "Error parsing override 'True'", exit 1
    r = run(V23 + QUICK + ["--max_iterations", "1", "--resume", "True", "--load_run", "x"], tmp_path)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "Error parsing override 'True'" in r.stderr
    r = run(V23 + QUICK + ["--max_iterations", "1", "agent.no_such_key=1"], tmp_path)
    assert r.returncode == 1 and "Could not override 'agent.no_such_key'" in r.stderr
    r = run(V23 + QUICK + ["--max_iterations", "1", "--bogus_flag"], tmp_path)
    assert r.returncode == 2 and "unrecognized arguments: --bogus_flag" in r.stderr  # Hydra's own argparse
    # nothing trained, no run directory (Hydra fails before the task function)
    assert run_dirs(tmp_path) == []
    # resume with nothing to resume: get_checkpoint_path's ValueError inside the Hydra task -> exit 1
    # (no experiment dir at all: os.scandir's FileNotFoundError, not caught upstream either)
    r = run(V23 + QUICK + ["--max_iterations", "1", "--resume", "--load_run", "nope"], tmp_path)
    assert r.returncode == 1 and "FileNotFoundError" in r.stderr
    (tmp_path / "logs" / "rsl_rl" / "cartpole" / "other").mkdir(parents=True)
    r = run(V23 + QUICK + ["--max_iterations", "1", "--resume", "--load_run", "nope"], tmp_path)
    assert r.returncode == 1 and "No runs present in the directory" in r.stderr and "match: 'nope'" in r.stderr
    assert [d.name for d in run_dirs(tmp_path)] == ["other"]  # resolved before the new run dir exists


# ------------------------------------------------------------------------------------------------ 2.1 - 2.3
@pytest.mark.timeout(240)
def test_v23_layout_exact_resume_and_vanilla_numbering(tmp_path):
    # fresh run: ./logs/rsl_rl/<experiment>/<timestamp>_<run_name>, Hydra overrides for save_interval etc.
    r = run(V23 + QUICK + ["--max_iterations", "9", "--experiment_name", "exp", "--run_name", "job",
                           "agent.save_interval=7", "agent.algorithm.learning_rate=0.0005",
                           "env.max_episode_length=200"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    (first,) = run_dirs(tmp_path, "exp")
    assert re.fullmatch(r"\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d_job", first.name)
    assert checkpoints(first) == [0, 7, 8] and printed_iterations(r.stdout) == list(range(9))
    agent = (first / "params" / "agent.yaml").read_text()
    assert "save_interval: 7" in agent and "learning_rate: 0.0005" in agent and "experiment_name: exp" in agent
    assert "max_episode_length: 200" in (first / "params" / "env.yaml").read_text()
    assert (tmp_path / "outputs").is_dir()  # Hydra's own output dir, like upstream
    # a sibling run whose name shares the prefix and sorts after it ("..._job" vs "..._jobx", same second)
    sibling = first.with_name(first.name + "x")
    shutil.copytree(first, sibling)
    shutil.copy(first / "model_8.pt", sibling / "model_11.pt")
    # resume exactly <first>/model_7.pt with isaacd's anchored regexes and a bare --resume
    r = run(V23 + QUICK + ["--max_iterations", "3", "--experiment_name", "exp", "--run_name", "job", "--resume",
                           "--load_run", f"^{re.escape(first.name)}$", "--checkpoint", r"^model_7\.pt$",
                           "agent.save_interval=7"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert loaded_from(r.stdout) == str(first / "model_7.pt")
    new = [d for d in run_dirs(tmp_path, "exp") if d not in (first, sibling)]
    assert len(new) == 1  # a new run dir per launch, resumed or not
    # vanilla rsl_rl: iteration 7 runs again, --max_iterations 3 = 7, 8, 9, the final save is model_9.pt
    assert printed_iterations(r.stdout) == [7, 8, 9]
    assert checkpoints(new[0]) == [7, 9]
    assert checkpoints(first) == [0, 7, 8]  # the old run is untouched


# ------------------------------------------------------------------------------------------------ <= 2.0
@pytest.mark.timeout(180)
def test_v20_resume_true_works(tmp_path):
    r = run(V20 + QUICK + ["--max_iterations", "2", "agent.experiment_name=e20"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    (first,) = run_dirs(tmp_path, "e20")
    assert checkpoints(first) == [0, 1]
    r = run(V20 + QUICK + ["--max_iterations", "1", "agent.experiment_name=e20", "--resume", "True",
                           "--load_run", f"^{re.escape(first.name)}$", "--checkpoint", r"^model_0\.pt$"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert loaded_from(r.stdout) == str(first / "model_0.pt")
    r = run(V20 + QUICK + ["--resume"], tmp_path)  # bare --resume: argparse error
    assert r.returncode == 2 and "expected one argument" in r.stderr


# ------------------------------------------------------------------------------------------------ signals, faults
@pytest.mark.timeout(180)
def test_sigint_and_sigterm_save_nothing_without_the_shim(tmp_path, procs):
    a, b = tmp_path / "int", tmp_path / "term"
    a.mkdir(), b.mkdir()
    args = V23 + QUICK + ["--max_iterations", "1000", "agent.save_interval=1000", "--step_delay", "0.003"]
    pa, pb = start(args, a), start(args, b)
    procs += [pa, pb]
    for p, d in ((pa, a), (pb, b)):
        wait_for(lambda d=d: run_dirs(d) and any(run_dirs(d)[0].glob("events.*")) and 3 in iteration_steps(run_dirs(d)[0]),
                 90, "iteration 3 logged", p)
    pa.send_signal(signal.SIGINT)
    pb.send_signal(signal.SIGTERM)
    assert pa.wait(30) == -signal.SIGINT  # KeyboardInterrupt propagates out of learn/Hydra: Python dies of SIGINT
    assert pb.wait(30) == -signal.SIGTERM  # default action
    assert "KeyboardInterrupt" in (a / "trainer.err").read_text()
    for d in (a, b):
        assert checkpoints(run_dirs(d)[0]) == [0]  # nothing saved on the way out


@pytest.mark.timeout(180)
def test_fault_flags_still_work(tmp_path, procs):
    e, n, h = tmp_path / "exit", tmp_path / "inf", tmp_path / "hang"
    for d in (e, n, h):
        d.mkdir()
    pe = start(V23 + QUICK + ["--max_iterations", "10", "--fault_exit_after", "2:17"], e)
    pn = start(V23 + QUICK + ["--max_iterations", "10", "--fault_inf_reward_after", "2"], n)
    ph = start(V23 + QUICK + ["--max_iterations", "50", "--fault_hang_after", "2"], h)
    procs += [pe, pn, ph]
    assert pe.wait(90) == 17
    assert iteration_steps(run_dirs(e)[0]) == [0, 1]
    assert pn.wait(90) == 1  # rsl_rl raises inside the update; Hydra reports it, exit 1
    assert "FAULT INJECTION: rewards are +inf" in (n / "trainer.err").read_text()
    assert 2 not in iteration_steps(run_dirs(n)[0])
    wait_for(lambda: "hanging at iteration 2" in (h / "trainer.err").read_text(), 90, "hang", ph)
    ph.send_signal(signal.SIGINT)
    time.sleep(1.0)
    assert ph.poll() is None  # wedged: only SIGKILL ends it
    ph.kill()
    assert ph.wait(10) == -signal.SIGKILL


# ------------------------------------------------------------------------------------------------ 3.x
@pytest.mark.timeout(120)
def test_v30_device_sets_only_the_sim_the_policy_needs_agent_device(tmp_path):
    # upstream 3.0.0 (train_rsl_rl.py::_run): --device goes to the env only, the runner takes agent_cfg.device
    # (RslRlBaseRunnerCfg default "cuda:0"): on a CPU-only torch the policy's .to("cuda:0") fails
    r = run(V30 + QUICK_SIM + ["--max_iterations", "1"], tmp_path)
    assert r.returncode != 0
    assert "Torch not compiled with CUDA enabled" in r.stderr, r.stderr[-3000:]
    assert all(checkpoints(d) == [] for d in run_dirs(tmp_path))
    r = run(V30 + QUICK_SIM + ["--max_iterations", "1", "agent.device=cpu"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert printed_iterations(r.stdout) == [0] and checkpoints(run_dirs(tmp_path)[-1]) == [0]


@pytest.mark.timeout(240)
def test_v30_checkpoint_contract(tmp_path, procs):
    r = run(V30 + QUICK + ["--max_iterations", "4", "agent.save_interval=2"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    (first,) = run_dirs(tmp_path)
    assert checkpoints(first) == [0, 2, 3] and (first / "run.json").is_file()
    # --load_run no longer exists: it reaches Hydra's parser (exit 2), nothing trains (a bare --resume is taken
    # as --resume_optimizer_state, as by the real 3.0.0)
    r = run(V30 + QUICK + ["--resume", "--load_run", first.name], tmp_path)
    assert r.returncode == 2 and "unrecognized arguments: --load_run" in r.stderr
    # --checkpoint latest: the newest manifested run's last checkpoint; vanilla numbering from there
    time.sleep(1.0)  # run dirs are named by the second
    r = run(V30 + QUICK + ["--max_iterations", "2", "--checkpoint", "latest"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert loaded_from(r.stdout) == str(first / "model_3.pt")
    second = run_dirs(tmp_path)[-1]
    assert printed_iterations(r.stdout) == [3, 4] and checkpoints(second) == [4]
    assert set(iteration_steps(second)) <= {3, 4}  # TensorBoard numbers them alike (its last may be lost, above)
    # an absolute file path is taken as it is (retrieve_file_path), also from an older run
    time.sleep(1.0)
    r = run(V30 + QUICK + ["--max_iterations", "1", "--checkpoint", str(first / "model_2.pt")], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert loaded_from(r.stdout) == str(first / "model_2.pt")
    assert printed_iterations(r.stdout) == [2] and checkpoints(run_dirs(tmp_path)[-1]) == [2]
    # a missing file: FileNotFoundError, exit 1
    r = run(V30 + QUICK + ["--max_iterations", "1", "--checkpoint", str(first / "model_99.pt")], tmp_path)
    assert r.returncode == 1 and "Unable to find the file" in r.stderr
    # a run *directory*: upstream passes the directory text as the checkpoint regex too (update_rsl_rl_cfg set
    # load_checkpoint = --checkpoint), so nothing matches: ValueError, exit 1. Pass a file path instead.
    r = run(V30 + QUICK + ["--max_iterations", "1", "--checkpoint", str(first)], tmp_path)
    assert r.returncode == 1 and "No checkpoints in the directory" in r.stderr
    # Ctrl-C: KeyboardInterrupt is suppressed around learn(): exit 0, nothing saved
    time.sleep(1.0)
    p = start(V30 + QUICK + ["--max_iterations", "1000", "agent.save_interval=1000", "--step_delay", "0.003"],
              tmp_path)
    procs.append(p)
    before = set(run_dirs(tmp_path))
    wait_for(lambda: [d for d in run_dirs(tmp_path) if d not in before and 2 in iteration_steps(d)], 90,
             "iteration 2 logged", p)
    p.send_signal(signal.SIGINT)
    assert p.wait(30) == 0
    (stopped,) = [d for d in run_dirs(tmp_path) if d not in before]
    assert checkpoints(stopped) == [0]
