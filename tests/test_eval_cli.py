"""`isaacd evals JOB` and `isaacd best JOB` (issue 41, cli/eval_cli.py) against a real control socket (control.py's
ControlServer over a stand-in supervisor whose state dir holds a real eval record, written by evals/record.py), and
the `evals` request's access rules (a user reads the evaluations of the jobs whose events they may read)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Collection, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from isaacd.access.policy import Caller
from isaacd.cli.main import main
from isaacd.config.users import User
from isaacd.control import ControlServer, RequestError, dispatch
from isaacd.evals.record import EvalRecord, EvalStore
from isaacd.evals.types import EvalResult
from isaacd.status.types import Status

ROOT = Path(__file__).resolve().parents[1]
ALICE = Caller(1001, "alice", False, User(1001, 1001, "alice", "/home/alice", ("alice",), (1001,)))
BOB = Caller(1002, "bob", False, User(1002, 1002, "bob", "/home/bob", ("bob",), (1002,)))


def result(run: Path, it: int, mean: float, success: float | None = None) -> EvalResult:
    return EvalResult(iteration=it, checkpoint=str(run / f"model_{it}.pt"), episodes=100, return_mean=mean,
                      return_std=10.0, length_mean=299.0, length_std=1.0, success_rate=success, seed=42, num_envs=100,
                      device="cpu", duration_seconds=30.5, finished_at=1_700_000_000.0 + it)


def job(name: str, owner: str | None, every: int | None) -> SimpleNamespace:
    return SimpleNamespace(name=name, owner=owner, environment={}, container=SimpleNamespace(environment={}),
                           eval=SimpleNamespace(every=every) if every is not None else None)


class Sup:
    """What the control socket sees of a supervisor (control.Controlled), with a real state dir."""

    def __init__(self, state: Path, scope: str = "all") -> None:
        jobs = [job("cartpole", "alice", 1), job("fresh", "alice", 5), job("plain", None, None),
                job("broken", None, 1), job("big", None, 1)]
        self.config = SimpleNamespace(supervisor=SimpleNamespace(state_dir=str(state)),
                                      access=SimpleNamespace(status=scope), jobs=jobs,
                                      job=lambda n: next((j for j in jobs if j.name == n), None))
        self.store = None

    def status(self) -> Status:
        return Status.from_json({"jobs": [{"name": j.name, "owner": j.owner} for j in self.config.jobs]})

    def job_names(self) -> Collection[str]:
        return [j.name for j in self.config.jobs]


@pytest.fixture(scope="module")  # one socket for the file: a server's stop waits up to 0.5 s for its accept loop
def world() -> Iterator[SimpleNamespace]:
    with tempfile.TemporaryDirectory(prefix="h5e", dir="/tmp") as d:  # a short path: sun_path holds 108 bytes
        base = Path(d)
        run = base / "logs" / "cartpole" / "2026-12-06_10-00-00"
        run.mkdir(parents=True)
        rec = EvalRecord("cartpole")
        for it, mean in ((300, 487.1), (100, 21.0), (200, 495.4)):  # recorded out of order: shown by iteration
            (run / f"model_{it}.pt").write_bytes(b"x")
            rec.started(it)
            rec.finished(result(run, it, mean, success=0.9 if it == 200 else None))
        rec.started(250)
        rec.failed(250, "exit 1: checkpoint does not load (torn)", 1_700_000_300.0)
        rec.give_up(250, "exit 1: checkpoint does not load (torn)", 1_700_000_301.0)
        store = EvalStore(base / "state")
        store.save(rec)
        big = EvalRecord("big")  # more than a pipe holds (64 KiB): a reader that goes makes the write fail
        big.results = {it: result(run, it, float(it)) for it in range(3000)}
        store.save(big)
        store.path("broken").write_text("{not json")
        sup = Sup(base / "state")
        server = ControlServer(sup, base / "s.sock", 0o600)
        server.start()
        try:
            yield SimpleNamespace(base=base, run=run, sup=sup, sock=str(base / "s.sock"))
        finally:
            server.stop()


def isaacd(w: SimpleNamespace, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main([*argv, "--socket", w.sock])
    out, err = capsys.readouterr()
    return code, out, err


def test_evals_lists_every_evaluation_oldest_first_with_the_best_marked(world, capsys):
    code, out, err = isaacd(world, capsys, "evals", "cartpole")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["ITER", "CHECKPOINT", "RETURN", "LENGTH", "SUCCESS", "EPISODES", "WHEN", "DURATION"]
    assert [ln.split()[:3] for ln in lines[1:4]] == [["100", "model_100.pt", "21.0"], ["*", "200", "model_200.pt"],
                                                     ["300", "model_300.pt", "487"]]
    assert "90%" in lines[2] and "30.5s" in lines[1]
    assert f"* best: {world.run}/model_200.pt (495 ± 10; `isaacd best cartpole`)" in out
    assert lines[-1] == "given up: iteration 250: exit 1: checkpoint does not load (torn)"


def test_evals_json_is_the_record_for_scripts(world, capsys):
    code, out, _ = isaacd(world, capsys, "evals", "cartpole", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["best"] == 200 and doc["every"] == "1" and doc["failed"] == 1
    assert [r["iteration"] for r in doc["results"]] == [100, 200, 300]
    assert doc["given_up"] == [{"iteration": 250, "at": 1_700_000_301.0,
                                "reason": "exit 1: checkpoint does not load (torn)"}]


def test_best_prints_the_path_on_stdout_and_the_score_on_stderr(world, capsys):
    code, out, err = isaacd(world, capsys, "best", "cartpole")
    assert (code, out) == (0, f"{world.run}/model_200.pt\n")  # `cp "$(isaacd best cartpole)" ...`
    assert err == ("cartpole: best model_200.pt (iteration 200): return 495 ± 10, success 90% over 100 episodes\n")
    code, out, _ = isaacd(world, capsys, "best", "cartpole", "--json")
    assert code == 0 and json.loads(out)["checkpoint"] == f"{world.run}/model_200.pt"
    os.rename(world.run / "model_200.pt", world.run / "aside.pt")  # a reset moved it aside: said, the path given
    try:
        code, out, err = isaacd(world, capsys, "best", "cartpole")
    finally:
        os.rename(world.run / "aside.pt", world.run / "model_200.pt")
    assert code == 0 and out == f"{world.run}/model_200.pt\n" and "is not there any more" in err


def test_no_evaluation_yet_is_one_clear_line_and_exit_1(world, capsys):
    code, out, err = isaacd(world, capsys, "best", "fresh")
    assert (code, out) == (1, "")
    assert err == "isaacd: fresh has no evaluated checkpoint yet (`isaacd status fresh` shows its evaluations as " \
                  "they run)\n"
    code, out, _ = isaacd(world, capsys, "evals", "fresh")
    assert (code, out) == (0, "fresh: no evaluation finished yet\n")


def test_a_job_without_eval_and_an_unknown_job_are_refused_with_the_reason(world, capsys):
    code, out, err = isaacd(world, capsys, "evals", "plain")
    assert (code, out) == (1, "") and "plain has no [jobs.eval] section" in err and "Traceback" not in err
    code, _, err = isaacd(world, capsys, "best", "nope")
    assert code == 1 and 'no job named "nope"' in err


def test_an_unusable_record_is_said_and_left_for_the_keeper(world, capsys):
    code, _, err = isaacd(world, capsys, "evals", "broken")
    assert code == 1 and "broken's evaluations record" in err and "cannot be read" in err
    assert (world.base / "state" / "evals" / "broken.json").read_text() == "{not json"  # the keeper owns the file


def test_a_user_reads_the_evaluations_of_jobs_they_may_see(world):
    req = {"cmd": "evals", "job": "cartpole"}
    assert dispatch(world.sup, req, BOB)["best"] == 200  # [access] status = "all": everyone reads every job's
    own = Sup(world.base / "state", scope="own")
    assert dispatch(own, req, ALICE)["best"] == 200
    with pytest.raises(RequestError, match="not shown: cartpole is alice's job"):
        dispatch(own, req, BOB)


def test_a_closed_pipe_ends_quietly(world):
    """`isaacd evals JOB | head -1`: the reader goes, the command ends with no traceback (a real process)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run(f"{sys.executable} -m isaacd evals big --socket {world.sock} | head -c 10; "
                       "echo \" ${PIPESTATUS[0]}\"", shell=True, executable="/bin/bash", capture_output=True,
                       text=True, env=env, timeout=60)
    assert p.stdout.endswith(" 141\n"), p.stdout  # ended as a tool killed by SIGPIPE ends
    assert "Traceback" not in p.stderr and "BrokenPipe" not in p.stderr, p.stderr
