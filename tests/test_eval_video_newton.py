"""Evaluation video on a kit-less Isaac Lab 3.0 (issue 41): with no Kit, 3.0.0's --video would add a headless Kit
visualizer that cannot start; the shim records from Newton's GL viewer instead (`--viz newton_gl`: headless through
EGL where there is no display), when isaaclab_visualizers' Newton backend and pyglet are installed, and says why not
where they are not. (The real render: bench/isaaclab3_eval_gpu.sh video-newton, and by hand on a CPU host with Mesa's
EGL: docs in bench/results/issue41-eval-beside-gpu.txt.)"""

from __future__ import annotations

from test_trainer_eval import TRAIN, settings

from isaacd_trainer import shim_eval as E


def test_a_kitless_install_records_from_newtons_gl_viewer_when_pyglet_is_there(tmp_path, monkeypatch):
    s = settings(tmp_path, ISAACD_EVAL_DEVICE="cuda:0", ISAACD_EVAL_VIDEO="120")
    installed = {"isaaclab_visualizers", "isaaclab_visualizers.newton", "moviepy", "pyglet"}  # no isaacsim
    monkeypatch.setattr(E.importlib.util, "find_spec", lambda name: object() if name in installed else None)
    p = E.plan(TRAIN, s)
    assert p.video_reason is None
    at = p.argv.index("--viz")
    assert p.argv[at:at + 5] == ["--viz", "newton_gl", "--video", "--video_length", "120"]
    # a visualizer the job names is its own choice: nothing added
    p = E.plan(TRAIN + ["--viz", "rerun"], s)
    assert p.argv.count("--viz") == 1 and p.argv[p.argv.index("--viz") + 1] == "rerun" and p.video_reason is None
    installed.discard("pyglet")  # the viewer cannot open even a headless window: scores only, and why
    p = E.plan(TRAIN, s)
    assert "--video" not in p.argv and "--viz" not in p.argv
    assert p.video_reason.startswith("no renderer: Isaac Sim (Kit) is not installed") and "pyglet" in p.video_reason
