"""The launcher shim's evaluation mode (issue 41; /work/notes/eval-design.md section B). Stdlib only, loaded with the
shim (shim.py) when ``ISAACD_EVAL=1``.

The daemon starts the job's own command line (its fresh-start form) through the shim with the ``ISAACD_EVAL_*``
variables (:mod:`eval_core`). The shim then, instead of training:

* rewrites the command line (:func:`plan`): Isaac Lab 3.0's ``-m isaaclab train`` -> ``-m isaaclab play``, a
  checkout's ``scripts/reinforcement_learning/train.py`` -> its ``play.py``, a 2.x ``.../rsl_rl/train.py`` -> the
  sibling ``play.py`` (+ ``--headless``); the flags isaacd owns for training and the train-only flags that play's
  parser does not take are dropped; ``--checkpoint CK --num_envs N --seed S --device D`` and ``agent.device=D`` are
  added (the policy's device: ``--device`` moves only the simulation). The built-in trainer
  (``-m isaacd_trainer...``) runs unchanged: its entry points read ``ISAACD_EVAL`` themselves (``evaluate.py``).
  skrl / rl_games: the error JSON, "not built yet".
* hooks (the same ``sys.meta_path`` import hook as the training hooks, so nothing is imported early):
  ``RslRlVecEnvWrapper.step`` counts each step's rewards and dones (:class:`eval_core.EpisodeCounter`) and, once the
  count is complete, writes the ``Eval/*`` scalars and the result JSON and raises ``KeyboardInterrupt``, which
  3.0's ``common.run_playback`` suppresses (isaaclab 3.0.0 wheel ``isaaclab_rl/entrypoints/common.py`` line 1167),
  so ``play_rsl_rl.run`` leaves its ``ExitStack`` through ``close_env`` and exits 0 (2.x ``play.py`` has no such
  suppression: there the process ends with ``os._exit(0)`` after the result is written). The runner's ``load``: an
  exception (a torn file, another task's network, another library's checkpoint) is the error JSON and exit
  ``EXIT_EVAL_ERROR``. ``export_policy_to_jit`` / ``export_policy_to_onnx`` (3.0.0 ``play_rsl_rl.py`` lines
  146-148) and 2.x's ``export_policy_as_jit`` / ``export_policy_as_onnx`` do nothing: upstream play writes
  ``<run dir>/exported/policy.pt|onnx`` beside the checkpoint each time, which for an evaluation of every checkpoint
  means rewriting files in the live run dir that a training neither made nor needs (a backup would copy each
  version), and the ONNX export needs the ``onnx`` package, so a host without it would fail every evaluation for a
  reason that has nothing to do with the checkpoint. ``common.video_playback_steps`` returns None: with ``--video``
  upstream ends playback after one clip, here the episode count ends it.
* Deterministic actions: the play path's own ``runner.get_inference_policy`` (the policy's mean), seeded by
  ``--seed``.
* Video (``ISAACD_EVAL_VIDEO`` > 0): upstream's ``--video --video_length L`` where Isaac Lab can render
  (:func:`_video`: ``isaaclab_visualizers`` and moviepy, and Kit on a CUDA device; without Kit, or on the CPU,
  Newton's GL viewer, ``--viz newton_gl``, headless through pyglet's EGL window: an H100 rendered it, and Mesa's
  llvmpipe on a CPU host, 2026-12-06); the clip goes to ``ISAACD_EVAL_VIDEO_DIR`` and a small GIF of the same frames
  beside it. Elsewhere no video is asked for, ``video_reason`` says exactly what is missing, and the scores are
  still written.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import sys
import time

if __package__:  # isaacd_trainer.shim_eval
    from . import eval_core as C, shim_hooks as H
else:  # run by path: shim.py loaded these from beside it first
    C, H = sys.modules["isaacd_eval_core"], sys.modules["isaacd_shim_hooks"]

_STARTED = time.time()
_PATCHED = "_isaacd_eval_patched"

# flags isaacd sets itself in eval mode, or that only training takes: (name, takes a value)
_DROP = {
    # isaacd's, replaced by the evaluation's
    "--checkpoint": True, "--num_envs": True, "--seed": True, "--device": True, "--video": False,
    "--video_length": True, "--video_interval": True,
    # training's: 3.0.0 common.add_common_train_args / train_rsl_rl._parse_args (play's parser has none of them;
    # a leftover flag would reach Hydra and end the run)
    "--max_iterations": True, "--distributed": False, "--run_timestamp": True, "--export_io_descriptors": False,
    "--resume_optimizer_state": False, "--no-resume_optimizer_state": False, "--ray-proc-id": True, "-rid": True,
    "--capture_env_sensors": True, "--capture_env_sensors_length": True, "--capture_env_sensors_interval": True,
    "--capture_env_sensors_format": True,
    # 2.x resume flags (``--resume`` may be followed by True/False in <= 2.0)
    "--load_run": True, "--resume": False,
}
_LIBRARIES_2X = ("rsl_rl", "skrl", "rl_games", "sb3")
BUILTIN_PREFIX = "isaacd_trainer"


class Plan:
    """What the evaluation runs: ``argv`` (for run_target), ``kind`` ("isaaclab3" | "isaaclab2" | "builtin"),
    ``library``, ``task``, ``video_reason``; or ``error`` (one line)."""

    def __init__(self, argv=None, kind=None, library=None, task=None, video_reason=None, error=None):
        self.argv, self.kind, self.library, self.task = argv, kind, library, task
        self.video_reason, self.error = video_reason, error


def _flag_value(argv: list[str], name: str) -> str | None:
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def strip_flags(args: list[str]) -> list[str]:
    """``args`` without the flags in _DROP (``--flag value`` and ``--flag=value``) and without ``agent.device=``
    (set again for the evaluation's device)."""
    out: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        name = a.split("=", 1)[0] if a.startswith("-") else None
        if name in _DROP:
            takes = _DROP[name]
            if "=" in a:
                i += 1
            elif takes:
                i += 2
            elif name == "--resume" and i + 1 < len(args) and args[i + 1] in ("True", "False", "true", "false"):
                i += 2
            else:
                i += 1
            continue
        if a.startswith("agent.device="):
            i += 1
            continue
        out.append(a)
        i += 1
    return out


_NO_CAPTURE = ("rerun", "viser")  # 3.0.0 common._NO_CAPTURE_VISUALIZERS: streaming only, no frames to record
_RTX = ("kit", "newton_rtx")  # render with RTX: a GPU's
NEWTON_GL = "newton_gl"


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _named_visualizers(args: list[str]) -> list[str] | None:
    """The visualizers the job names (``--viz a,b`` / ``--visualizer=a``, 3.0.0 sim_launcher's CSV; ``newton`` is
    ``newton_gl``), None where it names none."""
    names: list[str] | None = None
    for i, a in enumerate(args):
        value = None
        if a in ("--viz", "--visualizer") and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith(("--viz=", "--visualizer=")):
            value = a.split("=", 1)[1]
        if value is not None:
            names = [{"newton": NEWTON_GL}.get(n, n) for n in value.split(",") if n]
    return names


def _video(settings, kind: str, args: list[str]) -> tuple[list[str], str | None]:
    """(flags to add, why no video) for ISAACD_EVAL_VIDEO. Decided before the boot: a ``--video`` that cannot render
    fails the whole play run (3.0.0 ``common.apply_video_recording`` raises; a visualizer that cannot start takes
    the run with it), and the scores must come all the same.

    What 3.0.0 records from (``common._resolve_video_source``): the first capture-capable visualizer the job names,
    else a headless Kit visualizer it adds itself. Kit (Isaac Sim) is absent from a pip install of Isaac Lab 3.0
    (kit-less, Newton), and on the CPU an evaluation keeps off the GPU that Kit's RTX renders on: there the shim
    names Newton's GL viewer instead (``--viz newton_gl``), which with no DISPLAY opens pyglet's headless EGL window
    and renders with whatever EGL offers: the GPU's, or Mesa's llvmpipe on the CPU."""
    if not settings.video:
        return [], None
    if kind == "builtin":
        return [], "no renderer: the built-in trainer's environments draw nothing"
    on_gpu = settings.device.startswith("cuda")
    if kind == "isaaclab2":  # 2.x records through Kit's cameras only
        if not on_gpu:
            return [], (f"no renderer: the evaluation runs on {settings.device}, and Isaac Lab 2.x renders video "
                        "with Kit on a GPU")
        if not _has("isaacsim"):
            return [], "no renderer: Isaac Sim (Kit) is not installed, and Isaac Lab 2.x renders video with Kit"
        return ["--video", "--video_length", str(settings.video)], None
    if not _has("isaaclab_visualizers"):
        return [], "no renderer: the isaaclab_visualizers package is not installed"
    named = _named_visualizers(args)
    viz: list[str] = []
    if named is None:
        if on_gpu and _has("isaacsim"):
            source = "kit"  # upstream's own choice
        else:
            source, viz = NEWTON_GL, ["--viz", NEWTON_GL]
    else:
        capture = [n for n in named if n not in (*_NO_CAPTURE, "none")]
        if not capture:
            return [], (f"no renderer: the job's visualizers ({','.join(named) or 'none'}) record no frames; Isaac "
                        "Lab 3.0 records video from kit, newton_gl or newton_rtx")
        source = capture[0]
    if source in _RTX and not on_gpu:
        return [], (f"no renderer: the evaluation runs on {settings.device}, and the job's visualizer {source} "
                    "renders with RTX on a GPU (newton_gl renders on the CPU)")
    if source == "kit" and not _has("isaacsim"):
        return [], "no renderer: the job's visualizer is kit, and Isaac Sim (Kit) is not installed"
    if source == NEWTON_GL:
        why = _newton_gl_missing()
        if why:
            head = ("" if named is not None else "Isaac Sim (Kit) is not installed, and " if on_gpu
                    else f"on {settings.device}, ")
            return [], f"no renderer: {head}{why}"
    if not _has("moviepy"):
        return [], "no video writer: moviepy is not installed (Isaac Lab 3.0 writes its MP4s with moviepy<2)"
    return [*viz, "--video", "--video_length", str(settings.video)], None


def _newton_gl_missing() -> str | None:
    """What Newton's GL viewer lacks on this host (a clause), or None."""
    if not _has("isaaclab_visualizers.newton"):
        return "Newton's GL viewer is not installed (isaaclab_visualizers.newton)"
    if not _has("pyglet"):
        return "Newton's GL viewer needs pyglet, which is not installed (pip install 'pyglet>=2.1.6,<3')"
    if not os.environ.get("DISPLAY"):
        missing = C.headless_gl_missing()
        if missing:
            return f"Newton's GL viewer renders headless through EGL here (no DISPLAY), and {missing}"
    return None


def plan(argv: list[str], settings) -> Plan:
    """The evaluation's command line from the job's training one (pure but for a look at the files beside a train
    script and at what the trainer's Python has installed, for video)."""
    library = _flag_value(argv, "--rl_library")
    task = _flag_value(argv, "--task")
    if argv[:1] == ["-m"] and len(argv) >= 2 and argv[1].split(".")[0] == BUILTIN_PREFIX:
        library = library or "rsl_rl"
        if library != "rsl_rl":
            return Plan(error=C.NOT_BUILT.format(library=library))
        return Plan(argv=list(argv), kind="builtin", library=library, task=task,
                    video_reason=_video(settings, "builtin", argv)[1])
    if argv[:3] == ["-m", "isaaclab", "train"]:
        kind, head, rest = "isaaclab3", ["-m", "isaaclab", "play"], argv[3:]
    elif argv and not argv[0].startswith("-") and os.path.basename(argv[0]) == "train.py":
        script = argv[0]
        folder = os.path.dirname(script)
        play = os.path.join(folder, "play.py")
        unified = os.path.basename(folder) == "reinforcement_learning"
        if not unified:
            library = os.path.basename(folder) if os.path.basename(folder) in _LIBRARIES_2X else library
        if library and library != "rsl_rl":
            return Plan(error=C.NOT_BUILT.format(library=library))
        if not os.path.isfile(play):
            return Plan(error=f"cannot evaluate: no play.py beside {script} (Isaac Lab's play script is the "
                              "evaluation)")
        kind, head, rest = ("isaaclab3" if unified else "isaaclab2"), [play], argv[1:]
    else:
        shown = " ".join(argv[:3])
        return Plan(error=f"cannot evaluate: `{shown}` is no Isaac Lab train entry point isaacd knows (`-m isaaclab "
                          "train`, scripts/reinforcement_learning/train.py, a 2.x rsl_rl/train.py or the built-in "
                          "trainer)")
    library = library or "rsl_rl"
    if library != "rsl_rl":
        return Plan(error=C.NOT_BUILT.format(library=library))
    video_flags, reason = _video(settings, kind, rest)
    ours = ["--checkpoint", settings.checkpoint, "--num_envs", str(settings.num_envs), "--seed", str(settings.seed),
            "--device", settings.device] + video_flags
    if kind == "isaaclab2" and "--headless" not in rest:
        ours.append("--headless")
    kept = strip_flags(rest)
    # --rl_library first, as `isaaclab play --rl_library rsl_rl` is written
    lib_flag: list[str] = []
    if "--rl_library" in kept:
        i = kept.index("--rl_library")
        lib_flag, kept = kept[i:i + 2], kept[:i] + kept[i + 2:]
    # kept in its order: parse_known_args takes flags among Hydra's overrides, the leftovers stay in order
    new = head + lib_flag + ours + kept + [f"agent.device={settings.device}"]
    return Plan(argv=new, kind=kind, library=library, task=task, video_reason=reason)


# ----------------------------------------------------------------------------------------------- the run
class _Eval:
    settings = None
    plan: Plan | None = None
    counter = None
    finished = False


def _on_step(out) -> None:
    """After each ``RslRlVecEnvWrapper.step``: count; at the count, the result, then the end of the play loop."""
    if _Eval.finished:
        return
    _obs, rewards, dones, extras = out
    _Eval.counter.observe(rewards.tolist(), dones.reshape(-1).tolist(), C.success_of(extras))
    if not _Eval.counter.done:
        return
    _Eval.finished = True
    s, p = _Eval.settings, _Eval.plan
    C.finish(s, _Eval.counter.summary(), task=p.task, library=p.library, started=_STARTED,
             video_reason=p.video_reason)
    if s.video and p.video_reason is None:
        atexit.register(_attach_video)
    if p.kind == "isaaclab2":  # 2.x play.py loops while the app runs and lets KeyboardInterrupt out: end here
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(0)
    raise KeyboardInterrupt  # 3.0 run_playback suppresses it; close_env follows


GIF_WIDTH = 320  # px: small enough for a chat message
GIF_FPS = 10
GIF_SECONDS = 10


def write_gif(frames, path: str, fps: float) -> str:
    """A small GIF of ``frames`` (HxWx3 uint8 arrays, at ``fps``): at most GIF_SECONDS, GIF_FPS, GIF_WIDTH wide.
    Written temp + rename; returns ``path``. PIL (Isaac Lab's own dependency) is imported here only."""
    from PIL import Image

    stride = max(1, round(fps / GIF_FPS))
    picked = list(frames)[::stride][: GIF_SECONDS * GIF_FPS]
    if not picked:
        raise ValueError("no frames")
    images = []
    for frame in picked:
        img = Image.fromarray(frame)
        if img.width > GIF_WIDTH:
            img = img.resize((GIF_WIDTH, max(1, round(img.height * GIF_WIDTH / img.width))))
        images.append(img.convert("P", palette=Image.ADAPTIVE))
    tmp = f"{path}.tmp.{os.getpid()}"
    images[0].save(tmp, format="GIF", save_all=True, append_images=images[1:], loop=0,
                   duration=max(20, round(1000 * stride / max(fps, 1e-6))))
    os.replace(tmp, path)
    return path


class _Gif:
    path: str | None = None  # the newest GIF written beside a clip of this evaluation


def _patch_recorder_module(module) -> None:
    """3.0 ``isaaclab.envs.utils.video_recorder.VideoRecorder._close_clip`` writes the MP4 from its frames: a GIF
    of the same frames beside it (``.gif``), for a chat message."""
    cls = getattr(module, "VideoRecorder", None)
    orig = getattr(cls, "_close_clip", None) if isinstance(cls, type) else None
    if orig is None or cls.__dict__.get(_PATCHED):
        return

    def _close_clip(self):
        frames, index = list(getattr(self, "_frames", []) or []), getattr(self, "_clip_index", None)
        orig(self)
        if not frames or index is None or getattr(self, "_clip_index", None) == index:
            return  # nothing recorded, or the MP4 was not written
        try:
            mp4 = self._clip_path(index)
            step_dt = getattr(self._env, "step_dt", None)
            fps = self.cfg.fps or (round(1.0 / step_dt) if step_dt else 30)
            _Gif.path = write_gif(frames, os.path.splitext(mp4)[0] + ".gif", fps)
        except Exception as e:  # a GIF is a nicety: the MP4 and the scores stand without it
            print(f"[isaacd-eval] no GIF: {type(e).__name__}: {e}", file=sys.stderr, flush=True)

    cls._close_clip = _close_clip
    setattr(cls, _PATCHED, True)


CLIP_SIZE = (640, 360)  # px: the window of a Newton GL viewer the shim adds (Isaac Lab's default is 1920x1080)


def _patch_newton_visualizer_module(module) -> None:
    """3.0 ``isaaclab_visualizers.newton.newton_visualizer.NewtonGLVisualizer._create_viewer``: the viewer the shim
    added for the clip (``--viz newton_gl``, the job named none) opens at CLIP_SIZE. Each recorded frame is rendered
    at the window's size (``render_rgb_array``, headless: on demand) and encoded into the MP4 at that size. On the
    2-core CPU test host (Mesa's llvmpipe) a 16-episode cart-pole evaluation with a 100-step clip took 33 s at
    1920x1080 and 18 s at 640x360, against 10-11 s without video (tests/test_isaaclab3_eval.py); the GIF is
    GIF_WIDTH wide either way."""
    cls = getattr(module, "NewtonGLVisualizer", None)
    orig = cls.__dict__.get("_create_viewer") if isinstance(cls, type) else None
    if orig is None or cls.__dict__.get(_PATCHED):
        return

    def _create_viewer(self, *args, **kwargs):
        cfg = getattr(self, "cfg", None)
        if cfg is not None and hasattr(cfg, "window_width") and hasattr(cfg, "window_height"):
            cfg.window_width, cfg.window_height = CLIP_SIZE
        return orig(self, *args, **kwargs)

    _create_viewer.__wrapped__ = orig
    cls._create_viewer = _create_viewer
    setattr(cls, _PATCHED, True)


def _attach_video() -> None:
    """At exit (the env closed: its recorder wrote the clip): the newest MP4 of this evaluation into the JSON."""
    s = _Eval.settings
    found = []
    for root in {d for d in (s.video_dir, os.path.join(os.path.dirname(s.checkpoint), "videos", "play")) if d}:
        for folder, _dirs, files in os.walk(root):
            for name in files:
                path = os.path.join(folder, name)
                if name.endswith(".mp4") and os.path.getmtime(path) >= _STARTED:
                    found.append((os.path.getmtime(path), path))
    try:
        import json

        with open(s.result, encoding="utf-8") as f:
            doc = json.load(f)
        if found:
            doc["video"] = max(found)[1]
            doc["gif"] = _Gif.path if _Gif.path and os.path.isfile(_Gif.path) else None
        else:
            doc["video_reason"] = "no video: the recorder wrote no MP4"
        C.write_json_atomic(s.result, doc)
    except (OSError, ValueError) as e:
        print(f"[isaacd-eval] could not add the video to {s.result}: {e}", file=sys.stderr, flush=True)


def _patch_wrapper_module(module) -> None:
    cls = getattr(module, "RslRlVecEnvWrapper", None)
    if not isinstance(cls, type) or cls.__dict__.get(_PATCHED):
        return
    orig = cls.step

    def step(self, actions):
        out = orig(self, actions)
        _on_step(out)
        return out

    step.__wrapped__ = orig
    cls.step = step
    setattr(cls, _PATCHED, True)


def _patch_runner_class(cls) -> None:
    if cls.__dict__.get(_PATCHED):
        return
    orig_load = cls.__dict__.get("load")
    if orig_load is not None:
        def load(self, path, *args, **kwargs):
            try:
                return orig_load(self, path, *args, **kwargs)
            except Exception as e:
                C.fail(f"checkpoint {os.path.abspath(path)} does not load: {type(e).__name__}: {e}")

        load.__wrapped__ = orig_load
        cls.load = load
    for name in ("export_policy_to_jit", "export_policy_to_onnx"):
        if name in cls.__dict__:
            setattr(cls, name, _no_export)
    setattr(cls, _PATCHED, True)


def _no_export(*args, **kwargs) -> None:
    """Upstream play's policy export, skipped in an evaluation (module docstring)."""


def _patch_runners_module(module) -> None:
    for name in H._TARGETS:
        cls = getattr(module, name, None)
        if isinstance(cls, type):
            _patch_runner_class(cls)


def _patch_exporter_module(module) -> None:  # 2.x play.py: isaaclab_rl.rsl_rl.export_policy_as_jit/onnx
    for name in ("export_policy_as_jit", "export_policy_as_onnx"):
        if hasattr(module, name):
            setattr(module, name, _no_export)


def _patch_common_module(module) -> None:
    """3.0 ``isaaclab_rl.entrypoints.common``: no step budget from ``--video`` (the count ends playback), and the
    play clip written to ISAACD_EVAL_VIDEO_DIR."""
    if hasattr(module, "video_playback_steps"):
        module.video_playback_steps = lambda *a, **k: None
    orig = getattr(module, "apply_video_recording", None)
    video_dir = _Eval.settings.video_dir if _Eval.settings else None
    if orig is None or not video_dir:
        return

    def apply_video_recording(env_cfg, log_dir, args_cli, *args, **kwargs):
        for cfg in getattr(env_cfg, "video_recorders", None) or []:
            if getattr(cfg, "output_dir", None) is None:
                cfg.output_dir = video_dir
        orig(env_cfg, log_dir, args_cli, *args, **kwargs)
        for cfg in getattr(env_cfg, "video_recorders", None) or []:
            if getattr(cfg, "output_dir", None) == os.path.join(log_dir, "videos", "play"):
                cfg.output_dir = video_dir

    module.apply_video_recording = apply_video_recording


def _chain(name: str, patch) -> None:
    """Add ``patch`` to the import hook's patchers of module ``name`` (after the training hooks' own)."""
    before = H._PATCHERS.get(name)

    def both(module):
        if before is not None:
            before(module)
        patch(module)

    H._PATCHERS[name] = both
    mod = sys.modules.get(name)
    if mod is not None:
        patch(mod)


def _yield_to_training() -> None:
    """An evaluation never holds training back (issue 41). On an H100 the trainer was bound by one CPU core (GPU
    24-28 % busy) and an evaluation's start-up (imports, the environment, the checkpoint: ~10 of its 13 s on one core,
    with a burst over ~5 cores) took it to 0.975x (bench/results/issue41-eval-beside-gpu.txt). So beside a GPU training
    the daemon asks for nice 19 (ISAACD_EVAL_NICE; its children inherit it) and one OpenMP/MKL thread, and names the
    training's pids so that it keeps off their cores (ISAACD_EVAL_BESIDE_PIDS)."""
    try:
        wanted = int(os.environ.get("ISAACD_EVAL_NICE", "0") or 0)
    except ValueError:
        wanted = 0
    try:
        if wanted > os.nice(0):
            os.nice(wanted - os.nice(0))
    except OSError:
        pass  # a container or a seccomp profile may refuse it: the evaluation still runs
    _keep_off_training(os.environ.get(C.BESIDE_PIDS_ENV, ""))


def _running_cpus(pid: int) -> set[int]:
    """The CPUs a process's threads run on now: its main thread's last CPU (/proc/PID/stat field 39; the trainer's
    Python loop, the thread that holds its one core) and that of each thread running at this instant (state R)."""
    cpus: set[int] = set()
    try:
        tasks = [f"/proc/{pid}/stat"] + [f"/proc/{pid}/task/{t}/stat" for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return cpus
    for k, path in enumerate(tasks):
        try:
            with open(path) as f:
                stat = f.read()
            fields = stat[stat.rindex(")") + 2:].split()  # fields[0] is field 3 (state): field 39 is fields[36]
            if k == 0 or fields[0] == "R":
                cpus.add(int(fields[36]))
        except (OSError, ValueError, IndexError):
            continue
    return cpus


def _keep_off_training(pids_text: str) -> set[int] | None:
    """Beside a GPU training (the daemon names its pids, ISAACD_EVAL_BESIDE_PIDS), run on other cores than the
    trainer's: nice 19 only orders a shared CPU's queue, and a CPU-bound trainer shares its core with whatever runs on
    that CPU (or on its SMT sibling, where there are some; the H100 VM measured in issue 41 had none). Set once, before the heavy imports, so
    every thread the evaluation makes inherits it. The new set, or None where nothing changed (no pids, no
    /proc or sysfs, no other CPU, or the kernel refused)."""
    try:
        pids = [int(p) for p in pids_text.split()]
        allowed = os.sched_getaffinity(0)
    except (ValueError, AttributeError, OSError):
        return None
    busy: set[int] = set()
    for pid in pids:
        busy |= _running_cpus(pid)
    siblings: dict[int, set[int]] = {}
    for cpu in busy:
        try:
            with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") as f:
                siblings[cpu] = C.parse_cpu_list(f.read())
        except OSError:
            pass  # no topology: the CPU itself is still avoided
    mine = C.cpus_beside(set(allowed), busy, siblings)
    if not busy or mine == set(allowed):
        return None
    try:
        os.sched_setaffinity(0, mine)
    except OSError:
        return None
    print(f"[isaacd-eval] on CPUs {sorted(mine)}: off the training's CPUs {sorted(busy)} and their SMT siblings",
          file=sys.stderr, flush=True)
    return mine


def prepare(argv: list[str]) -> list[str]:
    """Eval mode's start: the settings and the plan (or the error JSON and exit), the hooks; returns the argv to
    run."""
    _yield_to_training()
    try:
        settings = C.EvalSettings.from_env()
    except C.EvalSettingsError as e:
        C.fail(str(e))
    p = plan(argv, settings)
    if p.error:
        C.fail(p.error)
    if not os.path.isfile(settings.checkpoint):  # upstream would raise FileNotFoundError after its whole boot
        C.fail(f"checkpoint {settings.checkpoint} does not exist")
    _Eval.settings, _Eval.plan = settings, p
    if p.kind != "builtin":  # the built-in trainer evaluates itself (evaluate.py); Isaac Lab's play is hooked
        _Eval.counter = C.EpisodeCounter(settings.num_envs, settings.episodes)
        _chain("isaaclab_rl.rsl_rl.vecenv_wrapper", _patch_wrapper_module)
        _chain("rsl_rl.runners", _patch_runners_module)
        _chain("isaaclab_rl.rsl_rl.exporter", _patch_exporter_module)
        _chain("isaaclab_rl.entrypoints.common", _patch_common_module)
        if settings.video and p.video_reason is None:
            _chain("isaaclab.envs.utils.video_recorder", _patch_recorder_module)
            if _named_visualizers(argv) is None and "--viz" in p.argv:  # the shim's own viewer, for the clip
                _chain("isaaclab_visualizers.newton.newton_visualizer", _patch_newton_visualizer_module)
    print(f"[isaacd-eval] evaluating {settings.checkpoint} (iteration {settings.iteration}): {settings.episodes} "
          f"episodes on {settings.num_envs} envs, seed {settings.seed}, {settings.device}"
          + (f"; {p.video_reason}" if p.video_reason else ""), file=sys.stderr, flush=True)
    if p.kind != "builtin":
        print(f"[isaacd-eval] command line: {' '.join(p.argv)}", file=sys.stderr, flush=True)
    return p.argv
