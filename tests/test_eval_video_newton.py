"""Evaluation video without Kit (issue 41): where 3.0.0's --video would add a headless Kit visualizer that cannot
start (a kit-less pip install of Isaac Lab 3.0) or that renders on a GPU the evaluation keeps off (the CPU), the
shim records from Newton's GL viewer (`--viz newton_gl`: with no DISPLAY, pyglet's headless EGL window; on a CPU
host Mesa's llvmpipe draws it), and where that viewer cannot open, the reason says exactly what is missing and the
scores come all the same. The real render on the CPU: tests/test_isaaclab3_eval.py; on an H100:
bench/isaaclab3_eval_gpu.sh video-newton (bench/results/issue41-eval-beside-gpu.txt)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_trainer_eval import TRAIN, settings

from isaacd_trainer import eval_core as C
from isaacd_trainer import shim_eval as E

REAL_PROBE = C.headless_gl_missing
KITLESS = {"isaaclab_visualizers", "isaaclab_visualizers.newton", "moviepy", "pyglet"}  # a pip install of 3.0


@pytest.fixture
def installed(monkeypatch) -> set[str]:
    """What the trainer's Python has, as find_spec sees it; an EGL that opens, unless a test says otherwise."""
    have = set(KITLESS)
    monkeypatch.setattr(E.importlib.util, "find_spec", lambda name: object() if name in have else None)
    monkeypatch.setattr(C, "headless_gl_missing", lambda: None)
    monkeypatch.delenv("DISPLAY", raising=False)
    return have


def _video_flags(argv: list[str]) -> list[str]:
    at = argv.index("--video")
    return argv[at - 2:at + 3] if argv[at - 2] == "--viz" else argv[at:at + 3]


def test_a_kitless_install_records_from_newtons_gl_viewer_when_pyglet_is_there(tmp_path, installed):
    s = settings(tmp_path, ISAACD_EVAL_DEVICE="cuda:0", ISAACD_EVAL_VIDEO="120")
    p = E.plan(TRAIN, s)
    assert p.video_reason is None
    assert _video_flags(p.argv) == ["--viz", "newton_gl", "--video", "--video_length", "120"]
    # a capture-capable visualizer the job names is its own choice: nothing added
    p = E.plan(TRAIN + ["--viz", "newton_gl"], s)
    assert p.argv.count("--viz") == 1 and p.video_reason is None and "--video" in p.argv
    installed.discard("pyglet")  # the viewer cannot open even a headless window: scores only, and why
    p = E.plan(TRAIN, s)
    assert "--video" not in p.argv and "--viz" not in p.argv
    assert p.video_reason == ("no renderer: Isaac Sim (Kit) is not installed, and Newton's GL viewer needs pyglet, "
                              "which is not installed (pip install 'pyglet>=2.1.6,<3')")


def test_on_the_cpu_video_comes_from_newtons_gl_viewer_even_with_kit(tmp_path, installed):
    s = settings(tmp_path, ISAACD_EVAL_DEVICE="cpu", ISAACD_EVAL_VIDEO="100")
    installed.add("isaacsim")  # Kit renders with RTX on a GPU: an evaluation on the CPU keeps off it
    p = E.plan(TRAIN, s)
    assert p.video_reason is None and _video_flags(p.argv) == ["--viz", "newton_gl", "--video", "--video_length",
                                                               "100"]
    p = E.plan(TRAIN + ["--viz", "kit"], s)  # the job's own RTX visualizer cannot render there: said, scores only
    assert "--video" not in p.argv and p.video_reason.startswith("no renderer: the evaluation runs on cpu, and the "
                                                                 "job's visualizer kit renders with RTX on a GPU")


def test_a_job_whose_visualizers_record_no_frames_gets_scores_and_the_reason(tmp_path, installed):
    # 3.0.0 common._resolve_video_source raises for --video with only streaming visualizers: the whole play would fail
    p = E.plan(TRAIN + ["--viz", "rerun,viser"], settings(tmp_path, ISAACD_EVAL_DEVICE="cuda:0", ISAACD_EVAL_VIDEO="9"))
    assert "--video" not in p.argv and p.argv.count("--viz") == 1
    assert p.video_reason == ("no renderer: the job's visualizers (rerun,viser) record no frames; Isaac Lab 3.0 "
                              "records video from kit, newton_gl or newton_rtx")


def test_without_egl_the_reason_names_the_library_and_the_packages(tmp_path, installed, monkeypatch):
    # the real probe (ctypes), asked for a library no host has: what a host without Mesa's EGL or glvnd says
    monkeypatch.setattr(C, "headless_gl_missing", lambda: REAL_PROBE(egl="libEGL-isaacd-absent.so.1"))
    p = E.plan(TRAIN, settings(tmp_path, ISAACD_EVAL_DEVICE="cpu", ISAACD_EVAL_VIDEO="9"))
    assert "--video" not in p.argv and "--viz" not in p.argv
    assert p.video_reason == ("no renderer: on cpu, Newton's GL viewer renders headless through EGL here (no "
                              "DISPLAY), and there is no EGL library (libEGL-isaacd-absent.so.1: Debian's libegl1, "
                              "libegl-mesa0 and libgl1-mesa-dri render on the CPU; on an NVIDIA GPU the driver's "
                              "libEGL_nvidia.so.0 with glvnd's loader)")
    monkeypatch.setenv("DISPLAY", ":0")  # with a display pyglet opens an X window: EGL is not asked
    assert E.plan(TRAIN, settings(tmp_path, ISAACD_EVAL_DEVICE="cpu", ISAACD_EVAL_VIDEO="9")).video_reason is None


def _loads(name: str) -> bool:
    try:
        ctypes.CDLL(name)
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _loads(C.EGL_SONAME), reason="no libEGL.so.1 on this host (scripts/test.sh installs Mesa's)")
def test_this_hosts_egl_lists_a_device_and_glvnd_without_a_vendor_lists_none(tmp_path):
    """The probe against the host's real EGL: Mesa lists its CPU renderer; glvnd pointed at an empty vendor folder
    (__EGL_VENDOR_LIBRARY_DIRS, a loader with no vendor library, as on a GPU image without the driver's EGL)
    lists none. A child process each: glvnd reads its vendors once per process."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import eval_core as C; "
            "print(C.headless_gl_missing() or 'ok')")
    trainer = str(Path(E.__file__).resolve().parent)

    def probe(**extra: str) -> str:
        env = {**os.environ, **extra}
        env.pop("DISPLAY", None)
        return subprocess.run([sys.executable, "-c", code, trainer], env=env, capture_output=True, text=True,
                              timeout=60, check=True).stdout.strip()

    assert probe() == "ok"
    (tmp_path / "vendors").mkdir()
    assert probe(__EGL_VENDOR_LIBRARY_DIRS=str(tmp_path / "vendors")).startswith(
        "EGL lists no device to render on (libEGL.so.1 has no vendor library")
