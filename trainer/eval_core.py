"""Checkpoint evaluation (issue 41), the part every evaluation shares: its settings, the episode counter, the result
JSON and the ``Eval/*`` TensorBoard scalars. Stdlib only at import (the shim loads it by path, beside itself, into
whatever Python runs the trainer); torch is imported only by :func:`write_tensorboard`.

The contract is /work/notes/eval-design.md section B: the daemon starts the job's own command line with
``ISAACD_EVAL=1`` and the variables below; the evaluation counts completed episodes, writes the result JSON (temp +
fsync + rename) at ``ISAACD_EVAL_RESULT`` and the ``Eval/*`` scalars in its own event file in
``ISAACD_EVAL_TB_DIR``, and exits 0. A checkpoint that does not load is an error JSON and exit
:data:`EXIT_EVAL_ERROR`.

Who counts what: each environment contributes its *first* episodes only, ``episodes // num_envs`` each and one more
for the first ``episodes % num_envs`` environments (so at most ``ceil(episodes / num_envs)``, and exactly
``episodes`` in all). Taking the first N episodes to finish anywhere would favour short ones (a policy that fails
fast fills the count first); fixing each environment's share in advance does not.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from typing import NoReturn

# ---------------------------------------------------------------------------------------------- environment
EVAL_ENV = "ISAACD_EVAL"  # "1": evaluation mode
CHECKPOINT_ENV = "ISAACD_EVAL_CHECKPOINT"  # absolute path of the checkpoint file
ITERATION_ENV = "ISAACD_EVAL_ITERATION"
EPISODES_ENV = "ISAACD_EVAL_EPISODES"
NUM_ENVS_ENV = "ISAACD_EVAL_NUM_ENVS"
SEED_ENV = "ISAACD_EVAL_SEED"
DEVICE_ENV = "ISAACD_EVAL_DEVICE"  # cpu | cuda:0
RESULT_ENV = "ISAACD_EVAL_RESULT"  # <checkpoint>.eval.json
TB_DIR_ENV = "ISAACD_EVAL_TB_DIR"  # <run dir>/eval
VIDEO_ENV = "ISAACD_EVAL_VIDEO"  # 0, or the video length in steps
VIDEO_DIR_ENV = "ISAACD_EVAL_VIDEO_DIR"  # <run dir>/eval/videos
BESIDE_PIDS_ENV = "ISAACD_EVAL_BESIDE_PIDS"  # the GPU training's pids: the evaluation keeps off their CPUs (shim_eval)

RESULT_VERSION = 1
EXIT_EVAL_ERROR = 3  # the evaluation knows why it failed (the error JSON says it); argparse's 2 stays argparse's
TB_TAGS = ("return_mean", "return_std", "length_mean", "success_rate")  # written as Eval/<tag>
NOT_BUILT = "evaluation of {library} checkpoints is not built yet (isaacd evaluates rsl_rl checkpoints)"
SUCCESS_KEY = "Metrics/success_rate"  # Isaac Lab 3.0 tasks that log one put it in extras["log"]


def requested(environ=None) -> bool:
    return (os.environ if environ is None else environ).get(EVAL_ENV, "").strip() == "1"


class EvalSettingsError(ValueError):
    """A missing or malformed ISAACD_EVAL_* variable (the daemon's mistake, said in one line)."""


class EvalSettings:
    """The ISAACD_EVAL_* variables, parsed and checked."""

    def __init__(self, checkpoint: str, iteration: int, episodes: int, num_envs: int, seed: int, device: str,
                 result: str, tb_dir: str | None = None, video: int = 0, video_dir: str | None = None):
        self.checkpoint, self.iteration, self.episodes, self.num_envs = checkpoint, iteration, episodes, num_envs
        self.seed, self.device, self.result, self.tb_dir = seed, device, result, tb_dir
        self.video, self.video_dir = video, video_dir

    @classmethod
    def from_env(cls, environ=None) -> "EvalSettings":
        env = os.environ if environ is None else environ

        def text(name: str, required: bool = True) -> str | None:
            value = env.get(name, "").strip()
            if not value and required:
                raise EvalSettingsError(f"{name} is not set")
            return value or None

        def integer(name: str, default: int | None = None, low: int = 0) -> int:
            raw = text(name, required=default is None)
            if raw is None:
                return default  # type: ignore[return-value]
            try:
                value = int(raw)
            except ValueError:
                raise EvalSettingsError(f"{name}={raw!r} is no integer") from None
            if value < low:
                raise EvalSettingsError(f"{name}={value} is below {low}")
            return value

        episodes = integer(EPISODES_ENV, low=1)
        return cls(checkpoint=os.path.abspath(text(CHECKPOINT_ENV)), iteration=integer(ITERATION_ENV),
                   episodes=episodes, num_envs=integer(NUM_ENVS_ENV, default=episodes, low=1),
                   seed=integer(SEED_ENV, default=42, low=-(2**63)), device=text(DEVICE_ENV, required=False) or "cpu",
                   result=text(RESULT_ENV), tb_dir=text(TB_DIR_ENV, required=False),
                   video=integer(VIDEO_ENV, default=0), video_dir=text(VIDEO_DIR_ENV, required=False))

    @staticmethod
    def partial(environ=None) -> tuple[str | None, int | None, str | None]:
        """(checkpoint, iteration, result path) as far as they can be read: enough to write an error JSON when
        the rest of the variables are wrong."""
        env = os.environ if environ is None else environ
        ck = env.get(CHECKPOINT_ENV, "").strip() or None
        try:
            it = int(env.get(ITERATION_ENV, "").strip())
        except ValueError:
            it = None
        return (os.path.abspath(ck) if ck else None), it, env.get(RESULT_ENV, "").strip() or None


# ---------------------------------------------------------------------------------------------- CPUs
def parse_cpu_list(text: str) -> set[int]:
    """The kernel's CPU list form ("0-3,8,10-11", sysfs topology files) as a set; malformed parts are left out."""
    out: set[int] = set()
    for part in text.strip().split(","):
        lo, _, hi = part.strip().partition("-")
        try:
            out.update(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            continue
    return out


def cpus_beside(allowed: set[int], busy: set[int], siblings: dict[int, set[int]]) -> set[int]:
    """The CPUs an evaluation may use beside a training whose threads run on ``busy``: ``allowed`` without those CPUs
    and their SMT siblings (``siblings[cpu]``: its thread_siblings_list; a sibling shares the core's execution
    units, so an evaluation there slows the trainer's core as surely as one on it). Where that leaves nothing, only
    the busy CPUs themselves are left out; where even that leaves nothing (a one-CPU box), ``allowed`` as it is."""
    avoid = set(busy)
    for cpu in busy:
        avoid |= siblings.get(cpu, set())
    return (allowed - avoid) or (allowed - busy) or set(allowed)


# ---------------------------------------------------------------------------------------------- headless GL
EGL_SONAME = "libEGL.so.1"
GL_SONAME = "libGL.so.1"
MESA_PACKAGES = "Debian's libegl1, libegl-mesa0 and libgl1-mesa-dri"  # Mesa's EGL and its CPU renderer (llvmpipe)


def headless_gl_missing(egl: str = EGL_SONAME, gl: str = GL_SONAME) -> str | None:
    """What keeps Newton's GL viewer from opening pyglet's headless window on this host, in words, or None where it
    can. With no DISPLAY, Isaac Lab 3.0's Newton visualizer sets pyglet's ``headless`` option
    (isaaclab_visualizers/newton/newton_visualizer.py), and pyglet 2.1 then loads EGL and GL by name
    (pyglet/libs/egl/lib.py, pyglet/gl/lib_glx.py: ``ImportError: Library "EGL" not found.``) and opens a pbuffer
    on EGL's device 0 (pyglet/display/headless.py: eglQueryDevicesEXT). Checked here before Isaac Lab's boot, with
    ctypes (~30 ms; the libraries are only loaded, no display is opened): a viewer that cannot start would fail the
    whole play run, scores and all. Mesa's EGL lists its CPU renderer as a device, so a host with no GPU records
    too; glvnd's loader with no vendor library lists none."""
    import ctypes

    try:
        lib = ctypes.CDLL(egl)
    except OSError:
        return (f"there is no EGL library ({egl}: {MESA_PACKAGES} render on the CPU; on an NVIDIA GPU the "
                "driver's libEGL_nvidia.so.0 with glvnd's loader)")
    try:
        ctypes.CDLL(gl)
    except OSError:
        return f"there is no OpenGL library ({gl}: Debian's libgl1)"
    try:
        get = lib.eglGetProcAddress
        get.restype, get.argtypes = ctypes.c_void_p, [ctypes.c_char_p]
        address = get(b"eglQueryDevicesEXT")
        if not address:
            return f"{egl} cannot list EGL devices (no EGL_EXT_device_enumeration)"
        query = ctypes.CFUNCTYPE(ctypes.c_uint, ctypes.c_int32, ctypes.c_void_p,
                                 ctypes.POINTER(ctypes.c_int32))(address)
        count = ctypes.c_int32(0)
        if not query(0, None, ctypes.byref(count)) or count.value < 1:
            return (f"EGL lists no device to render on ({egl} has no vendor library: {MESA_PACKAGES} on the CPU, "
                    "or the NVIDIA driver's libEGL_nvidia.so.0)")
    except (AttributeError, OSError) as e:
        return f"{egl} could not be asked for its devices ({type(e).__name__}: {e})"
    return None


# ---------------------------------------------------------------------------------------------- counting
def quotas(episodes: int, num_envs: int) -> list[int]:
    """Each environment's share of the episodes: the first ``episodes % num_envs`` take one more."""
    q, r = divmod(episodes, num_envs)
    return [q + (1 if i < r else 0) for i in range(num_envs)]


class EpisodeCounter:
    """Completed episodes per environment, from each step's rewards and dones (plain sequences: the callers hand
    ``tensor.tolist()``), counting each environment's first :func:`quotas` episodes only.

    A step's reward belongs to the episode that step ends (Isaac Lab and rsl_rl: the env resets inside ``step`` and
    the reward returned is the finished episode's last one). ``success`` is either a sequence (one value per
    environment, read where that environment's episode ends) or one number for the step (Isaac Lab's
    ``extras["log"]["Metrics/success_rate"]``: the rate over the episodes that ended in that step, given to each
    counted episode among them)."""

    def __init__(self, num_envs: int, episodes: int):
        if num_envs < 1 or episodes < 1:
            raise ValueError(f"num_envs ({num_envs}) and episodes ({episodes}) must be >= 1")
        self.num_envs, self.episodes = num_envs, episodes
        self.quota = quotas(episodes, num_envs)
        self._ret = [0.0] * num_envs
        self._len = [0] * num_envs
        self.returns: list[list[float]] = [[] for _ in range(num_envs)]
        self.lengths: list[list[int]] = [[] for _ in range(num_envs)]
        self.successes: list[float] = []
        self.steps = 0
        self._missing = sum(1 for q in self.quota if q > 0)  # environments still short of their share

    @property
    def counted(self) -> int:
        return sum(len(r) for r in self.returns)

    @property
    def done(self) -> bool:
        return self._missing == 0

    def observe(self, rewards, dones, success=None) -> None:
        if len(rewards) != self.num_envs or len(dones) != self.num_envs:
            raise ValueError(f"a step of {len(rewards)} rewards / {len(dones)} dones for {self.num_envs} envs")
        self.steps += 1
        per_env = success is not None and not isinstance(success, (int, float))
        for i in range(self.num_envs):
            self._ret[i] += float(rewards[i])
            self._len[i] += 1
            if not dones[i]:
                continue
            mine = self.returns[i]
            if len(mine) < self.quota[i]:
                mine.append(self._ret[i])
                self.lengths[i].append(self._len[i])
                if len(mine) == self.quota[i]:
                    self._missing -= 1
                value = success[i] if per_env else success
                if value is not None and not (isinstance(value, float) and math.isnan(value)):
                    self.successes.append(float(value))
            self._ret[i], self._len[i] = 0.0, 0

    def summary(self) -> dict:
        """The scores: mean and (population) spread of the counted episodes' returns and lengths, in a fixed
        order (environment, then episode) so the same episodes always give the same floats."""
        rets = [r for env in self.returns for r in env]
        lens = [n for env in self.lengths for n in env]
        if not rets:
            raise ValueError("no episode counted")
        return {"episodes": len(rets), "return_mean": statistics.fmean(rets), "return_std": statistics.pstdev(rets),
                "length_mean": statistics.fmean(lens), "length_std": statistics.pstdev(lens),
                "success_rate": statistics.fmean(self.successes) if self.successes else None}


def success_of(extras) -> float | None:
    """``extras["log"]["Metrics/success_rate"]`` as a float, where the step logged one."""
    log = extras.get("log") if isinstance(extras, dict) else None
    value = log.get(SUCCESS_KEY) if isinstance(log, dict) else None
    if value is None:
        return None
    try:
        return float(value.item() if hasattr(value, "item") else value)
    except (TypeError, ValueError, RuntimeError):
        return None


# ---------------------------------------------------------------------------------------------- results
def result_document(settings: EvalSettings, summary: dict, *, task: str | None, library: str, started: float,
                    video: str | None = None, gif: str | None = None, video_reason: str | None = None) -> dict:
    return {"version": RESULT_VERSION, "checkpoint": settings.checkpoint, "iteration": settings.iteration,
            "task": task, "library": library, "episodes": summary["episodes"], "num_envs": settings.num_envs,
            "seed": settings.seed, "deterministic": True,
            "return_mean": summary["return_mean"], "return_std": summary["return_std"],
            "length_mean": summary["length_mean"], "length_std": summary["length_std"],
            "success_rate": summary["success_rate"], "duration_seconds": round(time.time() - started, 3),
            "device": settings.device, "video": video, "gif": gif, "video_reason": video_reason}


def error_document(checkpoint: str | None, iteration: int | None, error: str) -> dict:
    line = " ".join(str(error).split()) or "unknown error"
    return {"version": RESULT_VERSION, "checkpoint": checkpoint, "iteration": iteration, "error": line[:2000]}


def write_json_atomic(path: str, doc: dict) -> None:
    """temp + fsync + rename + the directory fsynced: a reader sees no file or the whole one."""
    path = os.path.abspath(path)
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{os.path.basename(path)}.tmp.{os.getpid()}")
    data = (json.dumps(doc, indent=2, sort_keys=False) + "\n").encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def fail(error: str, environ=None) -> NoReturn:
    """Write the error JSON (as far as the variables allow) and exit EXIT_EVAL_ERROR."""
    ck, it, result = EvalSettings.partial(environ)
    print(f"[isaacd-eval] evaluation failed: {error}", file=sys.stderr, flush=True)
    if result:
        try:
            write_json_atomic(result, error_document(ck, it, error))
        except OSError as e:
            print(f"[isaacd-eval] could not write {result}: {e}", file=sys.stderr, flush=True)
    raise SystemExit(EXIT_EVAL_ERROR)


def write_tensorboard(tb_dir: str | None, iteration: int, summary: dict) -> str | None:
    """``Eval/*`` at step = the checkpoint's iteration, in a new event file of its own in ``tb_dir`` (training's
    event file is never opened). Returns why not, or None when written."""
    if not tb_dir:
        return "no ISAACD_EVAL_TB_DIR"
    try:
        from torch.utils.tensorboard import SummaryWriter
    except Exception as e:  # tensorboard missing from the trainer's Python
        return f"no TensorBoard writer: {e}"
    os.makedirs(tb_dir, exist_ok=True)
    writer = SummaryWriter(log_dir=tb_dir, filename_suffix=f".isaacd_eval_{iteration}")
    try:
        for tag in TB_TAGS:
            value = summary.get(tag)
            if value is not None:
                writer.add_scalar(f"Eval/{tag}", float(value), iteration)
    finally:
        writer.close()
    return None


def finish(settings: EvalSettings, summary: dict, *, task: str | None, library: str, started: float,
           video_reason: str | None = None) -> dict:
    """TensorBoard first, then the JSON: the JSON is what the daemon waits for, so when it is there so is the rest."""
    why = write_tensorboard(settings.tb_dir, settings.iteration, summary)
    if why:
        print(f"[isaacd-eval] no Eval/* scalars: {why}", file=sys.stderr, flush=True)
    doc = result_document(settings, summary, task=task, library=library, started=started, video_reason=video_reason)
    write_json_atomic(settings.result, doc)
    print(f"[isaacd-eval] {os.path.basename(settings.checkpoint)}: return {doc['return_mean']:.2f} "
          f"± {doc['return_std']:.2f}, length {doc['length_mean']:.1f} over {doc['episodes']} episodes "
          f"-> {settings.result}", file=sys.stderr, flush=True)
    return doc
