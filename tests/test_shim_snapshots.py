"""The launcher shim's per-iteration snapshots (trainer/shim.py) with real torch and real rsl-rl-lib.

At every iteration boundary rank 0 writes ``<run_dir>/isaacd_snapshot_<N>.pt``: what the runner's own ``save`` would
write for iteration N (so ``OnPolicyRunner.load`` and Isaac Lab's ``--checkpoint`` take it), atomically, from a
background thread, pruned to ``ISAACD_SNAPSHOT_KEEP``; it never changes what the trainer computes.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from test_shim import SHIM, by, events, shim_env  # noqa: E402
from test_trainer import PY, QUICK, V23, checkpoints, procs, run, run_dirs, scalars, start, wait_for  # noqa: E402

__all__ = ["procs"]  # the fixture
SNAP_RE = re.compile(r"^isaacd_snapshot_(\d+)\.pt$")


def snapshots(run_dir: Path) -> list[int]:
    return sorted(int(m.group(1)) for m in map(SNAP_RE.match, os.listdir(run_dir)) if m)


def same(a, b, where: str = "") -> None:
    """Deep equality of two torch.load results: same types, same keys in the same order, equal tensors."""
    import torch

    assert type(a) is type(b), (where, type(a), type(b))
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        assert getattr(a, "_metadata", None) == getattr(b, "_metadata", None), where
        for k in a:
            same(a[k], b[k], f"{where}/{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}[{i}]")
    else:
        assert a == b, (where, a, b)


def fresh_runner():
    """A real OnPolicyRunner of the built-in cart-pole task, as the train script builds it (no log dir)."""
    from isaacd_trainer import runtime

    env_cfg, agent_cfg = runtime.load_cfgs("Isaacd-Cartpole-v0")
    agent_cfg["device"] = "cpu"
    env = runtime.make_env("Isaacd-Cartpole-v0", env_cfg, 16, "cpu", 1)
    return runtime.make_runner(env, agent_cfg, log_dir=None, device="cpu")


# ------------------------------------------------------------------------------------------------ content and pruning
@pytest.mark.timeout(180)
def test_a_snapshot_every_iteration_is_the_runners_own_save_and_loads(tmp_path):
    import torch

    from isaacd_trainer import upstream

    ev = tmp_path / "ev.jsonl"
    r = run([PY, SHIM] + V23[1:] + QUICK + ["--max_iterations", "8", "agent.save_interval=1"], tmp_path,
            env=shim_env(ev, ISAACD_SNAPSHOT_KEEP="3"))
    assert r.returncode == 0, r.stderr[-3000:]
    (rd,) = run_dirs(tmp_path)
    evs = events(ev)
    saved = by(evs, "snapshot_saved")
    # one per iteration boundary: after 0..6 (after 7, the last, learn() returns and rsl_rl saves model_7.pt)
    assert [e["iteration"] for e in saved] == list(range(7))
    for e in saved:
        assert e["path"] == str(rd / f"isaacd_snapshot_{e['iteration']}.pt")
        assert e["copy_seconds"] >= 0 and e["write_seconds"] > 0 and e["bytes"] > 1000
    assert snapshots(rd) == [4, 5, 6]  # ISAACD_SNAPSHOT_KEEP=3
    assert not [p for p in os.listdir(rd) if "isaacd" in p and not SNAP_RE.match(p)]  # no temp files left
    # rsl_rl's own checkpoints are untouched and reported as before; no snapshot is reported as a checkpoint
    assert checkpoints(rd) == list(range(8))
    assert [e["iteration"] for e in by(evs, "checkpoint_saved")] == list(range(8)) + [7]
    assert not by(evs, "snapshot_skipped")
    for n in (4, 5, 6):
        snap = torch.load(rd / f"isaacd_snapshot_{n}.pt", weights_only=False)
        # exactly what the runner's save() wrote for the same iteration (rsl_rl saved every iteration here)
        same(snap, torch.load(rd / f"model_{n}.pt", weights_only=False))
        assert snap["iter"] == n
        runner = fresh_runner()
        runner.load(str(rd / f"isaacd_snapshot_{n}.pt"))
        assert runner.current_learning_iteration == n
        same(runner.alg.save()["actor_state_dict"], snap["actor_state_dict"])
    # Isaac Lab's default checkpoint pattern never picks a snapshot; an explicit one does
    root = str(rd.parent)
    assert upstream.get_checkpoint_path(root, rd.name, "model_.*.pt").endswith("model_7.pt")
    assert upstream.get_checkpoint_path(root, rd.name, r"isaacd_snapshot_5\.pt").endswith("isaacd_snapshot_5.pt")


@pytest.mark.timeout(240)
@pytest.mark.parametrize("env, expected", [
    ({"ISAACD_SNAPSHOT_EVERY": "3"}, [0, 3, 6]),
    ({"ISAACD_SNAPSHOT_EVERY": "0"}, []),
    ({"ISAACD_SNAPSHOT_MIN_SECONDS": "3600"}, [0]),
    ({"ISAACD_SNAPSHOT_BUDGET": "1e-9"}, [0]),  # no training time covers a snapshot's cost: only the first
], ids=["every-3", "off", "min-seconds", "budget"])
def test_every_min_seconds_and_off(tmp_path, env, expected):
    ev = tmp_path / "ev.jsonl"
    r = run([PY, SHIM] + V23[1:] + QUICK + ["--max_iterations", "9"], tmp_path,
            env=shim_env(ev, ISAACD_SNAPSHOT_KEEP="10", **env))
    assert r.returncode == 0, r.stderr[-3000:]
    (rd,) = run_dirs(tmp_path)
    assert [e["iteration"] for e in by(events(ev), "snapshot_saved")] == expected
    assert snapshots(rd) == expected


@pytest.mark.timeout(240)
def test_training_is_identical_with_and_without_snapshots(tmp_path):
    import torch

    results = {}
    for mode, env in (("on", {}), ("off", {"ISAACD_SNAPSHOT_EVERY": "0"})):
        d = tmp_path / mode
        d.mkdir()
        r = run([PY, SHIM] + V23[1:] + QUICK + ["--max_iterations", "10", "--seed", "7"], d,
                env=shim_env(d / "ev.jsonl", **env))
        assert r.returncode == 0, r.stderr[-3000:]
        (rd,) = run_dirs(d)
        losses = {t: [v for _, v in vals] for t, vals in scalars(rd).items() if t.startswith("Loss/")}
        results[mode] = (torch.load(rd / "model_9.pt", weights_only=False), losses)
        assert bool(snapshots(rd)) == (mode == "on")
    on, off = results["on"], results["off"]
    same(on[0], off[0])  # final weights, optimiser state, normalisers: bit for bit
    assert on[1] and on[1] == off[1]  # every logged loss of every iteration


# ------------------------------------------------------------------------------------------------ crash consistency
SLOW_WRITER_SCRIPT = """
# The built-in trainer, with the shim's snapshot writer slowed down: it writes half the bytes, fsyncs, then sleeps
# (so a kill -9 lands mid-write), only on the writer thread (rsl_rl's own saves are untouched).
import io, os, sys, threading, time
import torch

_real = torch.save
DELAY = float(os.environ["SLOW_SNAPSHOT_SECONDS"])

def slow_save(obj, f, *a, **kw):
    if threading.current_thread().name != "isaacd-snapshot-writer" or not hasattr(f, "write"):
        return _real(obj, f, *a, **kw)
    buf = io.BytesIO()
    _real(obj, buf, *a, **kw)
    data = buf.getvalue()
    f.write(data[: len(data) // 2]); f.flush(); os.fsync(f.fileno())
    time.sleep(DELAY)
    f.write(data[len(data) // 2:])

torch.save = slow_save
from isaacd_trainer.cli import main
sys.exit(main(sys.argv[1:]))
"""


def assert_no_torn_snapshot(rd: Path) -> list[str]:
    """Every file named like a snapshot opens with torch.load and holds its iteration; returns the other leftovers."""
    import torch

    for n in snapshots(rd):
        assert torch.load(rd / f"isaacd_snapshot_{n}.pt", weights_only=False)["iter"] == n
    return [p for p in os.listdir(rd) if "isaacd_snapshot" in p and not SNAP_RE.match(p)]


@pytest.mark.timeout(240)
def test_kill_9_mid_write_leaves_no_torn_snapshot(tmp_path, procs):
    (tmp_path / "slow.py").write_text(SLOW_WRITER_SCRIPT)
    ev = tmp_path / "ev.jsonl"
    p = start([PY, SHIM, str(tmp_path / "slow.py")] + QUICK + ["--max_iterations", "100000"], tmp_path,
              env=shim_env(ev, SLOW_SNAPSHOT_SECONDS="30"))
    procs.append(p)
    wait_for(lambda: run_dirs(tmp_path), 90, "run dir", p)
    rd = run_dirs(tmp_path)[0]
    # the first snapshot is being written: half of it is on disk under its temp name
    wait_for(lambda: [f for f in os.listdir(rd) if f.startswith(".isaacd_snapshot_0.pt.tmp.")
                      and (rd / f).stat().st_size > 0], 60, "a half-written snapshot", p)
    # training is not held up by the busy writer: it goes on, and skipping is reported once (then every 100th)
    wait_for(lambda: len(checkpoints(rd)) and by(events(ev), "snapshot_skipped"), 60, "snapshot_skipped", p)
    p.kill()
    p.wait(10)
    leftovers = assert_no_torn_snapshot(rd)
    assert snapshots(rd) == [] and leftovers and not any(f.endswith(".pt") for f in leftovers)
    (skipped,) = by(events(ev), "snapshot_skipped")
    assert skipped["skipped"] == 1 and skipped["iteration"] == 1 and skipped["reason"] == "writer busy"


@pytest.mark.timeout(240)
def test_kill_9_at_random_moments(tmp_path, procs):
    """A larger network (megabytes per snapshot), killed at random moments: never a torn isaacd_snapshot_*.pt."""
    import random

    rng = random.Random(11)
    for round_ in range(3):
        d = tmp_path / f"r{round_}"
        d.mkdir()
        p = start([PY, SHIM] + V23[1:] + QUICK + ["--max_iterations", "100000", "agent.actor.hidden_dims=[512,512]",
                                                  "agent.critic.hidden_dims=[512,512]"], d,
                  env=shim_env(d / "ev.jsonl"))
        procs.append(p)
        wait_for(lambda: by(events(d / "ev.jsonl"), "snapshot_saved"), 90, "first snapshot", p)
        time.sleep(rng.uniform(0.0, 1.5))
        p.kill()
        p.wait(10)
        rd = run_dirs(d)[0]
        leftovers = assert_no_torn_snapshot(rd)
        assert snapshots(rd) and not any(f.endswith(".pt") for f in leftovers)


@pytest.mark.timeout(180)
def test_stop_waits_for_the_snapshot_in_flight(tmp_path, procs):
    import torch

    (tmp_path / "slow.py").write_text(SLOW_WRITER_SCRIPT)
    ev = tmp_path / "ev.jsonl"
    p = start([PY, SHIM, str(tmp_path / "slow.py")] + QUICK + ["--max_iterations", "100000"], tmp_path,
              env=shim_env(ev, SLOW_SNAPSHOT_SECONDS="2"))
    procs.append(p)
    wait_for(lambda: run_dirs(tmp_path) and [f for f in os.listdir(run_dirs(tmp_path)[0])
                                             if f.startswith(".isaacd_snapshot_")], 90, "a snapshot being written", p)
    p.send_signal(signal.SIGINT)
    assert p.wait(60) == 0, (tmp_path / "trainer.err").read_text()[-3000:]
    rd = run_dirs(tmp_path)[0]
    evs = events(ev)
    names = [e["event"] for e in evs]
    assert names.index("snapshot_saved") < names.index("stopped")
    assert assert_no_torn_snapshot(rd) == []  # the temp file became the snapshot; nothing left behind
    (saved,) = by(evs, "snapshot_saved")
    assert snapshots(rd) == [saved["iteration"]] and saved["write_seconds"] >= 2
    n = by(evs, "stopped")[0]["iteration"]
    assert torch.load(rd / f"model_{n}.pt", weights_only=False)["iter"] == n
