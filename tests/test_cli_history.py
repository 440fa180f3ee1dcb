"""Follow-mode and history through the real `isaacd` binary on one real supervisor: `status --watch`, `events -f`,
`logs --attempt N`, `reset`; and the README's word on what `status` shows after a kill -9 (issue 29)."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers import BIN, builtin_job, wait_for, write_config

pytestmark = pytest.mark.slow
README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
ISAACD = str(BIN / "isaacd")


def read_until(proc: subprocess.Popen, pattern: str, timeout: float = 60) -> str:  # noqa: ANN001
    """What a running client printed, up to a match of `pattern` (raw reads: no buffering hides a line)."""
    out, deadline = b"", time.monotonic() + timeout
    while not re.search(pattern, out.decode(errors="replace")) and time.monotonic() < deadline:
        if select.select([proc.stdout], [], [], 0.5)[0]:
            out += os.read(proc.stdout.fileno(), 65536)
    assert re.search(pattern, out.decode(errors="replace")), out.decode(errors="replace")[-3000:]
    return out.decode(errors="replace")


def ctrl_c(proc: subprocess.Popen) -> tuple[int, str]:  # noqa: ANN001
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    return proc.returncode, err.decode(errors="replace")


def test_follow_history_and_reset_on_one_supervisor(tmp_path, supervisor_factory):
    # snapshots off and a step delay: checkpoints every 2 iterations, a pace slow enough to read between them
    job = builtin_job("cp", max_iterations=100000, save_interval=2, num_envs=16, snapshot_every=0,
                      extra_args=["agent.num_steps_per_env=8", "--step_delay", "0.05"])
    sp = supervisor_factory(write_config(tmp_path, job))

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([ISAACD, "--config", str(sp.config), *args], capture_output=True, text=True,
                              timeout=60)

    def popen(*args: str) -> subprocess.Popen:
        return subprocess.Popen([ISAACD, "--config", str(sp.config), *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)

    follow = popen("events", "-f", "cp")
    start = read_until(follow, r"started\s+attempt=1.*warm_spare=\w+")
    # the built-in demo's contract in a person's words, not its resume flag's
    assert "contract=built-in trainer (Isaac Lab 2.3 contract)" in start and "store_true" not in start
    first = wait_for(lambda: (x := sp.job("cp"))["checkpoint"] and x["checkpoint"]["iteration"] >= 4 and x, 120,
                     what="a checkpoint past model_0.pt")
    os.kill(first["pid"], signal.SIGKILL)

    # events -f prints what happens after it started, then ends on Ctrl-C quietly
    read_until(follow, r"exited\s+attempt=1.*\n(.*\n)*.*started\s+attempt=2")
    code, err = ctrl_c(follow)
    assert code == 130 and "Traceback" not in err, err

    # the README: after a kill -9 status shows RESTARTS 1, the reason, and the resume from the newest checkpoint
    assert "`RESTARTS 1`, the reason (`last restart: killed by signal 9 (SIGKILL)`)" in README
    assert "shows `RESTARTS 1`" in README and re.search(r"that the job resumed from its\s+newest checkpoint", README)
    out = wait_for(lambda: sp.job("cp")["state"] == "running" and (t := cli("status").stdout)
                   and "cp: resumed from checkpoint" in t and t, 120, interval=0.2, what="the resume in status")
    resumed = [e for e in sp.events("cp") if e["event"] == "started"][-1]["resume_from"]
    assert re.search(rf"cp\s+running\s+process\s+\d+\s+\S+\s+\S+\s+\S+\s+\S+\s+.*\s1\s+\S+$", out, re.M), out
    assert "cp: last restart: killed by signal 9 (SIGKILL)" in out
    assert f"cp: resumed from checkpoint {resumed['iteration']}" in out  # with or without "redoing N"

    # logs --attempt: each attempt's own output; attempt 2 starts where the resume loads its checkpoint
    one, two = cli("logs", "--attempt", "1", "-n", "100000", "cp"), cli("logs", "--attempt", "2", "-n", "100000", "cp")
    assert one.returncode == two.returncode == 0, one.stderr + two.stderr
    assert "Learning iteration 0/" in one.stdout and "Loading model checkpoint" not in one.stdout
    assert f"model_{resumed['iteration']}.pt" in two.stdout and f"Learning iteration {resumed['iteration']}/" in two.stdout
    assert "Learning iteration 0/" not in two.stdout
    none = cli("logs", "--attempt", "9", "cp")
    assert none.returncode == 1 and "cp has no attempt 9 (attempts 1-2" in none.stderr

    # status --watch: redrawn until Ctrl-C, quiet on Ctrl-C and on a closed pipe
    watch = popen("status", "--watch", "--interval", "0.2")
    read_until(watch, r"(every 0.2 s.*\n(.*\n)*){2}")
    code, err = ctrl_c(watch)
    assert code == 130 and "Traceback" not in err, err
    watch = popen("status", "--watch", "--interval", "0.2")
    read_until(watch, r"every 0.2 s")
    watch.stdout.close()  # the reader goes away (`| head`)
    assert watch.wait(30) == 141 and watch.stderr.read() == b""

    # reset: refused while the trainer runs (exit 1, the reason); after a stop, a fresh start with the old runs kept
    busy = cli("reset", "cp")
    assert busy.returncode == 1 and "not reset: it is running; stop it first (`isaacd stop cp`)" in busy.stderr
    cli("stop", "cp")
    wait_for(lambda: sp.job("cp")["state"] == "stopped", 60, what="stopped")
    exp = tmp_path / "logs" / "rsl_rl" / "cp"
    old_runs = sorted(p.name for p in exp.iterdir())
    done = cli("reset", "cp")
    assert done.returncode == 0 and "cp: reset: training from scratch" in done.stdout, done.stderr
    aside = wait_for(lambda: next((e for e in sp.events("cp") if e["event"] == "runs_set_aside"), None), 60,
                     what="the runs set aside")
    folder = Path(aside["folder"])
    assert folder.parent == exp.parent and folder.name.startswith("cp.reset-")
    assert sorted(p.name for p in folder.iterdir()) == old_runs  # kept, whole
    third = wait_for(lambda: (s := [e for e in sp.events("cp") if e["event"] == "started"]) and len(s) == 3
                     and s[-1], 60, what="the fresh launch")
    assert third.get("resume_from") is None
    j = wait_for(lambda: (x := sp.job("cp"))["state"] == "running" and x["checkpoint"] and x, 120,
                 what="the fresh run's first checkpoint")
    assert j["checkpoint"]["iteration"] < first["checkpoint"]["iteration"] + 20
    assert Path(j["checkpoint"]["path"]).parent.parent == exp and not set(old_runs) & {p.name for p in exp.iterdir()}

    # issue 39: every command asks the supervisor that --socket names, run as a user would from another directory
    # whose defaults point elsewhere: $ISAACD_CONFIG names another config (its own job, its own socket) and the
    # directory has no ./var. The answers are this supervisor's job's, never "no job named cp" nor the other config's.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    other = write_config(elsewhere, builtin_job("other"))
    env = {k: v for k, v in os.environ.items() if k != "ISAACD_CONFIG"} | {"ISAACD_CONFIG": str(other)}

    def there(*args: str) -> subprocess.CompletedProcess[str]:
        res = subprocess.run([ISAACD, *args, "--socket", str(sp.socket)], capture_output=True, text=True, timeout=60,
                             cwd=elsewhere, env=env)
        assert res.returncode == 0, f"isaacd {' '.join(args)} --socket -> {res.returncode}: {res.stderr}"
        return res

    assert re.search(r"^cp\s+running\s", there("status", "cp").stdout, re.M)
    assert "runs_set_aside" in there("events", "cp", "--limit", "20").stdout
    assert "Learning iteration" in there("logs", "-n", "100", "cp").stdout
    assert "Learning iteration 0/" in there("logs", "--attempt", "1", "-n", "100000", "cp").stdout
    # the commands that read a config check the one this supervisor runs, not $ISAACD_CONFIG's
    assert there("check-config").stdout.startswith(f"{sp.config}: OK, 1 job(s): cp\n")
    checks = {c["name"]: c for c in json.loads(there("doctor", "--json").stdout)["checks"]}
    assert "workflow:cp" in checks and "workflow:other" not in checks, sorted(checks)
    assert str(tmp_path / "state") in checks["disk:state"]["detail"], checks["disk:state"]
    assert not (elsewhere / "state").exists() and not (elsewhere / "var").exists()  # nothing made there
