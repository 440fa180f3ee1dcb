"""Population-based training end to end (issue 40): a real `isaacd run`, the real built-in trainer (rsl_rl) and the
CLI, on a scripted 8-GPU host (the queue places the members by gpu_memory; they train on the CPU).

The objective is the learning rate the trainer itself logs (rsl_rl's `Loss/learning_rate`, fixed schedule), so the
ranks are known before the run (seed 1 samples 1.86e-5 and 4.95e-4): the member with the lower rate is the bottom one,
and at its interval it exploits
the other: it saves, copies the top member's newest complete checkpoint, and goes on from it with the top member's
rate perturbed by 0.8 or 1.2. The trainer's own log proves the new rate in effect at the first iteration after the
exploit (rsl_rl's PPO.load would have taken the copy's rate; the shim sets the new one again after that load), and
the member's TensorBoard steps show where it went on: at the source's checkpoint, nothing of its own lost before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import wait_for
from test_queue_e2e import QUIET, host

pytestmark = pytest.mark.slow

POPULATION = """
[sweep]
name = "pop"
trials = 2
seed = 1
[sweep.objective]
tag = "Loss/learning_rate"
mode = "max"
smooth = 1
[sweep.scheduler]
kind = "pbt"
interval = 4
quantile = 0.5
resample_probability = 0.0
[sweep.space]
"agent.algorithm.learning_rate" = {{ loguniform = [1e-5, 1e-3] }}
[job]
device = "cpu"
gpu_memory = "10GiB"
num_envs = 32
max_iterations = 14
save_interval = 1
stop_timeout = 60.0
spare = false
log_root = "{logs}"
extra_args = ["agent.num_steps_per_env=8", "agent.algorithm.schedule=fixed"]
{quiet}
"""


def scalars(run_dir: Path, tag: str) -> dict[int, float]:
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    out: dict[int, float] = {}
    for f in sorted(run_dir.rglob("events.out.tfevents.*")):
        for ev in EventFileLoader(str(f)).Load():
            for v in ev.summary.value:
                if v.tag == tag:
                    out[ev.step] = v.simple_value if v.HasField("simple_value") else float(v.tensor.float_val[0])
    return out


def sweep(sp) -> dict:  # noqa: ANN001
    return json.loads(sp.cli("sweep", "status", "pop", "--json").stdout)


def test_the_bottom_member_exploits_the_top_one_through_a_copy_with_its_new_rate_in_effect(tmp_path, supervisor_factory):
    from isaacd.sweeps.sampler import sample
    from isaacd.sweeps.space import LogUniform
    lrs_sampled = [v["lr"] for v in sample({"lr": LogUniform(1e-5, 1e-3)}, 2, 1)]
    bottom_job, top_job = ("pop-t001", "pop-t002") if lrs_sampled[0] < lrs_sampled[1] else ("pop-t002", "pop-t001")
    bottom_lr, top_lr = sorted(lrs_sampled)
    cfg = host(tmp_path, free=tuple(range(8)))
    sp = supervisor_factory(cfg)
    path = tmp_path / "pop.sweep.toml"
    path.write_text(POPULATION.format(logs=tmp_path / "logs", quiet=QUIET.replace("[jobs.watchdogs.", "[job.watchdogs.")))
    said = sp.cli("sweep", "submit", str(path)).stdout
    assert "sweep pop: 2 trials submitted" in said and "scheduler pbt" in said
    try:
        wait_for(lambda: any(e["event"] == "member_exploited" for e in sp.events(bottom_job)), 90,
                 what="the bottom member's exploit carried out")
    except AssertionError:
        import sys
        for j in (top_job, bottom_job):
            for e in sp.events(j):
                print(j, {k: v for k, v in e.items() if k not in ("argv",)}, file=sys.stderr)
        print(sweep(sp), file=sys.stderr)
        raise
    ex = next(e for e in sp.events(bottom_job) if e["event"] == "member_exploit")
    assert (ex["source_job"], ex["rank"], ex["of"]) == (top_job, 2, 2)
    new_lr = ex["new"]["agent.algorithm.learning_rate"]
    assert new_lr in (pytest.approx(top_lr * 0.8, rel=1e-5), pytest.approx(top_lr * 1.2, rel=1e-5))
    copied = next(e for e in sp.events(bottom_job) if e["event"] == "checkpoint_copied")
    assert copied["source"] == top_job and Path(copied["path"]).parent.name.endswith(
        f"_pbt-from-{top_job}-at-{copied['iteration']}")
    wait_for(lambda: sweep(sp)["state"] == "done", 240, what="the population done")
    status = sweep(sp)
    bottom = next(t for t in status["trials"] if t["job"] == bottom_job)
    assert bottom["exploits"] >= 1 and bottom["lineage"][0]["from_job"] == top_job and bottom["lineage"][0]["copied"]
    # the exploit's run: it starts at the copy's iteration, and its first logged rate is the new one (not the copy's
    # 1e-3, which PPO.load took from the optimizer; not the member's old 1e-5)
    started = [e for e in sp.events(bottom_job) if e["event"] == "started"]
    after = next(s for s in started if s["resume_from"] and "_pbt-from-" in s["resume_from"]["path"])
    run_dirs = sorted(d for d in (tmp_path / "logs").rglob("*") if d.is_dir() and d.parent.name == bottom_job
                      and "_pbt-from-" not in d.name)
    lrs = {step: v for d in run_dirs for step, v in scalars(d, "Loss/learning_rate").items()}
    first = after["resume_from"]["iteration"]
    assert lrs[first] == pytest.approx(new_lr, rel=1e-6), (first, lrs)
    assert all(v == pytest.approx(bottom_lr, rel=1e-5) for s, v in lrs.items() if s < ex["iteration"]), lrs
