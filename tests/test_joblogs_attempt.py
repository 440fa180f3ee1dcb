"""`isaacd logs --attempt N` where the output is not a range of the process runtime's log (pure reads of a saved
history; the process runtime's case runs for real in test_cli_history.py, systemd's in test_systemd_testbed.py)."""

from __future__ import annotations

from pathlib import Path

from isaacd.config.schema import parse_config
from isaacd.cli.job_logs import show_attempt_logs
from isaacd.history.store import Attempt, JobHistory, StateStore


def setup(tmp_path: Path, runtime: str, attempts: list[Attempt]):  # noqa: ANN201
    cfg = parse_config(f'[supervisor]\nstate_dir = "state"\n[[jobs]]\nname = "a"\nruntime = "{runtime}"\n', "t.toml",
                       tmp_path)
    StateStore(cfg.supervisor.state_dir).save(JobHistory(name="a", attempts=attempts))
    return cfg


def test_podman_keeps_only_the_newest_attempts_output(tmp_path, capsys):
    cfg = setup(tmp_path, "podman", [Attempt(1, 1.0, "initial", runtime="podman", handle={"container": "c"}, ended_at=2.0),
                                     Attempt(2, 3.0, "restart", runtime="podman", handle={"container": "c"})])
    assert show_attempt_logs(cfg, "a", 1, False, 50) == 1
    assert "the next start replaced, with its output" in capsys.readouterr().err


def test_a_truncated_log_says_the_output_is_gone(tmp_path, capsys):
    log = tmp_path / "a.log"
    log.write_bytes(b"short\n")
    cfg = setup(tmp_path, "process", [Attempt(1, 1.0, "initial", handle={"log_path": str(log), "log_offset": 500})])
    assert show_attempt_logs(cfg, "a", 1, False, 50) == 1
    assert "was truncated since attempt 1 ran" in capsys.readouterr().err


def test_an_attempt_is_its_range_of_the_log(tmp_path, capfdbinary):
    log = tmp_path / "a.log"
    log.write_bytes(b"one-a\none-b\ntwo-a\ntwo-b\n")
    cfg = setup(tmp_path, "process", [Attempt(1, 1.0, "initial", handle={"log_path": str(log), "log_offset": 0}),
                                      Attempt(2, 2.0, "restart", handle={"log_path": str(log), "log_offset": 12})])
    assert show_attempt_logs(cfg, "a", 1, False, 50) == 0
    assert capfdbinary.readouterr().out == b"one-a\none-b\n"
    assert show_attempt_logs(cfg, "a", 2, False, 1) == 0
    assert capfdbinary.readouterr().out == b"two-b\n"
