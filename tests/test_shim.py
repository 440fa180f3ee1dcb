"""The launcher shim (trainer/shim.py) with real rsl-rl-lib, torch and hydra-core: run as a plain script by path.

It must run a train script exactly like ``python SCRIPT.py`` does, report the run dir and every checkpoint on the
side channel, save ``model_<N>.pt`` at the next iteration boundary on SIGINT/SIGTERM and exit 0, and leave signals
alone with ``ISAACD_SHIM_SAVE_ON_STOP=0``.
"""

from __future__ import annotations

import json
from importlib import metadata
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from test_trainer import (  # noqa: E402
    PY, QUICK, V23, checkpoints, iteration_steps, procs, run, run_dirs, start, trainer_env, wait_for,
)

SHIM = str(Path(__file__).resolve().parent.parent / "trainer" / "shim.py")
__all__ = ["procs"]  # the fixture


def events(path: Path) -> list[dict]:
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [json.loads(line) for line in lines]


def shim_env(ev: Path, **extra: str) -> dict:
    env = trainer_env()
    env["ISAACD_SHIM_EVENTS"] = str(ev)
    env["ISAACD_SNAPSHOT_BUDGET"] = "0"  # a snapshot every iteration, however fast the toy iterations (see budget test)
    env.update(extra)
    return env


def by(evs: list[dict], name: str) -> list[dict]:
    return [e for e in evs if e["event"] == name]


# ------------------------------------------------------------------------------------------------ like python SCRIPT
def test_runs_a_script_and_a_module_exactly_like_python(tmp_path):
    pkg = tmp_path / "proj"
    pkg.mkdir()
    (pkg / "helper_mod.py").write_text("VALUE = 41\n")
    (pkg / "train_like.py").write_text(textwrap.dedent("""
        import os, sys
        import helper_mod  # found through sys.path[0] = the script's directory
        assert "rsl_rl" not in sys.modules and "torch" not in sys.modules  # the shim imports nothing early
        print("argv", sys.argv)
        print("path0", sys.path[0])
        print("name", __name__, os.path.basename(__file__))
        print("value", helper_mod.VALUE + 1)
        sys.exit(int(sys.argv[1]))
    """))
    (tmp_path / "mod_main.py").write_text("import sys\nprint('argv', sys.argv[1:], __name__)\nraise SystemExit(5)\n")
    direct = run([PY, str(pkg / "train_like.py"), "3", "--x", "a=b"], tmp_path)
    ev = tmp_path / "ev.jsonl"
    shimmed = run([PY, SHIM, str(pkg / "train_like.py"), "3", "--x", "a=b"], tmp_path, env=shim_env(ev))
    assert direct.returncode == shimmed.returncode == 3, shimmed.stderr
    assert shimmed.stdout == direct.stdout and "value 42" in direct.stdout and "name __main__" in direct.stdout
    (started,) = events(ev)
    assert started["event"] == "shim_started" and started["script"] == str(pkg / "train_like.py")
    assert started["argv"] == [str(pkg / "train_like.py"), "3", "--x", "a=b"]
    assert started["pid"] > 0 and started["rank"] == 0 and isinstance(started["time"], float)
    d = run([PY, "-m", "mod_main", "q"], tmp_path)
    s = run([PY, SHIM, "-m", "mod_main", "q"], tmp_path)  # no ISAACD_SHIM_EVENTS: writes nothing, runs the same
    assert d.returncode == s.returncode == 5 and d.stdout == s.stdout == "argv ['q'] __main__\n"
    assert run([PY, SHIM], tmp_path).returncode == 2


# ------------------------------------------------------------------------------------------------ side channel
@pytest.mark.timeout(180)
def test_events_of_a_normal_run_and_a_resume(tmp_path):
    ev = tmp_path / "ev.jsonl"
    r = run([PY, SHIM] + V23[1:] + QUICK + ["--max_iterations", "5", "agent.save_interval=2"], tmp_path,
            env=shim_env(ev))
    assert r.returncode == 0, r.stderr[-3000:]
    (rd,) = run_dirs(tmp_path)
    evs = events(ev)
    assert [e["event"] for e in evs][:2] == ["shim_started", "runner_started"]
    (rs,) = by(evs, "runner_started")
    assert rs["run_dir"] == str(rd) and rs["start_iteration"] == 0 and rs["num_learning_iterations"] == 5
    assert rs["runner_class"] == "OnPolicyRunner" and rs["rsl_rl_version"] == metadata.version("rsl-rl-lib")
    saved = [(e["path"], e["iteration"]) for e in by(evs, "checkpoint_saved")]
    # rsl_rl saves 0, 2, 4 periodically and model_4.pt again as the final model
    assert saved == [(str(rd / f"model_{n}.pt"), n) for n in (0, 2, 4, 4)]
    assert by(evs, "learn_finished")[0]["iteration"] == 4 and evs[-1]["event"] == "learn_finished"
    assert not by(evs, "stopped")
    # resume through the shim: checkpoint_loaded with the loaded iter, learn starts at that iteration
    ev2 = tmp_path / "ev2.jsonl"
    time.sleep(1.0)
    r = run([PY, SHIM] + V23[1:] + QUICK + ["--max_iterations", "2", "--resume", "--load_run", rd.name,
                                            "--checkpoint", r"model_2\.pt"], tmp_path, env=shim_env(ev2))
    assert r.returncode == 0, r.stderr[-3000:]
    evs = events(ev2)
    (loaded,) = by(evs, "checkpoint_loaded")
    assert loaded["path"] == str(rd / "model_2.pt") and loaded["iteration"] == 2
    (rs,) = by(evs, "runner_started")
    assert rs["start_iteration"] == 2 and rs["run_dir"] != str(rd)
    assert by(evs, "learn_finished")[0]["iteration"] == 3


# ------------------------------------------------------------------------------------------------ save on stop
@pytest.mark.timeout(240)
def test_stop_saves_at_the_next_boundary_and_exits_0(tmp_path, procs):
    """SIGINT (2.3 mode, rsl_rl saves every iteration: no second save) and SIGTERM (3.x mode: the shim saves)."""
    import torch

    a, b = tmp_path / "int", tmp_path / "term"
    a.mkdir(), b.mkdir()
    eva, evb = a / "ev.jsonl", b / "ev.jsonl"
    pa = start([PY, SHIM] + V23[1:] + QUICK + ["--max_iterations", "1000", "agent.save_interval=1",
                                               "--step_delay", "0.004"], a, env=shim_env(eva))
    pb = start([PY, SHIM, "-m", "isaacd_trainer.isaaclab30", "--rl_library", "rsl_rl"] + QUICK +
               ["--max_iterations", "1000", "agent.save_interval=1000", "--step_delay", "0.004"], b,
               env=shim_env(evb))
    procs += [pa, pb]
    for p, d, ev in ((pa, a, eva), (pb, b, evb)):
        wait_for(lambda ev=ev: by(events(ev), "runner_started"), 90, "runner_started", p)
        t0 = time.monotonic()
        # the shim flushes TensorBoard at every boundary: iteration 2 is readable long before rsl_rl's 10 s flush
        wait_for(lambda d=d: 2 in iteration_steps(run_dirs(d)[-1]), 8, "iteration 2 in TensorBoard", p)
        assert time.monotonic() - t0 < 8
    pa.send_signal(signal.SIGINT)
    pb.send_signal(signal.SIGTERM)
    assert pa.wait(60) == 0, (a / "trainer.err").read_text()[-3000:]
    assert pb.wait(60) == 0, (b / "trainer.err").read_text()[-3000:]
    # the built-in trainer's code after learn() was checked: the saved stop exits at once (tests/test_shim_quick_exit.py)
    assert "Training time:" not in (b / "trainer.out").read_text()
    for d, ev, sig in ((a, eva, "SIGINT"), (b, evb, "SIGTERM")):
        evs = events(ev)
        names = [e["event"] for e in evs]
        assert names.index("stop_requested") < names.index("stopped") and "learn_finished" not in names
        assert by(evs, "stop_requested")[0]["signal"] == sig
        (stopped,) = by(evs, "stopped")
        assert stopped["exit_now"] is True
        rd = run_dirs(d)[-1]
        n = stopped["iteration"]
        assert n >= 2 and stopped["checkpoint"] == str(rd / f"model_{n}.pt")
        assert max(checkpoints(rd)) == n and max(iteration_steps(rd)) == n  # nothing of n+1 was logged
        assert torch.load(rd / f"model_{n}.pt", weights_only=False)["iter"] == n
        # exactly one checkpoint_saved for n: rsl_rl's own periodic save (SIGINT run) or the shim's (SIGTERM run)
        assert [e["iteration"] for e in by(evs, "checkpoint_saved")].count(n) == 1
    assert checkpoints(run_dirs(b)[-1]) == [0, by(events(evb), "stopped")[0]["iteration"]]


@pytest.mark.timeout(180)
def test_stop_before_learn_second_signal_and_switch_off(tmp_path, procs):
    early, twice, off = tmp_path / "early", tmp_path / "twice", tmp_path / "off"
    for d in (early, twice, off):
        d.mkdir()
    long = QUICK + ["--max_iterations", "1000", "agent.save_interval=1000"]
    pe = start([PY, SHIM] + V23[1:] + long, early, env=shim_env(early / "ev.jsonl"))
    # slow steps: the second signal must land before the next iteration boundary completes the first stop
    pt = start([PY, SHIM] + V23[1:] + long + ["--step_delay", "0.5"], twice, env=shim_env(twice / "ev.jsonl"))
    po = start([PY, SHIM] + V23[1:] + long + ["--step_delay", "0.004"], off,
               env=shim_env(off / "ev.jsonl", ISAACD_SHIM_SAVE_ON_STOP="0"))
    procs += [pe, pt, po]
    # a stop while the script still boots (torch, Hydra): nothing to save, so the trainer ends at once, exit 0,
    # without booting on to its first iteration (real Isaac Lab boots for tens of seconds)
    wait_for(lambda: by(events(early / "ev.jsonl"), "shim_started"), 30, "shim_started", pe)
    pe.send_signal(signal.SIGINT)
    assert pe.wait(10) == 0, (early / "trainer.err").read_text()[-3000:]
    evs = events(early / "ev.jsonl")
    assert [e["event"] for e in evs] == ["shim_started", "stop_requested", "stopped"]
    assert by(evs, "stopped")[0] == {**by(evs, "stopped")[0], "iteration": None, "checkpoint": None,
                                     "before_first_iteration": True}
    assert all(checkpoints(d) == [] and iteration_steps(d) == [] for d in run_dirs(early))
    # a second signal exits at once with 128+signum
    wait_for(lambda: by(events(twice / "ev.jsonl"), "checkpoint_saved"), 90, "model_0 saved", pt)
    pt.send_signal(signal.SIGINT)
    time.sleep(0.05)
    pt.send_signal(signal.SIGTERM)
    assert pt.wait(10) == 128 + signal.SIGTERM
    assert not by(events(twice / "ev.jsonl"), "stopped")
    # ISAACD_SHIM_SAVE_ON_STOP=0: exactly as without the shim (KeyboardInterrupt, died of SIGINT, nothing saved)
    wait_for(lambda: run_dirs(off) and 2 in iteration_steps(run_dirs(off)[0]), 90, "iteration 2", po)
    po.send_signal(signal.SIGINT)
    assert po.wait(30) == -signal.SIGINT
    assert "KeyboardInterrupt" in (off / "trainer.err").read_text()
    assert checkpoints(run_dirs(off)[0]) == [0]
    names = [e["event"] for e in events(off / "ev.jsonl")]
    assert "runner_started" in names and "stop_requested" not in names and "stopped" not in names


RANKS_SCRIPT = """
import os, sys
import torch.distributed as dist
# rsl_rl (and tensordict with it) imported before the process group exists, as Isaac Lab's train script does (its
# rsl_rl runner creates the group): imported after, tensordict keeps the group alive past destroy_process_group, and
# gloo's threads still running at interpreter exit now and then abort the first rank to exit (SIGABRT)
from isaacd_trainer import runtime
import rsl_rl.runners
dist.init_process_group("gloo")  # torchrun's env:// rendezvous, CPU
os.environ.pop("WORLD_SIZE")     # rsl_rl itself would insist on NCCL/CUDA for multi-GPU: keep it single-process
env_cfg, agent_cfg = runtime.load_cfgs("Isaacd-Cartpole-v0")
agent_cfg.update(device="cpu", num_steps_per_env=8, save_interval=1000, seed=1 + dist.get_rank())
env = runtime.make_env("Isaacd-Cartpole-v0", env_cfg, 16, "cpu", agent_cfg["seed"])
log_dir = os.path.join(os.getcwd(), "logs", f"rank{dist.get_rank()}")
runner = runtime.make_runner(env, agent_cfg, log_dir=log_dir, device="cpu")
import time
env.pre_step_hook = lambda: time.sleep(0.01 if dist.get_rank() == 0 else 0.002)  # ranks at different speeds
runner.learn(num_learning_iterations=100000)
print("cleanup ran", dist.get_rank(), flush=True)
dist.destroy_process_group()
"""


@pytest.mark.timeout(180)
def test_ranks_agree_on_the_stop_iteration(tmp_path, procs):
    """torchrun, 2 gloo ranks: only rank 1 gets SIGINT; both stop after the same iteration (no hang), exit 0."""
    (tmp_path / "ranks.py").write_text(RANKS_SCRIPT)
    ev = tmp_path / "ev.jsonl"
    p = start([PY, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", SHIM,
               str(tmp_path / "ranks.py")], tmp_path,
              env=shim_env(ev, PYTHONFAULTHANDLER="1"))  # a rank that dies of a signal prints every thread's stack
    procs.append(p)
    wait_for(lambda: len(by(events(ev), "checkpoint_saved")) >= 2 and len(by(events(ev), "runner_started")) == 2,
             90, "both ranks training", p)
    time.sleep(1.0)
    (rank1,) = [e for e in by(events(ev), "shim_started") if e["rank"] == 1]
    os.kill(rank1["pid"], signal.SIGINT)
    assert p.wait(60) == 0, (tmp_path / "trainer.err").read_text()[-3000:]
    evs = events(ev)
    stops = {e["rank"]: e for e in by(evs, "stopped")}
    assert set(stops) == {0, 1} and stops[0]["iteration"] == stops[1]["iteration"] >= 1
    assert [e["rank"] for e in by(evs, "stop_requested")] == [1]
    assert (tmp_path / "trainer.out").read_text().count("cleanup ran") == 2


XV_SCRIPT = """
# A minimal Isaac-Lab-shaped train script for rsl_rl 2.x / 3.x / 4.x (rsl_rl imported late, after "boot").
import os, time
from importlib import metadata

major = int(metadata.version("rsl-rl-lib").split(".")[0])
from isaacd_trainer.envs.cartpole import CartpoleEnv

alg = {"class_name": "PPO", "value_loss_coef": 1.0, "use_clipped_value_loss": True, "clip_param": 0.2,
       "entropy_coef": 0.005, "num_learning_epochs": 2, "num_mini_batches": 2, "learning_rate": 1e-3,
       "schedule": "adaptive", "gamma": 0.99, "lam": 0.95, "desired_kl": 0.01, "max_grad_norm": 1.0}
cfg = {"num_steps_per_env": 8, "save_interval": 1000, "algorithm": alg, "logger": "tensorboard"}


class Cart(CartpoleEnv):
    def step(self, actions):
        time.sleep(0.01)
        return super().step(actions)

    def reset(self):  # rsl_rl 2.x's VecEnv declares it abstract
        return self.get_observations()


if major >= 4:
    env = Cart(16, "cpu", seed=1)
    cfg["obs_groups"] = {"actor": ["policy"], "critic": ["policy"]}
    cfg["actor"] = {"class_name": "MLPModel", "hidden_dims": [32, 32], "activation": "elu", "obs_normalization": True,
                    "stochastic": True, "init_noise_std": 1.0}
    cfg["critic"] = {"class_name": "MLPModel", "hidden_dims": [32, 32], "activation": "elu",
                     "obs_normalization": True, "stochastic": False}
elif major == 3:
    env = Cart(16, "cpu", seed=1)
    cfg["obs_groups"] = {"policy": ["policy"], "critic": ["policy"]}
    cfg["policy"] = {"class_name": "ActorCritic", "init_noise_std": 1.0, "actor_hidden_dims": [32, 32],
                     "critic_hidden_dims": [32, 32], "activation": "elu", "actor_obs_normalization": True,
                     "critic_obs_normalization": True}
else:
    class Env2x:  # rsl_rl 2.x VecEnv: plain tensors, extras["observations"]
        def __init__(self, env):
            self.env, self.num_envs, self.num_actions, self.device = env, env.num_envs, env.num_actions, env.device
            self.num_obs, self.num_privileged_obs = 4, None
            self.max_episode_length, self.cfg = env.max_episode_length, env.cfg

        episode_length_buf = property(lambda s: s.env.episode_length_buf,
                                      lambda s, v: setattr(s.env, "episode_length_buf", v))

        def get_observations(self):
            return self.env.get_observations()["policy"], {"observations": {}}

        def step(self, actions):
            obs, rew, dones, extras = self.env.step(actions)
            extras["observations"] = {}
            return obs["policy"], rew, dones, extras

    env = Env2x(Cart(16, "cpu", seed=1))
    cfg["empirical_normalization"] = True
    cfg["policy"] = {"class_name": "ActorCritic", "init_noise_std": 1.0, "actor_hidden_dims": [32, 32],
                     "critic_hidden_dims": [32, 32], "activation": "elu"}

from rsl_rl.runners import OnPolicyRunner

runner = OnPolicyRunner(env, cfg, log_dir=os.path.abspath(os.path.join("logs", "xv")), device="cpu")
runner.learn(num_learning_iterations=100000)
print("cleanup ran", flush=True)
"""


@pytest.fixture(scope="session")
def rsl_rl_versions(tmp_path_factory):
    """Older rsl-rl-lib releases unpacked side by side (pure-Python wheels, --no-deps); skipped if pip cannot get them."""
    root = tmp_path_factory.mktemp("rsl_rl_versions")

    def get(version: str) -> Path:
        target = root / version
        if not target.exists():
            r = subprocess.run([PY, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                                "--target", str(target), f"rsl-rl-lib=={version}"], capture_output=True, text=True,
                               timeout=180)
            if r.returncode != 0:
                pytest.skip(f"rsl-rl-lib=={version} not installable here: {r.stderr.strip()[-300:]}")
        return target

    return get


@pytest.mark.timeout(240)
@pytest.mark.parametrize("version", ["2.3.3", "3.1.2", "4.0.1"])
def test_save_on_stop_across_rsl_rl_generations(tmp_path, procs, rsl_rl_versions, version):
    import torch

    target = rsl_rl_versions(version)
    (tmp_path / "train_xv.py").write_text(XV_SCRIPT)
    ev = tmp_path / "ev.jsonl"
    env = shim_env(ev)
    env["PYTHONPATH"] = str(target) + os.pathsep + env.get("PYTHONPATH", "")
    p = start([PY, SHIM, str(tmp_path / "train_xv.py")], tmp_path, env=env)
    procs.append(p)
    rd = tmp_path / "logs" / "xv"
    wait_for(lambda: (rd.is_dir() and 2 in iteration_steps(rd)), 90, "iteration 2 in TensorBoard", p)
    p.send_signal(signal.SIGINT)
    assert p.wait(60) == 0, (tmp_path / "trainer.err").read_text()[-3000:]
    assert "cleanup ran" in (tmp_path / "trainer.out").read_text()
    evs = events(ev)
    (rs,) = by(evs, "runner_started")
    assert rs["rsl_rl_version"] == version and rs["run_dir"] == str(rd) and rs["start_iteration"] == 0
    (stopped,) = by(evs, "stopped")
    n = stopped["iteration"]
    assert n >= 2 and stopped["checkpoint"] == str(rd / f"model_{n}.pt") and max(iteration_steps(rd)) == n
    assert checkpoints(rd) == [0, n]
    assert torch.load(rd / f"model_{n}.pt", weights_only=False)["iter"] == n
    # per-iteration snapshots in every generation: the runner's own save() content, the last two kept, loadable
    snaps = sorted(int(f.name.split("_")[2].split(".")[0]) for f in rd.glob("isaacd_snapshot_*.pt"))
    written = [e["iteration"] for e in by(evs, "snapshot_saved")]  # one per boundary unless the writer was busy
    assert written and written == sorted(set(written)) and written[-1] < n and snaps == written[-2:]
    for k in snaps:
        snap = torch.load(rd / f"isaacd_snapshot_{k}.pt", weights_only=False)
        assert snap["iter"] == k and set(snap) == set(torch.load(rd / f"model_{n}.pt", weights_only=False))
