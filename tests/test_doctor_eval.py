"""`isaacd doctor` says once why a job asking for evaluation videos gets none on this host (issue 41)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from isaacd.cli.doctor import collect
from isaacd.cli.doctor_eval import check_eval_video
from isaacd.config.schema import parse_config


def cfg(tmp_path: Path, job_lines: str, eval_lines: str):
    text = (f'[gpu]\nsource = "none"\n[[jobs]]\nname = "cp"\nlog_root = "{tmp_path}/logs"\n{job_lines}\n'
            f"[jobs.eval]\nvideo = true\n{eval_lines}\n")
    return parse_config(text, "isaacd.toml", tmp_path)


def test_no_renderer_is_said_with_the_reason_where_it_is_known_before_any_evaluation(tmp_path):
    (builtin,) = check_eval_video(cfg(tmp_path, 'device = "cpu"', ""))
    assert builtin.status == "warn" and "built-in trainer's environments draw nothing" in builtin.detail
    # Isaac Lab on the CPU renders through Newton's GL viewer where the host's EGL and pyglet allow: the evaluation
    # decides, as on a GPU
    (on_cpu,) = check_eval_video(cfg(tmp_path, 'workflow = "rsl_rl"\ndevice = "cuda"\ngpus = [0]', 'device = "cpu"'))
    assert on_cpu.status == "pass" and "no evaluation has run yet" in on_cpu.detail


@pytest.mark.parametrize("where", ['gpu_memory = "4GiB"', 'device = "cpu"'])
def test_the_newest_evaluations_reason_is_said_and_none_before_the_first(tmp_path, where):
    c = cfg(tmp_path, 'workflow = "rsl_rl"\ndevice = "cuda"\ngpus = [0]', where)
    (first,) = check_eval_video(c)
    assert first.status == "pass" and "no evaluation has run yet" in first.detail
    run = tmp_path / "logs" / "rsl_rl" / "cp" / "2026-12-06_10-00-00"
    run.mkdir(parents=True)
    why = ("no renderer: on cpu, Newton's GL viewer renders headless through EGL here (no DISPLAY), and there is no "
           "EGL library (libEGL.so.1: Debian's libegl1, libegl-mesa0 and libgl1-mesa-dri render on the CPU; ...)")
    (run / "model_10.pt.eval.json").write_text(json.dumps({"version": 1, "video_reason": why}))
    (checked,) = check_eval_video(c)
    assert checked.status == "warn" and checked.detail.startswith(why) and "model_10.pt.eval.json" in checked.detail
    assert [x.name for x in collect(c) if x.name.startswith("eval_video")] == ["eval_video:cp"]


def test_no_job_asking_for_video_adds_no_line(tmp_path):
    c = parse_config('[[jobs]]\nname = "cp"\ndevice = "cpu"\n[jobs.eval]\n', "isaacd.toml", tmp_path)
    assert check_eval_video(c) == []
