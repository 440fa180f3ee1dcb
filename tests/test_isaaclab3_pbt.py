"""Population-based training on the real Isaac Lab 3.0.0 (issue 40): a population of 2 rsl_rl cart-poles driven by the
real `isaacd run` on the CPU, one exploit carried out through the bottom member's booted spare, the perturbed
learning rate proven in effect from what the trainer itself logged.

The objective is the learning rate rsl_rl logs (`Loss/learning_rate`, fixed schedule), so the ranks are known before
the run: seed 1 samples 1.86e-5 (member 1, the bottom) and 4.95e-4 (member 2, the top); with `factors = [0.5]` and
no resample the exploit's new rate is the top's halved (2.48e-4): neither member's own, and still below the top's, so
the top member is never judged the bottom (it never stops). The test holds trainers with SIGSTOP and releases them in
its own order, so nothing depends on the speed of three Isaac Lab processes on two cores:
  1. both members boot at once; each is held as soon as it trains (the bottom is judged at iteration INTERVAL,
     never before: with the top held it is alone in the ranks, a Keep);
  2. the top member's spare is held at its start (it is not this test; its boot would only take CPU), the bottom's
     boots (`spare = "booted"`: the train script run up to rsl_rl's `learn()`) until it is ready;
  3. the top member trains until it is ranked with a complete checkpoint at iteration TOP_AT, and is held again;
  4. the bottom member trains to its judgement (held there until its stop is sent): rank 2 of 2, it copies the
     top's checkpoint; its trainer saves at its next iteration boundary and its booted spare goes on from the copy
     with the new rate;
  5. once it has, the top is released; both train to MAX, which lies INTERVAL past the copy's iteration at most, so
     the bottom is not judged again (one exploit, one spare boot).

What proves what (read from the installed wheels, the code of record):
  * the rate in effect: rsl_rl 5.5.1 logs `Loss/learning_rate` each iteration (`runners/on_policy_runner.py`
    `learn()` hands `self.alg.learning_rate` to `utils/logger.py`, which writes it at step `it`);
    `algorithms/ppo.py` `load()` sets `self.learning_rate = self.optimizer.param_groups[0]["lr"]`, the copy's rate
    (the top's); Isaac Lab 3.0's `isaaclab_rl/entrypoints/backends/train_rsl_rl.py` builds the runner and calls
    `runner.load(resume_path)` (the spare's go does the same through the shim) before `learn()`. So the first value
    logged in the run dir that resumed from the copy is the top's rate unless isaacd set the new one again after
    that load (launch/exploit.py, the shim's `_set_algorithm`): it must be the new one, at the copy's iteration, and
    at every iteration after.
  * no iteration lost: rsl_rl's `on_policy_runner.py` `learn()` goes on at the loaded checkpoint's iteration
    (`current_learning_iteration`), writing TensorBoard step `it` for each; the copy's run dir has every step from
    the copy's iteration to MAX - 1, the top member's one run dir every step 0..MAX - 1.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from helpers import wait_for
from isaaclab3_helpers import ASSET_ROOT, BOOT, PY, TASK, events, run_dirs, started, steps
from test_isaaclab3_real import _real_isaaclab, assert_clean_log  # noqa: F401 (the fixture: skip, or fail in CI)
from test_isaaclab3_sweep import logged
from test_queue_e2e import QUIET, host

from isaacd.control import request
from isaacd.sweeps.sampler import sample
from isaacd.sweeps.space import LogUniform

pytestmark = [pytest.mark.slow, pytest.mark.isaaclab3]

INTERVAL = 4  # iterations between a member's judgements
TOP_AT = 4  # the top member is held once ranked at this iteration or later, with a complete checkpoint
MAX = TOP_AT - 1 + INTERVAL  # the copy lies at TOP_AT - 1 or later: the bottom is never judged again after it
LRS = [v["lr"] for v in sample({"lr": LogUniform(1e-5, 1e-3)}, 2, 1)]  # the sweep's own sampler, its seed

POPULATION = """
[sweep]
name = "pp"
trials = 2
seed = 1
[sweep.objective]
tag = "Loss/learning_rate"
mode = "max"
smooth = 1
[sweep.scheduler]
kind = "pbt"
interval = {interval}
quantile = 0.5
factors = [0.5]
resample_probability = 0.0
[sweep.space]
"agent.algorithm.learning_rate" = {{ loguniform = [1e-5, 1e-3] }}
[job]
workflow = "rsl_rl"
task = "{task}"
launcher = ["{py}"]
device = "cpu"
gpu_memory = "10GiB"
num_envs = 16
max_iterations = {total}
save_interval = 1
stop_timeout = 60.0
spare = "booted"
log_root = "{logs}"
extra_args = ["agent.algorithm.schedule=fixed", "agent.num_steps_per_env=8", "agent.algorithm.num_learning_epochs=1",
              "agent.algorithm.num_mini_batches=1"]
[job.environment]
ISAACSIM_ASSET_ROOT = "{assets}"
WARP_CACHE_PATH = "{warp}"
OMP_NUM_THREADS = "1"
{quiet}
"""


def sweep(sp) -> dict:  # noqa: ANN001
    """The sweep's status as the control socket answers it (what `isaacd sweep status --json` prints; a poll
    through the socket, not a client process per look: three Isaac Lab processes share the two cores)."""
    return request(sp.socket, {"cmd": "sweep-status", "sweep": "pp"}, timeout=5)


def member(status: dict, job: str) -> dict:
    return next(t for t in status["trials"] if t["job"] == job)


def training_pid(sp, job: str) -> int | None:  # noqa: ANN001
    try:
        j = sp.job(job)
    except Exception:  # noqa: BLE001 - the control socket busy for a moment (three boots on two cores)
        return None
    return j["pid"] if j["state"] == "running" and j["iteration"] is not None else None


def hold(pid: int) -> None:
    os.kill(pid, signal.SIGSTOP)


def release(pid: int) -> None:
    os.kill(pid, signal.SIGCONT)


def saved_at(shim_events: Path) -> int:
    """The newest iteration the trainer's shim says it saved a checkpoint at (-1: none yet)."""
    try:
        lines = shim_events.read_text().splitlines()
    except FileNotFoundError:
        return -1
    saved = [-1]
    for line in lines:
        if '"checkpoint_saved"' in line:
            try:
                saved.append(json.loads(line).get("iteration", -1))
            except json.JSONDecodeError:  # the line being written as we read
                pass
    return max(saved)


def test_real_isaaclab_population_one_exploit_through_the_booted_spare_with_the_new_rate_in_effect(
        tmp_path, supervisor_factory):
    bottom, top = "pp-t001", "pp-t002"
    assert LRS[0] < LRS[1]  # member 1 the bottom, member 2 the top
    new_lr = float(f"{LRS[1] * 0.5:.6g}")
    t0 = time.monotonic()
    cfg = host(tmp_path, free=tuple(range(8)))
    sp = supervisor_factory(cfg)
    path = tmp_path / "pp.sweep.toml"
    path.write_text(POPULATION.format(interval=INTERVAL, total=MAX, task=TASK, py=PY, logs=tmp_path / "logs",
                                      assets=ASSET_ROOT, warp=Path.home() / ".cache" / "warp",
                                      quiet=QUIET.replace("[jobs.watchdogs.", "[job.watchdogs.")))
    said = sp.cli("sweep", "submit", str(path)).stdout
    assert "sweep pp: 2 trials submitted (pp-t001 .. pp-t002)" in said and "scheduler pbt" in said

    held: dict[str, int] = {}
    while len(held) < 2:  # 1. each member held as soon as it trains (both boot at once)
        for job in (bottom, top):
            if job not in held and (pid := training_pid(sp, job)):
                hold(pid)
                held[job] = pid
        assert time.monotonic() - t0 < 2 * BOOT, f"the members did not train: {sp.job(bottom)}, {sp.job(top)}"
        time.sleep(0.02)
    # 2. the top's spare held at its start; the bottom's booted spare ready
    top_spare = wait_for(lambda: (s := sp.job(top)["spare"] or {}).get("pid") not in (None, held[top])
                         and s["pid"], BOOT, interval=0.05, what="the top member's spare started")
    hold(top_spare)
    phases = {"members training": time.monotonic() - t0}
    ready = wait_for(lambda: (s := sp.job(bottom)["spare"] or {}).get("state") == "ready" and s, 2 * BOOT,
                     interval=0.1, what="the bottom member's booted spare ready")
    assert ready["mode"] == "booted" and ready["pid"] != held[bottom], ready
    phases["bottom's spare ready"] = time.monotonic() - t0
    # 3. the top trains until the sweep ranks it with a complete checkpoint at TOP_AT, then is held
    release(held[top])

    def top_ranked() -> bool:
        j = sp.job(top)
        return ((j["iteration"] or 0) >= TOP_AT and (j["checkpoint"] or {}).get("iteration", -1) >= TOP_AT - 1
                and member(sweep(sp), top)["objective"] is not None)
    wait_for(top_ranked, BOOT, interval=0.05, what="the top member ranked with a checkpoint")
    hold(held[top])
    assert sp.job(top)["state"] == "running", sp.job(top)  # (MAX lies INTERVAL - 1 past TOP_AT: not finished)
    # 4. the bottom trains to its judgement and is held there (its shim's own checkpoint_saved line, read every 5 ms:
    # a quiet machine trains an iteration in ~0.1 s, and a stop that came after its last one would find the script
    # in Isaac Lab's close_env, not an exploit); released once the exploit's stop was sent, which it then takes at
    # its next boundary, before MAX; it goes on through its booted spare
    shim_events = tmp_path / "state" / "shim" / bottom / "attempt-1.jsonl"
    release(held[bottom])
    wait_for(lambda: saved_at(shim_events) >= INTERVAL, 2 * BOOT, interval=0.005, what="the bottom member judged")
    hold(held[bottom])
    decided = wait_for(lambda: events(sp, bottom, "member_exploit"), 2 * BOOT, interval=0.1,
                       what="the bottom member's exploit decided")
    phases["exploit decided"] = time.monotonic() - t0
    wait_for(lambda: events(sp, bottom, "stopping"), 2 * BOOT, interval=0.05, what="the bottom member's stop sent")
    release(held[bottom])
    done = wait_for(lambda: events(sp, bottom, "member_exploited"), 2 * BOOT, interval=0.1,
                    what="the bottom member's exploit carried out")
    phases["exploit carried out"] = time.monotonic() - t0
    # 5. the top released: both train to MAX
    release(held[top])
    wait_for(lambda: sweep(sp)["state"] == "done", 2 * BOOT, interval=0.2, what="the population done")
    seconds = time.monotonic() - t0
    status = json.loads(sp.cli("sweep", "status", "pp", "--json").stdout)

    ex = decided[0]
    assert len(decided) == len(done) == 1, (decided, done)
    assert (ex["source_job"], ex["rank"], ex["of"], ex["iteration"]) == (top, 2, 2, INTERVAL), ex
    assert ex["old"] == {"agent.algorithm.learning_rate": LRS[0]} and ex["new"] == {
        "agent.algorithm.learning_rate": new_lr}, ex
    # the lineage in `isaacd sweep status --json`: from whom, at which iteration, which values, a copy made
    lineage = member(status, bottom)["lineage"]
    assert [(e["from_job"], e["at"], e["copied"], e["new"]) for e in lineage] == [
        (top, INTERVAL, True, {"agent.algorithm.learning_rate": new_lr})], lineage
    assert member(status, bottom)["values"] == {"agent.algorithm.learning_rate": new_lr}
    assert member(status, top)["lineage"] == [] and status["best"] == 2
    copied = events(sp, bottom, "checkpoint_copied")
    assert len(copied) == 1 and copied[0]["source"] == top, copied
    copy = Path(copied[0]["path"])
    at = copied[0]["iteration"]
    assert copy.parent.name.endswith(f"_pbt-from-{top}-at-{at}") and copy.name == f"model_{at}.pt", copy
    assert TOP_AT - 1 <= at < MAX

    # the bottom's next attempt resumed from that copy, through its booted spare
    runs = started(sp, bottom)
    assert [r["attempt"] for r in runs] == [1, 2], runs
    after = runs[1]
    assert after["resume_from"]["path"] == str(copy) and after["warm_spare"] is True, after
    took = events(sp, bottom, "spare_took_over")
    assert [(e["attempt"], e["mode"], e["pid"]) for e in took] == [(2, "booted", ready["pid"])], took
    argv = after["argv"]
    assert f"agent.algorithm.learning_rate={new_lr}" in argv and argv[argv.index("--checkpoint") + 1] == str(copy)
    # its own trainer was asked to stop (a save at its next iteration boundary) and exited cleanly, not killed
    ended = [e for e in events(sp, bottom, "exited") if e["attempt"] == 1]
    assert [(e["requested"], e["code"]) for e in ended] == [(True, 0)] and ended[0]["iteration"] >= INTERVAL, ended
    # the perturbed rate in effect from the trainer's own log: in the run dir the copy resumed into, the first step
    # is the copy's iteration and its rate the new one (not the copy's: the top's, which rsl_rl's load() took), and
    # so is every step after, to the end: none lost
    new_run = run_dirs(sp, bottom)[1]
    rates = logged(new_run, "Loss/learning_rate")
    assert min(rates) == at and rates[at] == pytest.approx(new_lr, rel=1e-6), (at, rates)
    assert all(v == pytest.approx(new_lr, rel=1e-6) for v in rates.values()), rates
    assert steps(new_run) == list(range(at, MAX)), steps(new_run)
    # the bottom's own run before it: its own rate, every step to its stop's save
    own = run_dirs(sp, bottom)[0]
    assert steps(own) == list(range(ended[0]["iteration"] + 1)) and all(
        v == pytest.approx(LRS[0], rel=1e-6) for v in logged(own, "Loss/learning_rate").values())
    # the top member never stopped: one attempt, one run dir, every step, its own rate throughout
    assert [r["attempt"] for r in started(sp, top)] == [1] and not events(sp, top, "stopping")
    assert [(e["requested"], e["iteration"]) for e in events(sp, top, "exited")] == [(False, MAX - 1)]
    assert [d.name for d in run_dirs(sp, top)] == [run_dirs(sp, top)[0].name]
    assert steps(run_dirs(sp, top)[0]) == list(range(MAX))
    top_rates = logged(run_dirs(sp, top)[0], "Loss/learning_rate")
    assert all(v == pytest.approx(LRS[1], rel=1e-6) for v in top_rates.values()), top_rates
    assert {member(status, j)["state"] for j in (bottom, top)} == {"completed"}
    for job in (bottom, top):
        assert_clean_log(tmp_path, job)
    # `isaacd sweep best`: the top member's job file, its schedule (never exploited: its own rate all along) and its
    # newest complete checkpoint, the file its trainer saved last
    best = sp.cli("sweep", "best", "pp").stdout
    assert 'name = "pp-best"' in best and f"agent.algorithm.learning_rate={LRS[1]!r}" in best
    assert any(line.split()[1:] == [f"0-{MAX - 1}", "(now)", top, repr(LRS[1])] for line in best.splitlines()), best
    last = run_dirs(sp, top)[0] / f"model_{MAX - 1}.pt"
    assert f'# checkpoint = "{last}"' in best.splitlines() and last.is_file(), best
    print(f"population of 2 on the real Isaac Lab: {seconds:.1f} s from the supervisor's start to the sweep done; "
          + ", ".join(f"{k} at {v:.1f} s" for k, v in phases.items()) + f"; load average {os.getloadavg()}")
