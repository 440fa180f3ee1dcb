"""Population-based training end to end (issue 40): a real `isaacd run`, the real built-in trainer (rsl_rl) and the
CLI, on a scripted 8-GPU host (the queue places the members by gpu_memory; they train on the CPU).

The objective is the learning rate the trainer itself logs (rsl_rl's `Loss/learning_rate`, fixed schedule), so the
ranks are known before the run: seed 1 samples 1.86e-5, 4.95e-4, 3.37e-4 and 3.24e-5 for members 1-4, so member 1
is the bottom of the population and member 2 its top (the test holds them with SIGSTOP so that members 1 and 2 are
the ranked ones, member 2 with a checkpoint, when member 1 is judged). At its interval member 1 exploits: it copies member 2's
newest complete checkpoint and goes on from it with member 2's rate perturbed by 0.8 or 1.2. Right then its trainer
is SIGKILLed and so is the supervisor: the next supervisor finds the exploit where the record left it, and carries
it out once (one copy, one lineage entry). The trainer's own log proves the new rate in effect at the first
iteration after the exploit (rsl_rl's PPO.load would have taken the copy's rate; the shim sets the new one again
after that load), its TensorBoard steps go on from the copy's iteration to the end with none missing, and the top
member never stopped. At the end `isaacd sweep best` gives the best member's job file with the schedule its weights
trained on and its newest complete checkpoint. Before it all, what a submit refuses in one line, nothing started: a
population larger than the host holds, and an `env.*` key asked to change in place."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from pathlib import Path

import pytest
from helpers import alive, wait_for
from test_queue_e2e import QUIET, host
from test_trainer import scalars

from isaacd.control import request
from isaacd.sweeps.sampler import sample
from isaacd.sweeps.space import LogUniform

pytestmark = pytest.mark.slow

MAX_ITERATIONS = 12
POPULATION = """
[sweep]
name = "pop"
trials = 4
seed = 1
[sweep.objective]
tag = "Loss/learning_rate"
mode = "max"
smooth = 1
[sweep.scheduler]
kind = "pbt"
interval = 3
quantile = 0.25
resample_probability = 0.0
[sweep.space]
"agent.algorithm.learning_rate" = {{ loguniform = [1e-5, 1e-3] }}
[job]
device = "cpu"
gpu_memory = "10GiB"
num_envs = 32
max_iterations = {max_iterations}
save_interval = 1
stop_timeout = 60.0
spare = false
log_root = "{logs}"
extra_args = ["agent.num_steps_per_env=8", "agent.algorithm.schedule=fixed"]
environment = {{ OMP_NUM_THREADS = "1" }}  # 4 trainers on 2 cores: torch's extra threads only fight each other
{quiet}
"""
TRIALS = [f"pop-t{n:03d}" for n in range(1, 5)]
LRS = [v["lr"] for v in sample({"lr": LogUniform(1e-5, 1e-3)}, 4, 1)]  # the sweep's own sampler, its seed


def learning_rates(run_dir: Path) -> dict[int, float]:
    """The rate rsl_rl logged at each step of a run (test_trainer.scalars reads the event files)."""
    return dict(scalars(run_dir)["Loss/learning_rate"])


def sweep(sp) -> dict:  # noqa: ANN001
    return json.loads(sp.cli("sweep", "status", "pop", "--json").stdout)


def said_on_failure(sp, jobs: list[str]) -> None:  # noqa: ANN001
    for j in jobs:
        for e in sp.events(j):
            print(j, {k: v for k, v in e.items() if k != "argv"}, file=sys.stderr)


def test_the_bottom_member_copies_the_top_one_through_a_trainer_and_supervisor_kill_with_its_new_rate_in_effect(
        tmp_path, supervisor_factory):
    assert LRS.index(min(LRS)) == 0 and LRS.index(max(LRS)) == 1  # member 1 the bottom, member 2 the top
    bottom, top, top_lr = "pop-t001", "pop-t002", LRS[1]
    cfg = host(tmp_path, free=tuple(range(8)))
    sp = supervisor_factory(cfg)
    path = tmp_path / "pop.sweep.toml"
    path.write_text(POPULATION.format(logs=tmp_path / "logs", max_iterations=MAX_ITERATIONS,
                                      quiet=QUIET.replace("[jobs.watchdogs.", "[job.watchdogs.")))
    # a population larger than the host holds at once is refused at submit, saying how many fit
    too_many = tmp_path / "too-many.sweep.toml"
    too_many.write_text(path.read_text().replace('name = "pop"', 'name = "big"').replace("trials = 4", "trials = 20")
                        .replace('gpu_memory = "10GiB"', 'gpu_memory = "60GiB"'))
    refused = sp.cli("sweep", "submit", str(too_many), check=False)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert ("sweep.trials: a population of 20 trains all at once; this host holds 16 members of \"60GiB\" each "
            "(empty): "
            "set trials = 16 or fewer") in refused.stderr + refused.stdout
    # an environment key asked to change in place (an exploit goes on in the member's running trainer): one line
    # naming the key, from the client and from the supervisor itself (a request that skips the client's check)
    in_env = path.read_text().replace('name = "pop"', 'name = "env"').replace(
        "[sweep.space]\n", '[sweep.space]\n"env.episode_length_s" = { choice = [5.0, 10.0] }\n')
    (tmp_path / "env.sweep.toml").write_text(in_env)
    refused = sp.cli("sweep", "submit", str(tmp_path / "env.sweep.toml"), check=False)
    line = 'sweep.space."env.episode_length_s": env.episode_length_s is not changed by an exploit in place'
    assert refused.returncode == 2 and line in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    with pytest.raises(RuntimeError, match=re.escape(line)):
        request(sp.socket, {"cmd": "sweep-submit", "text": in_env, "source": str(tmp_path / "env.sweep.toml")})
    assert sp.status()["jobs"] == [] and json.loads(sp.cli("sweeps", "--json").stdout) == []  # nothing started
    said = sp.cli("sweep", "submit", str(path)).stdout
    assert "sweep pop: 4 trials submitted (pop-t001 .. pop-t004)" in said and "scheduler pbt" in said
    try:
        # the test decides the order, not the speed of four trainers against the tick: every member is held (SIGSTOP)
        # from its start; the top one trains until the sweep has ranked it at iteration 3 (with a checkpoint), then is
        # held again; then the bottom one trains alone, so at its judgement the two of them are the ranked ones
        others = [j for j in TRIALS if j not in (bottom, top)]
        frozen = {j: wait_for(lambda j=j: sp.job(j)["pid"], 120, interval=0.02, what=f"{j} started") for j in TRIALS}
        for pid in frozen.values():
            os.kill(pid, signal.SIGSTOP)
        os.kill(frozen[top], signal.SIGCONT)

        held = wait_for(lambda: (j := sp.job(top))["state"] == "running" and (j["iteration"] or 0) >= 3 and j["pid"],
                        120, interval=0.02, what="the top member at iteration 3")
        os.kill(held, signal.SIGSTOP)  # held at once (a quiet machine trains an iteration in ~0.05 s), then ranked
        wait_for(lambda: next(t for t in sweep(sp)["trials"] if t["job"] == top)["objective"] is not None, 60,
                 what="the top member ranked by the sweep")
        os.kill(frozen[bottom], signal.SIGCONT)
        ex = wait_for(lambda: next((e for e in sp.events(bottom) if e["event"] == "member_exploit"), None), 120,
                      interval=0.05, what="the bottom member's exploit decided")
        # mid-exploit: its trainer and the supervisor die at once
        # if its trainer still runs: the status is a tick old, and the exploit's stop with a save may have ended it
        pid = sp.job(bottom)["pid"]
        if alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass  # it ended between the look and the kill
        sp.stop(signal.SIGKILL)
        sp = supervisor_factory(cfg)
        wait_for(lambda: any(e["event"] == "member_exploited" for e in sp.events(bottom)), 120,
                 what="the bottom member's exploit carried out")
        for pid in [held] + [frozen[j] for j in others]:
            os.kill(pid, signal.SIGCONT)
        wait_for(lambda: sweep(sp)["state"] == "done", 240, what="the population done")
    except AssertionError:
        said_on_failure(sp, [bottom, top])
        raise
    assert ex["source_job"] == top and ex["rank"] == ex["of"] >= 2, {k: v for k, v in ex.items() if k != "detail"}
    new_lr = ex["new"]["agent.algorithm.learning_rate"]
    assert new_lr in (pytest.approx(top_lr * 0.8, rel=1e-5), pytest.approx(top_lr * 1.2, rel=1e-5))
    first = [e for e in sp.events(bottom) if e["event"] == "member_exploited"][0]
    copies = [e for e in sp.events(bottom) if e["event"] == "checkpoint_copied"]
    status = sweep(sp)
    member = next(t for t in status["trials"] if t["job"] == bottom)
    lineage = member["lineage"]
    # carried out once, from the top member's checkpoint: one copy per exploit, though the supervisor died mid-way
    assert first["source_job"] == top and lineage[0]["from_job"] == top and lineage[0]["copied"]
    assert len(copies) == sum(1 for e in lineage if e["copied"]) == member["exploits"], (copies, lineage)
    copied = copies[0]
    assert copied["source"] == top and Path(copied["path"]).parent.name.endswith(
        f"_pbt-from-{top}-at-{copied['iteration']}")
    # the first run from the copy: its first logged rate is the new one (not the copy's, which PPO.load took from
    # the optimizer; not the member's own 1.86e-5), and its steps go on from the copy's iteration, none missing
    started = [e for e in sp.events(bottom) if e["event"] == "started"]
    after = next((s for s in started if s["resume_from"] and s["resume_from"]["path"] == copied["path"]), None)
    if after is None:
        said_on_failure(sp, [bottom])
    assert after is not None, (copied, started)
    runs = {e["attempt"]: e["run_dir"] for e in sp.events(bottom) if e["event"] == "run_dir"}
    run = Path(runs[after["attempt"]])
    lrs = learning_rates(run)
    at = copied["iteration"]
    assert lrs[at] == pytest.approx(new_lr, rel=1e-6), (at, lrs)
    # on its copy's timeline (until its next exploit, if it had one): every iteration from the copy's on
    copy_paths = [c["path"] for c in copies]
    nxt = next((s["attempt"] for s in started if s["attempt"] > after["attempt"] and s["resume_from"]
                and s["resume_from"]["path"] in copy_paths), None)
    until = lineage[1]["at"] if len(lineage) > 1 else MAX_ITERATIONS
    timeline = [Path(runs[a]) for a in sorted(runs) if a >= after["attempt"] and (nxt is None or a < nxt)]
    steps_after = {s for d in timeline for s in learning_rates(d)}
    assert set(range(at, until)) <= steps_after, (at, until, sorted(steps_after))
    # the top member was never stopped for it: one attempt, trained to the end
    assert [e["attempt"] for e in sp.events(top) if e["event"] == "started"] == [1]
    assert next(t for t in status["trials"] if t["job"] == top)["state"] == "completed"
    text = sp.cli("sweep", "status", "pop").stdout
    assert f"{bottom} at iteration {lineage[0]['at']}: copied {top}" in text
    # `isaacd sweep best`: the best member's job file with the schedule its weights trained on, from iteration 0 to
    # now, through its last exploit's source, and its newest complete checkpoint
    best = next(t for t in status["trials"] if t["number"] == status["best"])
    said = sp.cli("sweep", "best", "pop").stdout
    assert 'name = "pop-best"' in said and f"agent.algorithm.learning_rate={best['values'][LR]!r}" in said
    rows = schedule_rows(said)
    assert rows[0][0].startswith("0-") and rows[-1][1:] == ["(now)", best["job"], repr(best["values"][LR])], rows
    assert all(int(b[0].split("-")[0]) == int(a[0].split("-")[1]) + 1 for a, b in zip(rows, rows[1:])), rows
    if best["lineage"]:
        assert rows[-2][-2] == best["lineage"][-1]["from_job"], rows
    newest = Path(sp.job(best["job"])["checkpoint"]["path"])
    assert f'# checkpoint = "{newest}"' in said.splitlines() and newest.is_file(), said


LR = "agent.algorithm.learning_rate"


def schedule_rows(best_file: str) -> list[list[str]]:
    """The schedule table's rows in `isaacd sweep best`'s comments: [iterations, ("(now)",) member, value]."""
    lines = best_file.splitlines()
    at = next(i for i, line in enumerate(lines) if line.split()[1:3] == ["ITERATIONS", "MEMBER"])
    rows = []
    for line in lines[at + 1:]:
        if not line.startswith("#   "):
            break
        rows.append(line.split()[1:])
    return rows
