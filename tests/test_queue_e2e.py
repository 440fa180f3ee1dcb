"""The host's queue end to end (issue 31): a real `isaacd run`, the real built-in trainer and CLI, on a scripted 8-GPU
host (the GPU source interface NVML implements, `[gpu] source = "scripted"`, as the CUDA out-of-memory tests do).

Six of the eight H200s are nearly full with another team's process (not an isaacd job), so two jobs asking 80 GiB
each fit and the rest queue: few trainers, on a 2-core machine, and a queue all the same. The trainers train on the
CPU (device = "cpu") while the queue places them on the scripted GPUs.
"""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest
from helpers import SupervisorProc, steps, wait_for, write_config

pytestmark = pytest.mark.slow

GiB = 2**30
QUIET = "".join(f"\n[jobs.watchdogs.{w}]\nenabled = false\n" for w in (
    "no_progress", "duty_cycle", "loss_stagnation", "reward_plateau", "divergence", "gpu_temperature", "xid"))


def host(tmp_path: Path, free: tuple[int, ...]) -> Path:
    """8 scripted H200s; every GPU but `free` holds 135 GiB of a process that is no isaacd job."""
    busy = [{"t": 0, "gpu": g, "memory_used_bytes": 135 * GiB,
             "processes": [{"pid": 4242, "used_bytes": 135 * GiB}]} for g in range(8) if g not in free]
    (tmp_path / "gpu.json").write_text(json.dumps({"gpus": 8, "events": busy}))
    cfg = write_config(tmp_path, "", extra="""
        [queue]
        min_run_seconds = 1
        """)
    cfg.write_text("jobs = []  # every job comes from jobs.d\n" + cfg.read_text().replace(
        '[gpu]\nsource = "none"\n', '[gpu]\nsource = "scripted"\nscript = "gpu.json"\nsample_interval = 0.2\n').replace(
        '[supervisor]\n', '[supervisor]\njobs_dir = "jobs.d"\n'))
    return cfg


def toml_value(v: object) -> str:
    """JSON writes TOML's strings, numbers, booleans and arrays; a table (`environment`) is an inline one."""
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {json.dumps(x)}" for k, x in v.items()) + "}"
    return json.dumps(v)


def job_file(tmp_path: Path, name: str, **over) -> Path:  # noqa: ANN003
    fields = {"gpu_memory": "80GiB", "device": "cpu", "num_envs": 64, "max_iterations": 400, "save_interval": 5,
              "log_root": str(tmp_path / "logs"), "stop_timeout": 60.0, "spare": False,
              "extra_args": ["agent.num_steps_per_env=8"], **over}
    body = "\n".join(f"{k} = {toml_value(v)}" for k, v in fields.items() if v is not None)  # None: key left out
    path = tmp_path / "submit" / f"{name}.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(f'[[jobs]]\nname = "{name}"\n{body}\n{QUIET}')
    return path


def events(sp: SupervisorProc, job: str, kind: str) -> list[dict]:
    return [e for e in sp.events(job) if e["event"] == kind]


def running_at(sp: SupervisorProc, job: str, iteration: int) -> dict:
    return wait_for(lambda: (x := sp.job(job))["state"] == "running" and (x["iteration"] or 0) >= iteration and x,
                    120, what=f"{job} training at iteration {iteration}")


def gpus_of(sp: SupervisorProc, job: str) -> list[int]:
    return sp.job(job)["queue"]["placement"]


def test_submit_queue_preempt_with_a_save_resume_elsewhere_and_drain_in_order(tmp_path, supervisor_factory):
    sp = supervisor_factory(host(tmp_path, free=(0, 1)))
    # g1 is not preemptible and trains for good: anymal is the one urgent preempts, g1 the one cancelled later (a
    # finite g1 could complete before its cancel on a fast worker, leaving nothing to save)
    # anymal, the victim, runs its script's own cleanup after a stop's save (no quick exit), held there while `hold`
    # exists (the shim's test seam): a teardown that would keep its GPU until stop_timeout, unless isaacd ends it
    hold = tmp_path / "hold-cleanup"
    slow_teardown = {"ISAACD_SHIM_FAST_EXIT": "0", "ISAACD_SHIM_TEST_HOLD_CLEANUP": str(hold)}
    said = {name: sp.cli("submit", str(job_file(tmp_path, name, **over))).stdout.strip()
            for name, over in (("anymal", {"max_iterations": 60, "environment": slow_teardown}),
                               ("g1", {"max_iterations": 100000, "preemptible": False}),
                               ("cartpole", {"max_iterations": 5}))}
    running_at(sp, "anymal", 5), running_at(sp, "g1", 5)
    # anymal is held (SIGSTOP) from here until urgent's preemption of it is decided: the checks below take a dozen CLI
    # calls, and a trainer that runs on meanwhile can finish its 60 iterations first under load (at 32-37 of 60 with
    # five busy loops beside it; finished, and nothing left to preempt, in a run of the suite under load)
    held = sp.job("anymal")["pid"]
    os.kill(held, signal.SIGSTOP)
    assert sorted(gpus_of(sp, "anymal") + gpus_of(sp, "g1")) == [0, 1]  # the only GPUs with 80 GiB free
    # submit answers what the queue's first pass did: started at once, or its place and why it waits
    for name in ("anymal", "g1"):
        assert said[name] == f"submitted as {tmp_path / 'jobs.d' / name}.toml: placed on GPU {gpus_of(sp, name)[0]}, " \
                             f"starting (`isaacd queue`, `isaacd status {name}`)", said[name]
    assert said["cartpole"].startswith(f"submitted as {tmp_path / 'jobs.d' / 'cartpole'}.toml: queued #1: needs 80 GiB "
                                       "on 1 GPU; 0 with room"), said["cartpole"]
    waiting = sp.job("cartpole")
    assert waiting["state"] == "queued" and waiting["queue"]["position"] == 1
    assert waiting["queue"]["reason"].startswith("needs 80 GiB on 1 GPU; 0 with room")
    listing = sp.cli("queue").stdout
    assert listing.splitlines()[1].split()[:3] == ["1", "cartpole", "queued"], listing
    status = sp.cli("status").stdout
    assert "cartpole queue: #1 asks 80 GiB on 1 GPU (priority 0" in status
    for name in ("anymal", "g1"):  # the GPU table: each on the GPU the queue gave it (no process there: on the CPU)
        row = rf"^{gpus_of(sp, name)[0]}\s.*used \S+/140 GiB, asked 80 GiB\s+{name}\s+ok$"
        assert re.search(row, status, re.M), status

    # a bad job file: refused with the file, the key and the fix; nothing running is touched
    # (issue 37) or asks what this host can never give: refused at submit in one line, naming what the host has
    pids = {n: sp.job(n)["pid"] for n in ("anymal", "g1")}
    for over, words in (
            ({"gpu_memory": "lots"}, '.gpu_memory: "lots" is not a size: write a number and a unit, such as "12GiB"'),
            ({"gpu_memory": 12}, '.gpu_memory: 12 is a number without a unit; write a size such as "12GiB"'),
            ({"gpus": "1"}, '.gpus: "1" is a string; write a whole number such as gpus = 1'),
            ({"gpus": 2}, ': device = "cpu" with gpus = 2: 2 ranks train under torchrun --distributed, which runs on '
                          'GPUs only'),
            ({"gpus": 9, "gpu_memory": None, "device": "cuda"},
             '.gpus: asks 9 GPUs; this host has 8 (GPU 0, 1, 2, 3, 4, 5, 6, 7): lower gpus to 8 or fewer'),
            ({"gpu_memory": "200GB"}, '.gpu_memory: "200GB" (186.3 GiB) is more than any GPU here holds: the largest '
                                      'is GPU 0 with 140.4 GiB')):
        bad = sp.cli("submit", str(job_file(tmp_path, "broken", **over)), check=False)
        assert bad.returncode == 1 and bad.stdout == "", (over, bad)
        assert bad.stderr.count("\n") == 1 and bad.stderr.startswith(f"isaacd: not submitted: {tmp_path}/submit/broken.toml: "
                                                                      'jobs[0] (name = "broken")'), bad.stderr
        assert words in bad.stderr, bad.stderr
    assert {n: sp.job(n)["pid"] for n in pids} == pids and not (tmp_path / "jobs.d" / "broken.toml").exists()
    assert [j["name"] for j in sp.status()["jobs"]] == ["anymal", "g1", "cartpole"]

    # a high-priority submit preempts one job: it saves at the next iteration boundary and goes back to the queue
    # urgent trains long enough to outlast g1's cancel below: its GPU must not come free first
    hold.touch()
    sp.cli("submit", str(job_file(tmp_path, "urgent", priority=10, max_iterations=40)))
    victim, other = "anymal", "g1"
    try:
        wait_for(lambda: events(sp, victim, "preempted"), 60, what="a preemption")
    finally:
        os.kill(held, signal.SIGCONT)  # it saves at its next iteration boundary
    assert events(sp, victim, "preempted")[0]["by"] == "urgent"
    first_gpus = events(sp, victim, "placed")[0]["gpus"]
    wait_for(lambda: sp.job(victim)["state"] == "queued", 90, what=f"{victim} back in the queue")
    saved = events(sp, victim, "trainer_saved_on_stop")[-1]
    # issue 42: its GPU was handed over at the save: isaacd ended the held cleanup, not its stop_timeout (60 s)
    (kill,) = events(sp, victim, "stop_saved_kill")
    assert kill["checkpoint"] == saved["checkpoint"] and kill["cleanup"] == "ISAACD_SHIM_FAST_EXIT=0"
    assert not events(sp, victim, "stop_timeout") and "SIGKILL" in events(sp, victim, "exited")[-1]["description"]
    hold.unlink()
    first_run = Path(events(sp, victim, "run_dir")[0]["run_dir"])
    assert saved["iteration"] == steps(first_run)[-1]  # the last iteration it trained is saved: 0 lost
    assert wait_for(lambda: gpus_of(sp, "urgent"), 60, what="urgent placed") == first_gpus
    assert sp.job(victim)["queue"]["position"] == 1 and sp.job("cartpole")["queue"]["position"] == 2  # old place

    # the other job is cancelled: it saves and leaves; the preempted job resumes on the GPU it frees, not its own
    sp.cli("cancel", other)
    wait_for(lambda: other not in [j["name"] for j in sp.status()["jobs"]], 90, what=f"{other} gone")
    assert list((tmp_path / "jobs.d" / ".cancelled").glob(f"{other}.*.toml"))
    # its history is kept and readable (issue 37): it saved before it went, and says first that it has ended
    shown = sp.cli("events", other)
    assert shown.stdout.startswith(f"{other} has ended: cancelled by root at "), shown.stdout[:300]
    kept = json.loads(sp.cli("events", other, "--json").stdout)
    assert [e for e in kept if e["event"] == "trainer_saved_on_stop"] and kept[-1]["event"] == "ended"
    ended = json.loads(sp.cli("history", "--json").stdout)
    assert [(e["name"], e["how"], e["by"], e["state"]) for e in ended] == [(other, "cancelled", "root", "stopped")]
    old_runs = [Path(dst) for _, dst in ended[0]["runs"]]
    assert old_runs and all(d.is_dir() for d in old_runs) and not any(Path(src).exists() for src, _ in ended[0]["runs"])
    out = sp.cli("logs", other, "-n", "3")
    assert out.stderr.startswith(f"{other} has ended: cancelled by root") and out.stdout.strip()
    assert sp.cli("logs", other, "--attempt", "1", "-n", "1").stdout.strip()
    # its name submitted again: a new job (checked at the end); it asks for no GPU, so the queue's story is unchanged
    sp.cli("submit", str(job_file(tmp_path, other, max_iterations=3, gpu_memory=None)))
    wait_for(lambda: sp.job(victim)["state"] == "running", 120, what=f"{victim} resumed")
    assert gpus_of(sp, victim) != first_gpus  # (cartpole may be placed by now too: urgent is short; see the order below)

    # urgent completes: cartpole, next in the queue, gets its GPU; the preempted job completes exactly
    for name in ("urgent", "cartpole", victim):
        j = wait_for(lambda: (x := sp.job(name))["state"] in ("completed", "failed") and x, 300, what=f"{name} done")
        assert j["state"] == "completed", j["state_reason"]
    resumed = [e for e in events(sp, victim, "started")]
    assert len(resumed) == 2 and resumed[1]["resume_from"]["iteration"] == saved["iteration"]
    runs = []
    for e in events(sp, victim, "run_dir"):
        if Path(e["run_dir"]) not in runs:
            runs.append(Path(e["run_dir"]))
    logged = [steps(d) for d in runs]
    total = 60
    assert set().union(*map(set, logged)) == set(range(total)) and logged[1][0] == saved["iteration"]
    assert sp.job(victim)["queue"]["preemptions"] == 1 and sp.job(victim)["restarts"] == 0
    # issue 42: its first estimate from its own iteration times after the resume, against what the run took
    assert "rate" in [e["source"] for e in events(sp, victim, "estimate_error") if e["ratio"] > 0]
    placed = {n: events(sp, n, "placed")[-1]["time"] for n in (victim, "cartpole")}
    assert placed[victim] < placed["cartpole"]  # back in its old place, ahead of the later submission

    # the cancelled job's name submitted again (issue 37): a new job, a fresh timeline, its old runs kept beside it
    again = wait_for(lambda: (x := sp.job(other))["state"] in ("completed", "failed") and x, 120,
                     what=f"the new {other} done")
    assert again["state"] == "completed" and again["restarts"] == 0, again["state_reason"]
    new = sp.events(other)
    assert all(e["time"] > ended[0]["ended_at"] for e in new) and [e["attempt"] for e in new
                                                                   if e["event"] == "started"] == [1]
    assert Path(events(sp, other, "run_dir")[0]["run_dir"]).parent == old_runs[0].parent.with_name(
        old_runs[0].parent.name.split(".ended-")[0]) and all(d.is_dir() for d in old_runs)
    assert json.loads(sp.cli("events", other, "--ended", "--json").stdout)[-1]["event"] == "ended"


def test_a_supervisor_killed_mid_preemption_neither_loses_nor_duplicates_a_job(tmp_path, supervisor_factory):
    cfg = host(tmp_path, free=(0,))
    sp = supervisor_factory(cfg)
    sp.cli("submit", str(job_file(tmp_path, "long", max_iterations=40)))
    j = running_at(sp, "long", 3)
    os.kill(j["pid"], signal.SIGSTOP)  # frozen: the preemption's stop cannot finish before the supervisor dies
    sp.cli("submit", str(job_file(tmp_path, "urgent", priority=10, max_iterations=10)))
    wait_for(lambda: sp.job("long")["state"] == "stopping" and events(sp, "long", "preempted"), 60,
             what="the preemption under way")
    assert sp.job("urgent")["state"] == "queued"
    sp.stop(signal.SIGKILL)

    again = supervisor_factory(cfg)  # finds the stop on disk and finishes it
    assert again.job("long")["state"] == "stopping" and again.job("long")["pid"] == j["pid"]
    os.kill(j["pid"], signal.SIGCONT)
    for name in ("urgent", "long"):
        done = wait_for(lambda: (x := again.job(name))["state"] in ("completed", "failed") and x, 300,
                        what=f"{name} done")
        assert done["state"] == "completed", done["state_reason"]
    started = events(again, "long", "started")
    saved = events(again, "long", "trainer_saved_on_stop")[-1]
    assert len(started) == 2 and started[1]["resume_from"]["iteration"] == saved["iteration"]
    assert len(events(again, "urgent", "started")) == 1
    assert [e["event"] for e in again.events("long") if e["event"] in ("preempted", "requeued", "placed")] == \
        ["placed", "preempted", "requeued", "placed"]


def test_a_start_no_retry_fixes_fails_at_once_and_a_crashing_job_lends_its_gpu_during_its_backoff(tmp_path,
                                                                                                 supervisor_factory):
    """Issue 37, on a scripted 2-GPU host whose GPU 1 another team fills: one GPU with room for one 80 GiB job."""
    cfg = host(tmp_path, free=(0,))
    (tmp_path / "gpu.json").write_text(json.dumps({"gpus": 2, "events": [
        {"t": 0, "gpu": 1, "memory_used_bytes": 135 * GiB, "processes": [{"pid": 4242, "used_bytes": 135 * GiB}]}]}))
    sp = supervisor_factory(cfg)
    # a launcher nobody may execute (no x bit, for root too): failed at once, naming it; its GPU is free again
    launcher = tmp_path / "python-noexec"
    launcher.write_text("#!/bin/sh\n")
    sp.cli("submit", str(job_file(tmp_path, "noexec", launcher=[str(launcher)])))
    failed = wait_for(lambda: (x := sp.job("noexec"))["state"] == "failed" and x, 30, what="noexec failed")
    assert str(launcher) in failed["state_reason"] and "cannot be executed" in failed["state_reason"], failed
    assert "a restart cannot fix this, so none was tried" in failed["state_reason"]
    assert failed["restarts"] == 0 and len(events(sp, "noexec", "start_failed")) == 1
    assert failed["queue"]["placement"] == []

    # a job that crashes after its first iteration backs off for 8 s: its GPU goes to the next in line meanwhile
    crashy = job_file(tmp_path, "crashy", extra_args=["agent.num_steps_per_env=8", "--fault_exit_after", "1:3"])
    crashy.write_text(crashy.read_text() + "\n[jobs.restart]\nfirst_restart_immediate = false\nbackoff_initial = 8.0\n")
    sp.cli("submit", str(crashy))
    submitted = wait_for(lambda: sp.job("crashy")["queue"]["placement"] == [0] and sp.job("crashy"), 30,
                         what="crashy placed")["queue"]["submitted_at"]
    for name in ("waiter", "later"):  # both wait: GPU 0 has room for one of them
        sp.cli("submit", str(job_file(tmp_path, name, max_iterations=100000)))
    released = wait_for(lambda: events(sp, "crashy", "gpus_released"), 120, what="crashy's backoff")[0]
    assert released["gpus"] == [0]
    wait_for(lambda: sp.job("waiter")["queue"]["placement"] == [0], 30, what="waiter on crashy's GPU")
    backing_off = sp.job("crashy")
    assert backing_off["state"] == "backing-off", backing_off["state"]  # the GPU went over during the backoff
    assert "exited with code 3" in backing_off["state_reason"] and "its GPUs given back" in backing_off["state_reason"]
    assert backing_off["queue"]["placement"] == [] and backing_off["queue"]["position"] == 1  # its place kept
    assert backing_off["queue"]["reason"].startswith("backing off after a failed attempt: its GPUs given back")
    # once its backoff has passed it waits at its old place: ahead of the job submitted after it
    wait_for(lambda: sp.job("crashy")["state"] == "queued", 30, what="crashy back in the queue")
    again = {n: sp.job(n)["queue"] for n in ("crashy", "later")}
    assert (again["crashy"]["position"], again["later"]["position"]) == (1, 2), again
    assert again["crashy"]["submitted_at"] == submitted
    assert sp.job("waiter")["state"] in ("starting", "running")  # not preempted for crashy: the same priority
