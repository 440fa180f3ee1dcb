"""A sweep end to end (issue 39): a real `isaacd run` (root), the real built-in trainer (rsl_rl) and the CLI, on a
scripted 8-GPU host (the queue places each trial on a whole GPU; they train on the CPU), submitted by a user who is no
admin: a real Unix user made here (useradd; removed afterwards; a unique name), in the socket's group, with a quota of
2 GPUs.

The objective is the learning rate the trainer itself logs (rsl_rl's `Loss/learning_rate`): the ranks are then
known before the run (a fixed schedule: rsl_rl's adaptive one moves the rate by the KL, and the ranks with it), and
the logged value proves each trial trained with the learning rate it was sampled, before its pause and after its
promotion. One sweep of 8 trials, 2 at once, walks every ASHA decision: trials that go on at the rung, pauses with a
save, promotions that resume exactly, a supervisor SIGKILLed while a trial is paused (the next one finds the sweep,
the pause and the trials where they were), the sweep done with its best. What she notices: her trainers run as her,
never more than 2 of them at once (her quota and her sweep's concurrency), a concurrency above her quota refused at
submit in one line, her sweep not another user's to cancel; the files her trials wrote are hers."""

from __future__ import annotations

import json
import math
import os
import pwd
import shutil
import signal
import threading
import uuid
from pathlib import Path

import helpers
import pytest
from helpers import SupervisorProc, steps, wait_for
from isaacd.control import request
from test_access_e2e import As, base  # noqa: F401 - base: a fixture (a directory every user may traverse)
from test_queue_e2e import QUIET, host
from test_run_as_owner import user_python  # noqa: F401 - a fixture (a Python every user may run)

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                                 reason="needs root and useradd: the test makes real Unix users and runs a sweep as "
                                        "one of them")]

# 8 learning rates, the best first: trial n's is the n-th. Trials 1 and 2 start together (concurrency 2); each later
# trial is launched only when one before it gave its place back, so it reaches the rung behind all but at most one of
# the better ones. Whatever order the two running trials reach the rung in, ASHA (eta 2: the top half of those at the
# rung go on) pauses trials 3 and 4 there (trial 4 until 7 trials have arrived), promotes them once enough worse ones
# arrive (the top 4 of 8) and ends with trials 1-4 completed, 5-8 paused, trial 1 the best.
LRS = (1e-3, 5e-4, 2e-4, 1e-4, 5e-5, 2e-5, 1e-5, 5e-6)
SWEEP = """
[sweep]
name = "hers"
trials = 8
concurrency = {concurrency}
[sweep.objective]
tag = "Loss/learning_rate"
mode = "max"
smooth = 1
[sweep.scheduler]
rungs = [4]
reduction_factor = 2
[sweep.space]
"agent.algorithm.learning_rate" = {{ grid = {lrs} }}
[job]
device = "cpu"
gpus = 1
num_envs = 32
max_iterations = {max_iterations}
save_interval = 1
stop_timeout = 60.0
spare = false
launcher = ["{python}"]
log_root = "{logs}"
extra_args = ["agent.num_steps_per_env=8", "agent.algorithm.schedule=fixed"]
[job.environment]
OMP_NUM_THREADS = "1"  # two trainers on a 2-core host: one math thread each, else their spinning threads fight
WANDB_API_KEY = "{token}"  # hers: another user reads `isaacd sweep best`'s file with it hidden
{quiet}
"""
TRIALS = [f"hers-t{n:03d}" for n in range(1, 9)]
TOKEN = f"her-key-{uuid.uuid4().hex}"
# 20 iterations past the rung at 4: a pause must land before its trial has trained to the end, whatever the speed of
# a trainer against the tick (at 8, a quiet machine trained the last 4 before the pause's stop came)
MAX_ITERATIONS = 24


@pytest.fixture
def people():
    """her (the sweep's owner) and him, both in the socket's group, neither an admin; unique names, removed after."""
    tag = uuid.uuid4().hex[:6]
    group = f"i39s{tag}"
    with helpers.unix_users({"socket": group}, {"her": f"i39h{tag}", "him": f"i39o{tag}"},
                            {"her": [group], "him": [group]}) as made:
        yield made


def her_host(base: Path, people: dict) -> Path:
    """test_queue_e2e's 8 scripted GPUs, every one free; the socket her group's; her area under base; her quota 2
    GPUs."""
    cfg = host(base, free=tuple(range(8)))
    cfg.write_text(cfg.read_text().replace(
        '[supervisor]\n', f'[supervisor]\nsocket_group = "{people["socket"]}"\n').replace(
        'control_socket = "isaacd.sock"', 'control_socket = "run/isaacd.sock"')
        + f'\n[access]\nareas = ["{base}/{{user}}"]\n\n[access.users.{people["her"].pw_name}]\ngpus = 2\n')
    cfg.chmod(0o644)
    return cfg


def sweep_file(area: Path, who: pwd.struct_passwd, python: str, concurrency: int) -> Path:
    quiet = QUIET.replace("[jobs.watchdogs.", "[job.watchdogs.")
    path = area / f"hers-c{concurrency}.sweep.toml"
    path.write_text(SWEEP.format(concurrency=concurrency, lrs=json.dumps(list(LRS)), python=python,
                                 max_iterations=MAX_ITERATIONS, logs=area / "logs", quiet=quiet, token=TOKEN))
    os.chown(path, who.pw_uid, who.pw_gid)
    return path


def supervisor(cfg: Path) -> SupervisorProc:
    sp = SupervisorProc(cfg)
    sp.socket = cfg.parent / "run" / "isaacd.sock"
    return sp.start()


def sweep_of(sp: SupervisorProc) -> dict:
    """Her sweep's status straight from the socket (as root): a poll that costs no client process."""
    return request(sp.socket, {"cmd": "sweep-status", "sweep": "hers"}, timeout=5)


class Watch(threading.Thread):
    """Samples the supervisor's status every 0.3 s while the sweep runs (across the supervisor's kill: the socket's
    path stays): her trials whose trainer is up, the GPUs the queue holds for them, why the queue holds one back,
    and each trainer's real uid."""

    def __init__(self, sp: SupervisorProc):
        super().__init__(daemon=True)
        self.sp, self.done = sp, threading.Event()
        self.alive: list[set[str]] = []
        self.gpus: list[int] = []
        self.uids: dict[int, int] = {}  # trainer pid -> the real uid in its /proc/<pid>/status

    def run(self) -> None:
        while not self.done.wait(0.3):
            try:
                jobs = [j for j in self.sp.status()["jobs"] if j["name"] in TRIALS]
            except Exception:  # noqa: BLE001 - no supervisor for a moment (the kill), or a busy socket
                continue
            self.alive.append({j["name"] for j in jobs if j.get("pid")})
            self.gpus.append(sum(len((j.get("queue") or {}).get("placement") or []) for j in jobs))
            for pid in (j["pid"] for j in jobs if j.get("pid") and j["pid"] not in self.uids):
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                except OSError:
                    continue
                self.uids[pid] = int(next(ln for ln in status.splitlines() if ln.startswith("Uid:")).split()[1])


def test_her_sweep_of_8_runs_as_her_within_her_quota_pauses_promotes_exactly_and_survives_a_supervisor_kill(
        people, base, user_python):  # noqa: F811 - fixtures
    who = people["her"]
    her, him = As(who, base), As(people["him"], base)
    area = base / who.pw_name
    area.mkdir()
    os.chown(area, who.pw_uid, who.pw_gid)
    area.chmod(0o755)
    cfg = her_host(base, people)
    sp = supervisor(cfg)
    watch = Watch(sp)
    try:
        # more trials at once than her quota of 2 GPUs: refused at submit in one line, nothing left behind
        said = her.refused("sweep", "submit", str(sweep_file(area, who, user_python, concurrency=3)))
        assert said.endswith("sweep.concurrency: 3 trials at once of 1 GPU(s) each is more than your quota of 2 "
                             "GPU(s) ([access] gpus): set concurrency = 2 or fewer"), said
        assert not list((base / "jobs.d").glob("hers-*")) and json.loads(her.ok("sweeps", "--json")) == []

        watch.start()
        said = her.ok("sweep", "submit", str(sweep_file(area, who, user_python, concurrency=2)))
        assert "sweep hers: 8 trials submitted (hers-t001 .. hers-t008), at most 2 at once, scheduler asha" in said
        owners = wait_for(lambda: {j["name"]: j["owner"] for j in sp.status()["jobs"] if j["name"] in TRIALS}, 30,
                          what="her trials' jobs")  # in the status from the tick after the submit's reload
        assert owners == dict.fromkeys(TRIALS, who.pw_name)  # her trials are her jobs
        # another user who is no admin may not cancel it; root, an admin, sees it
        assert him.refused("sweep", "cancel", "hers").startswith(f"not cancelled: hers is {who.pw_name}'s")
        assert [s["name"] for s in json.loads(sp.cli("sweeps", "--json").stdout)] == ["hers"]

        # trial 4 is paused at the rung until 7 trials have reached it: the supervisor is killed while it is, its
        # save done and its trainer gone; the next supervisor finds the sweep where it was
        wait_for(lambda: any(e["event"] == "trial_paused" for e in sp.events("hers-t004")), 180, what="t004 paused")
        wait_for(lambda: sp.job("hers-t004")["state"] == "stopped", 60, what="hers-t004 stopped with its save")
        sp.stop(signal.SIGKILL)
        sp = supervisor(cfg)
        found = wait_for(lambda: {t["job"]: t["state"] for t in sweep_of(sp)["trials"]}, 30, what="the sweep found")
        assert found["hers-t004"] == "paused" and found["hers-t001"] in ("running", "completed"), found

        wait_for(lambda: sweep_of(sp)["state"] == "done", 240, interval=0.5, what="her sweep done")
        watch.done.set()
        watch.join()
        status = json.loads(her.ok("sweep", "status", "hers", "--json"))
        events = {t: sp.events(t) for t in TRIALS}
        best = her.ok("sweep", "best", "hers")
        his_view_of_best = him.ok("sweep", "best", "hers")  # he may see her sweep ([access] status = "all")
    finally:
        watch.done.set()
        sp.stop()
        for pid in os.popen(f"pgrep -f {base}").read().split():  # her trainers, had a supervisor left them
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass

    # done as the ranks say: trials 1-4 to the end, 5-8 paused at the rung, trial 1 the best, its job file ready
    by_job = {t["job"]: t for t in status["trials"]}
    assert status["best"] == 1 and status["owner"] == who.pw_name
    assert {j: t["state"] for j, t in by_job.items()} == {
        **{t: "completed" for t in TRIALS[:4]}, **{t: "paused" for t in TRIALS[4:]}}
    assert 'name = "hers-best"' in best and "agent.algorithm.learning_rate=0.001" in best
    # her job file is hers to submit again, her key in it; his is the same file with her key hidden
    assert f'WANDB_API_KEY = "{TOKEN}"' in best
    assert his_view_of_best == best.replace(TOKEN, "<hidden>") and TOKEN not in his_view_of_best
    # each trained at its own learning rate, as its trainer logged it at the rung and at its end (after a promotion:
    # a resume keeps the searched value in effect)
    for job, lr in zip(TRIALS, LRS):
        values = by_job[job]["rung_values"]
        assert len(values) == (2 if job in TRIALS[:4] else 1) and all(v == pytest.approx(lr, rel=1e-6)
                                                                      for v in values), (job, values)
    # each pause ranked below the rung's top half when it was decided, each promotion within it
    for job in TRIALS:
        for e in events[job]:
            if e["event"] in ("trial_paused", "trial_promoted"):
                assert e["milestone"] == 4 and (e["rank"] > math.ceil(e["of"] / 2)) == (e["event"] == "trial_paused")
    paused = {j for j in TRIALS if any(e["event"] == "trial_paused" for e in events[j])}
    promoted = {j for j in TRIALS if any(e["event"] == "trial_promoted" for e in events[j])}
    assert {"hers-t003", "hers-t004"} <= promoted <= paused - set(TRIALS[4:]) and set(TRIALS[4:]) <= paused
    assert next(e for e in events["hers-t004"] if e["event"] == "trial_promoted")["of"] >= 7

    # every trainer ran as her, never more than 2 of hers at once and never more than her quota's 2 GPUs held (the
    # quota's own reason in `isaacd status` is tests/test_quota_e2e.py's: here it shows only while a paused trainer
    # exits, under half a second since the shim's exit is quick, too short for a 0.3 s sample to be sure of it)
    assert len(watch.uids) >= 8 and set(watch.uids.values()) == {who.pw_uid}, watch.uids
    assert max(len(up) for up in watch.alive) == 2 and max(watch.gpus) <= 2, (watch.alive, watch.gpus)

    # 0 iterations lost across each pause and promotion (trial 4's across the supervisor's kill too): its two run dirs'
    # steps cover them all, the second resumed from the checkpoint its pause saved
    logs = area / "logs"
    for job in promoted:
        started = [e for e in events[job] if e["event"] == "started"]
        said = [(e["event"], e.get("new") or e.get("then") or "", e.get("reason") or e.get("detail") or "")
                for e in events[job]]
        assert len(started) == 2 and started[1]["resume_from"] is not None, (job, said)
        runs = [d for d in logs.rglob("*") if d.is_dir() and d.parent.name == job]
        covered = [s for d in runs for s in steps(d)]
        assert len(runs) == 2 and sorted(set(covered)) == list(range(MAX_ITERATIONS)), (job, runs, covered)
    # what her trainers wrote (run dirs, TensorBoard files, checkpoints) is hers
    written = list(logs.rglob("*"))
    assert any(p.name.startswith("model_") for p in written)
    assert all(p.lstat().st_uid == who.pw_uid for p in written), [p for p in written if p.lstat().st_uid != who.pw_uid]
