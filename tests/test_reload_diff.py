"""What `isaacd reload` reports (issue 37): every changed key of every section, from the validated configs compared
generically (config/reload_diff.py), with when it takes effect, as the supervisor applies it and the client words it."""

from __future__ import annotations

import os
import time
from pathlib import Path

from helpers import builtin_job, write_config

from isaacd.cli.render_reload import format_reload
from isaacd.config.live_keys import job_change_detail
from isaacd.config.reload_diff import NOW, RESTART, SettingChange, changed_keys, setting_changes
from isaacd.config.schema import load_config, parse_config
from isaacd.supervisor import Supervisor


def cfg(text: str):  # noqa: ANN201
    return parse_config(text, "t.toml", Path("/srv"))


def test_every_changed_key_is_named_wherever_it_is():
    old = cfg('[[jobs]]\nname = "cp"\n')
    new = cfg('[access.defaults]\ngpus = 2\n[access.users.alice]\nqueued = 3\n[ray]\naddress = "auto"\n'
              '[[jobs]]\nname = "cp"\nmax_iterations = 9\n[jobs.watchdogs.no_progress]\ntimeout = 60\n')
    assert changed_keys(old.access, new.access, "access") == ["access.defaults.gpus", "access.users.alice"]
    assert changed_keys(old.ray, new.ray, "ray") == ["ray"]  # a section added whole
    assert changed_keys(old.jobs[0], new.jobs[0]) == ["max_iterations", "watchdogs.no_progress.timeout"]
    assert changed_keys(old, old) == [] and changed_keys(new.jobs[0], new.jobs[0]) == []


def test_held_sections_need_a_restart_and_the_rest_is_in_force_now():
    old = cfg('[[jobs]]\nname = "cp"\n')
    new = cfg('[supervisor]\ncontrol_socket = "/run/x.sock"\n[metrics]\nlisten = "127.0.0.1:9999"\n'
              '[access.defaults]\ngpus = 1\n[queue]\nmin_run_seconds = 5\n[[jobs]]\nname = "cp"\nseed = 7\n')
    got = setting_changes(old, new, held=("supervisor", "metrics", "gpu", "queue"))
    assert got == (SettingChange("supervisor.control_socket", RESTART), SettingChange("metrics.listen", RESTART),
                   SettingChange("queue.min_run_seconds", RESTART), SettingChange("access.defaults.gpus", NOW))


def test_the_answer_reads_one_line_per_change_and_no_changes_only_when_none():
    assert format_reload("/etc/isaacd.toml", {"ok": True, "added": [], "removed": [], "changed": [], "job_keys": {},
                                              "settings": [], "needs_restart": []}) == "reloaded /etc/isaacd.toml: no changes"
    text = format_reload("/etc/isaacd.toml", {
        "ok": True, "added": ["new"], "removed": [], "changed": ["cp"], "job_keys": {"cp": ["max_iterations"]},
        "settings": [{"key": "access.defaults.gpus", "applies": "now", "note": None},
                     {"key": "metrics.listen", "applies": "restart", "note": None}],
        "needs_restart": ["metrics.listen"]})
    assert text.splitlines() == [
        "reloaded /etc/isaacd.toml:",
        "  added: new",
        "  cp changed (max_iterations): applies at its next start; `isaacd restart cp` applies it now",
        "  [access] defaults.gpus: in force now",
        "  [metrics] listen: needs a supervisor restart (the running supervisor keeps the old value)"]


def test_a_supervisors_reload_reports_an_access_change_in_force_and_a_metrics_change_held(tmp_path):
    path = write_config(tmp_path, "jobs = []\n")
    path.write_text("jobs = []\n" + path.read_text().replace("jobs = []\n", ""))
    sup = Supervisor(load_config(path), str(path))
    try:
        path.write_text(path.read_text().replace("enabled = false", 'enabled = false\nlisten = "127.0.0.1:9999"')
                        + "\n[access.defaults]\ngpus = 1\n")
        past = time.time() - 5  # settled: the reload reads it at once
        os.utime(path, (past, past))
        res = sup.reload()
    finally:
        os.close(sup._lock_fd)
    assert res["ok"] and res["needs_restart"] == ["metrics.listen"]
    assert res["settings"] == [{"key": "metrics.listen", "applies": "restart", "note": None},
                               {"key": "access.defaults.gpus", "applies": "now", "note": None}]
    assert sup.config.access.defaults.gpus == 1 and sup.config.metrics.listen == "127.0.0.1:9835"


def test_a_jobs_keys_read_live_are_said_in_force_now_and_its_launch_keys_wait_for_its_next_start():
    # [jobs.eval] is read by the eval keeper at each tick: telling the user to restart the job for it was wrong
    text = format_reload("/etc/isaacd.toml", {"ok": True, "added": [], "removed": [], "changed": ["cp", "b"],
                                              "job_keys": {"cp": ["eval.every"], "b": ["num_envs", "watchdogs.xid",
                                                                                   "eval"]}, "settings": []})
    assert text.splitlines()[1:] == [
        "  cp changed (eval.every): in force now",
        "  b changed (num_envs): applies at its next start; `isaacd restart b` applies it now",
        "  b changed (watchdogs.xid, eval): in force now"]
    assert job_change_detail(["eval.max_training_cost"]) == "eval.max_training_cost in force now"
    assert job_change_detail(["seed"]) == "applies at the next start; `isaacd restart` applies it now"
    assert job_change_detail(["seed", "priority"]) == ("seed applies at the next start; `isaacd restart` applies it "
                                                       "now; priority in force now")


def test_a_job_the_reload_added_is_in_the_status_its_answer_leaves_before_any_tick(tmp_path):
    # the CLI's `reload` then `status` (CI, stop 50: the tick after the reload had not run yet, the job was not shown)
    path = write_config(tmp_path, "jobs = []\n")
    path.write_text("jobs = []\n" + path.read_text().replace("jobs = []\n", ""))
    sup = Supervisor(load_config(path), str(path))
    try:
        path.write_text(path.read_text().replace("jobs = []\n", "") + builtin_job("added"))
        past = time.time() - 5  # settled: the reload reads it at once
        os.utime(path, (past, past))
        assert sup.reload()["added"] == ["added"]
        shown = [j.name for j in sup.status().jobs]
    finally:
        os.close(sup._lock_fd)
    assert shown == ["added"]
