"""A resume after a node loss never names a snapshot of the lost trainer (attempt/setting.py lost_trainer_run_dirs).

The trainer on a lost node may still run (its raylet dead, a partition) and its launcher shim rotates its snapshots:
CI once chose isaacd_snapshot_11.pt and the old trainer deleted it 3 s before the new one loaded it. Its model_N.pt
files are rsl_rl's own and never deleted, so those are what the resume names; an ordinary crash still resumes from
the newest snapshot."""

from __future__ import annotations

import re
from pathlib import Path

from isaacd.attempt.setting import JobSetting, newest_checkpoint
from isaacd.config.schema import parse_config
from isaacd.history.store import Attempt, JobHistory
from isaacd.workflows import resolve

from backup_fakes import fake_checkpoint


def _setting(tmp_path: Path) -> JobSetting:
    cfg = parse_config('[[jobs]]\nname = "cp"\nlog_root = "logs"\n', "test", tmp_path).jobs[0]
    return JobSetting(cfg, resolved=resolve(cfg, wait_probe=False))


def _history(run_dir: Path, exit_: dict) -> JobHistory:
    return JobHistory("cp", attempts=[Attempt(1, 0.0, "initial", run_dir=str(run_dir), exit=exit_)])


def _run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    for name in ("model_5.pt", "model_10.pt", "isaacd_snapshot_10.pt", "isaacd_snapshot_11.pt"):
        fake_checkpoint(run / name, int(re.findall(r"\d+", name)[0]))  # what the deep check loads
    return run


def test_after_a_node_loss_the_resume_names_a_model_checkpoint_and_says_why_not_the_snapshot(tmp_path):
    run = _run_dir(tmp_path)
    rejected: list = []
    lost = _history(run, {"code": None, "signal": None, "node_lost": True, "description": "node lost: w1"})
    chosen = newest_checkpoint(_setting(tmp_path), lost, deep=True, rejected=rejected)
    assert chosen is not None and chosen.path == run / "model_10.pt"
    assert [c.path.name for c, _ in rejected] == ["isaacd_snapshot_11.pt"]
    assert "lost node" in rejected[0][1]


def test_after_an_ordinary_crash_the_resume_names_the_newest_snapshot(tmp_path):
    run = _run_dir(tmp_path)
    killed = _history(run, {"code": None, "signal": 9, "description": "killed by signal 9 (SIGKILL)"})
    chosen = newest_checkpoint(_setting(tmp_path), killed, deep=True)
    assert chosen is not None and chosen.path == run / "isaacd_snapshot_11.pt"
