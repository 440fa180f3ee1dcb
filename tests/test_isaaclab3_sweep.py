"""A sweep on the real Isaac Lab 3.0.0 (issue 39): a 4-trial ASHA sweep over rsl_rl's `agent.algorithm.learning_rate`
and `agent.algorithm.entropy_coef`, driven by the real `isaacd run` on the CPU, with a pause and a promotion, and
each searched value proven in effect from what the trainer itself wrote.

The design is test_sweep_e2e.py's on the real thing: the objective is the learning rate rsl_rl logs
(`Loss/learning_rate`) under a fixed schedule, a grid of four rates, so the ranks are known in advance and, one
trial at a time, every ASHA decision is too (eta 2, one rung):
  t1 (1e-3) alone at the rung: continues to the end;
  t2 (1e-4) rank 2 of 2 (top 1): paused with a save;
  t3 (1e-6) rank 3 of 3 (top 2): paused, which promotes t2 (now rank 2 of 3): t2 resumes from its pause's save;
  t4 (1e-5) rank 3 of 4 (top 2): paused; nothing ranks to promote: the sweep is done, t1 the best.
Five launches of Isaac Lab in all, the fewest a pause and a promotion take: each ~15-30 s to its first iteration on
a loaded 2-core machine (warm Warp cache), and each exit ~6-15 s more (Python's finalization after training). Short
rollouts and one learning epoch (the numbers are not the point: the logged values are), a rung at iteration 2 of 5.

What proves a value in effect (read from the installed wheels, the code of record):
  * the learning rate: rsl_rl 5.5.1 logs the optimizer's actual rate each iteration (`utils/logger.py`:
    `Loss/learning_rate` from `alg.learning_rate`). On resume `algorithms/ppo.py` `load()` takes it from the
    checkpoint's optimizer (`self.learning_rate = self.optimizer.param_groups[0]["lr"]`), not from the command line:
    a trial resumes only its own save, so that is its own rate; the promoted run dir's log proves it. (Isaac Lab 3.0's
    `--no-resume_optimizer_state` would make the configured rate win with a fresh optimizer: not needed, nor wanted,
    for an exact resume.)
  * the entropy coefficient: rsl_rl logs no scalar of it (`Loss/entropy` is the policy's entropy). PPO takes it from
    the config at construction (`ppo.py` `__init__`) and `load()` never touches it; Isaac Lab's train entry point
    (`isaaclab_rl/entrypoints/backends/train_rsl_rl.py` -> `common.dump_train_configs`) writes the agent config it built
    the runner with to `<run dir>/params/agent.yaml` after loading the checkpoint: each attempt's own record.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from helpers import wait_for
from isaaclab3_helpers import ASSET_ROOT, BOOT, PY, TASK, events, run_dirs, started, steps
from test_isaaclab3_real import _real_isaaclab, assert_clean_log  # noqa: F401 (the fixture: skip, or fail in CI)
from test_queue_e2e import QUIET, host

pytestmark = [pytest.mark.slow, pytest.mark.isaaclab3]

LR = {"t001": 1e-3, "t002": 1e-4, "t003": 1e-6, "t004": 1e-5}  # the grid, in trial order
RUNG, TOTAL = 2, 5  # the pause lands an iteration after the rung at most: room for it before the end

SWEEP = """
[sweep]
name = "il"
trials = 4
concurrency = 1
seed = 7
[sweep.objective]
tag = "Loss/learning_rate"
mode = "max"
smooth = 1
[sweep.scheduler]
rungs = [{rung}]
reduction_factor = 2
[sweep.space]
"agent.algorithm.learning_rate" = {{ grid = {grid} }}
"agent.algorithm.entropy_coef" = {{ uniform = [0.001, 0.02] }}
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
spare = false
log_root = "{logs}"
extra_args = ["agent.algorithm.schedule=fixed", "agent.num_steps_per_env=8", "agent.algorithm.num_learning_epochs=1",
              "agent.algorithm.num_mini_batches=1"]
[job.environment]
ISAACSIM_ASSET_ROOT = "{assets}"
WARP_CACHE_PATH = "{warp}"
{quiet}
"""


def sweep_file(tmp_path: Path) -> Path:
    # the watchdogs off (as in test_isaaclab3_real): a value-loss spike of a barely trained cart-pole is not this test
    quiet = QUIET.replace("[jobs.watchdogs.", "[job.watchdogs.")
    path = tmp_path / "il.sweep.toml"
    path.write_text(SWEEP.format(rung=RUNG, total=TOTAL, grid=json.dumps(list(LR.values())), task=TASK, py=PY,
                                 logs=tmp_path / "logs", assets=ASSET_ROOT, warp=Path.home() / ".cache" / "warp",
                                 quiet=quiet))
    return path


def sweep(sp) -> dict:  # noqa: ANN001
    return json.loads(sp.cli("sweep", "status", "il", "--json").stdout)


def logged(run_dir: Path, tag: str) -> dict[int, float]:
    """Each iteration's value of `tag` as the trainer wrote it to TensorBoard in `run_dir`."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util.tensor_util import make_ndarray

    out: dict[int, float] = {}
    for f in sorted(run_dir.rglob("events.out.tfevents.*")):
        for ev in EventFileLoader(str(f)).Load():
            for v in ev.summary.value:
                if v.tag == tag:
                    out[ev.step] = float(make_ndarray(v.tensor)) if v.HasField("tensor") else v.simple_value
    return out


def agent_yaml(run_dir: Path, key: str) -> float:
    """`key` of the agent config Isaac Lab's train script built the runner with (`params/agent.yaml`)."""
    found = re.findall(rf"^\s+{key}: (\S+)$", (run_dir / "params" / "agent.yaml").read_text(), re.M)
    assert len(found) == 1, (run_dir, key, found)
    return float(found[0])


def test_real_isaaclab_sweep_pauses_promotes_and_each_searched_value_is_in_effect(tmp_path, supervisor_factory):
    cfg = host(tmp_path, free=tuple(range(8)))
    sp = supervisor_factory(cfg)
    said = sp.cli("sweep", "submit", str(sweep_file(tmp_path))).stdout
    assert "sweep il: 4 trials submitted (il-t001 .. il-t004), at most 1 at once, scheduler asha" in said
    status = wait_for(lambda: (s := sweep(sp))["state"] == "done" and s, 5 * BOOT, interval=0.5, what="the sweep done")
    # the sweep is done at t4's pause; its stop with a save is still under way: the runs are read once it is over
    wait_for(lambda: sp.job("il-t004")["state"] == "stopped", 90, what="il-t004 stopped with its save")

    by_job = {t["job"]: t for t in status["trials"]}
    assert status["best"] == 1
    assert {j: t["state"] for j, t in by_job.items()} == {
        "il-t001": "completed", "il-t002": "completed", "il-t003": "paused", "il-t004": "paused"}
    for job, rank, of in (("il-t002", 2, 2), ("il-t003", 3, 3), ("il-t004", 3, 4)):
        paused = events(sp, job, "trial_paused")
        assert [(e["rank"], e["of"], e["milestone"]) for e in paused] == [(rank, of, RUNG)], (job, paused)
    promoted = events(sp, "il-t002", "trial_promoted")
    assert [(e["rank"], e["of"]) for e in promoted] == [(2, 3)]
    assert not any(events(sp, j, "trial_promoted") for j in ("il-t001", "il-t003", "il-t004"))

    # the promotion resumed t2 from its pause's save, with the same overrides on its command line
    runs = started(sp, "il-t002")
    assert len(runs) == 2 and runs[0]["resume_from"] is None and runs[1]["resume_from"] is not None
    argv = runs[1]["argv"]
    assert argv[argv.index("--checkpoint") + 1] == runs[1]["resume_from"]["path"]
    assert [a for a in runs[0]["argv"] if a.startswith("agent.algorithm.")] == \
        [a for a in argv if a.startswith("agent.algorithm.")]

    for n, lr in LR.items():
        job = f"il-{n}"
        ent = by_job[job]["values"]["agent.algorithm.entropy_coef"]
        assert by_job[job]["values"]["agent.algorithm.learning_rate"] == lr
        dirs = run_dirs(sp, job)
        assert len(dirs) == (2 if job == "il-t002" else 1), dirs
        for d in dirs:
            # the learning rate rsl_rl trained with, every iteration of every attempt (the promoted one's included:
            # its rate came from its own checkpoint's optimizer)
            rates = logged(d, "Loss/learning_rate")
            assert rates and all(math.isclose(v, lr, rel_tol=1e-6) for v in rates.values()), (job, d, rates)
            # the entropy coefficient the runner was built with, as Isaac Lab's train script recorded it
            assert math.isclose(agent_yaml(d, "entropy_coef"), ent, rel_tol=1e-9), (job, d)
            assert math.isclose(agent_yaml(d, "learning_rate"), lr, rel_tol=1e-9), (job, d)
            assert "schedule: fixed" in (d / "params" / "agent.yaml").read_text()  # the task's own is adaptive
    # the promoted trial lost no iteration: its two run dirs' steps cover 0..TOTAL-1, the second resumed at its save
    dirs = run_dirs(sp, "il-t002")
    logged_steps = [steps(d) for d in dirs]
    assert set().union(*map(set, logged_steps)) == set(range(TOTAL)), logged_steps
    assert logged_steps[1][0] == runs[1]["resume_from"]["iteration"]
    # trial 1 ran to the end; the paused trials stopped at their rung, each at the iteration its stop saved
    assert max(steps(run_dirs(sp, "il-t001")[0])) == TOTAL - 1
    for job in ("il-t003", "il-t004"):
        saved = events(sp, job, "trainer_saved_on_stop")
        assert len(saved) == 1 and max(steps(run_dirs(sp, job)[0])) == saved[0]["iteration"] < TOTAL - 1, job
    for n in LR:
        assert_clean_log(tmp_path, f"il-{n}")  # every searched override taken by Isaac Lab's Hydra, none ignored
    best = sp.cli("sweep", "best", "il").stdout
    assert 'name = "il-best"' in best and "agent.algorithm.learning_rate=0.001" in best
