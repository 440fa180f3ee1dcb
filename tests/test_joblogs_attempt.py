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
