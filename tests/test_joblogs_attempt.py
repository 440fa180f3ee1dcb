"""`isaacd logs --attempt N` where the output is not a range of the process runtime's log (pure reads of a saved
history; the process runtime's case runs for real in test_cli_history.py, systemd's in test_systemd_testbed.py)."""

from __future__ import annotations

from pathlib import Path

from isaacd.config.schema import parse_config
from isaacd.cli.job_logs import show_attempt_logs
from isaacd.history.log_source import read_log_source
from isaacd.history.store import Attempt, JobHistory, StateStore


def setup(tmp_path: Path, runtime: str, attempts: list[Attempt]):  # noqa: ANN201
    cfg = parse_config(f'[supervisor]\nstate_dir = "state"\n[[jobs]]\nname = "a"\nruntime = "{runtime}"\n', "t.toml",
                       tmp_path)
    StateStore(cfg.supervisor.state_dir).save(JobHistory(name="a", attempts=attempts))
    return read_log_source(cfg.supervisor.state_dir, "a", runtime)  # as the supervisor's `log-source` answers


def test_podman_keeps_only_the_newest_attempts_output(tmp_path, capsys):
    src = setup(tmp_path, "podman", [Attempt(1, 1.0, "initial", runtime="podman", handle={"container": "c"}, ended_at=2.0),
                                     Attempt(2, 3.0, "restart", runtime="podman", handle={"container": "c"})])
    assert show_attempt_logs(src, 1, False, 50) == 1
    assert "the next start replaced, with its output" in capsys.readouterr().err


def test_a_truncated_log_says_the_output_is_gone(tmp_path, capsys):
    log = tmp_path / "a.log"
    log.write_bytes(b"short\n")
    src = setup(tmp_path, "process", [Attempt(1, 1.0, "initial", handle={"log_path": str(log), "log_offset": 500})])
    assert show_attempt_logs(src, 1, False, 50) == 1
    assert "was truncated since attempt 1 ran" in capsys.readouterr().err


def test_an_attempt_is_its_range_of_the_log(tmp_path, capfdbinary):
    log = tmp_path / "a.log"
    log.write_bytes(b"one-a\none-b\ntwo-a\ntwo-b\n")
    src = setup(tmp_path, "process", [Attempt(1, 1.0, "initial", handle={"log_path": str(log), "log_offset": 0}),
                                      Attempt(2, 2.0, "restart", handle={"log_path": str(log), "log_offset": 12})])
    assert show_attempt_logs(src, 1, False, 50) == 0
    assert capfdbinary.readouterr().out == b"one-a\none-b\n"
    assert show_attempt_logs(src, 2, False, 1) == 0
    assert capfdbinary.readouterr().out == b"two-b\n"


def test_reading_where_the_output_is_creates_nothing(tmp_path):
    """The client reads a state dir it may not own: a missing one stays missing, a damaged history stays in place."""
    src = read_log_source(tmp_path / "nowhere", "a", "process")
    assert src.attempts == () and src.log_path == str(tmp_path / "nowhere" / "logs" / "a.log")
    assert not (tmp_path / "nowhere").exists()
    jobs = tmp_path / "state" / "jobs"
    jobs.mkdir(parents=True)
    (jobs / "a.json").write_text("{not json")
    src = read_log_source(tmp_path / "state", "a", "process")
    assert src.problem and "a.json" in src.problem and sorted(p.name for p in jobs.iterdir()) == ["a.json"]
    assert show_attempt_logs(src, 1, False, 50) == 1


def test_an_attempt_of_a_log_not_ours_is_read_through_the_supervisor(tmp_path, capfd, monkeypatch):
    """Issue 39: `isaacd logs --attempt N` of a job whose log lies in root's state dir asks the supervisor the command
    found (its `logs` request from N's offset, answered here by the supervisor's own reader, in 5-byte answers so a
    range takes several) instead of saying the file is not ours."""
    from isaacd import control
    from isaacd.cli import job_logs

    cfg = parse_config('[supervisor]\nstate_dir = "state"\n[[jobs]]\nname = "a"\n', "t.toml", tmp_path)
    log = Path(cfg.supervisor.state_dir) / "logs" / "a.log"
    log.parent.mkdir(parents=True)
    log.write_bytes(b"one-a\none-b\ntwo-a\ntwo-b\nthree\n")
    StateStore(cfg.supervisor.state_dir).save(JobHistory(name="a", attempts=[
        Attempt(n, float(n), "initial", handle={"log_path": str(log), "log_offset": o})
        for n, o in ((1, 0), (2, 12), (3, 24))]))
    src = read_log_source(cfg.supervisor.state_dir, "a", "process")
    asked: list[dict] = []

    def supervisor(req: dict) -> dict:
        asked.append(req)
        assert req["cmd"] == "logs" and req["job"] == "a"
        return control._file_text(log, req)

    def not_ours(path, *args, **kwargs):  # noqa: ANN001, ANN202 - root's 0700 state dir, as another user meets it
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(control, "LOG_REPLY_BYTES", 5)
    monkeypatch.setattr(job_logs, "open", not_ours, raising=False)
    monkeypatch.setattr(job_logs.os, "geteuid", lambda: 1000)
    assert show_attempt_logs(src, 2, False, 50, ask=supervisor) == 0
    assert capfd.readouterr().out == "two-a\ntwo-b\n" and len(asked) > 2
    assert show_attempt_logs(src, 1, False, 1, ask=supervisor) == 0
    assert capfd.readouterr().out == "one-b\n"
    assert show_attempt_logs(src, 3, False, 50, ask=supervisor) == 0  # the newest: to the end of the file
    assert capfd.readouterr().out == "three\n"
    log.write_bytes(b"one-a\n")  # truncated since: said, nothing printed
    assert show_attempt_logs(src, 2, False, 50, ask=supervisor) == 1
    out = capfd.readouterr()
    assert out.out == "" and "a's log was truncated since attempt 2 ran" in out.err
    assert show_attempt_logs(src, 2, False, 50) == 1  # no supervisor to ask: why, in one line
    assert "attempt 2's output is read from" in capfd.readouterr().err
