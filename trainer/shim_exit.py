"""The launcher shim's quick exit after a stop's save (issues 39 and 40): a stop whose checkpoint is saved ends the
process at once, exit 0, instead of running the rest of the train script and Python's teardown. Stdlib only, loaded
with the shim (shim.py).

Why: a paused sweep trial's GPU is free, and a PBT member's warm spare may take over, only once the trainer has
exited. After the shim's ``stopped`` event, real Isaac Lab 3.0.0 (CPU, cart-pole) still spent 0.5-1.1 s in
``close_env`` (``DirectRLEnv.close`` -> ``SimulationContext.clear_instance``: one ``gc.collect()`` over the whole
heap) and 0.2-0.3 s in the interpreter's teardown (``gc.freeze`` already set; bench/shim_exit.sh), more on a loaded
machine. None of it writes anything a resume or a person needs; this module says when that holds.

What is kept: the checkpoint and the ``stopped`` event (written before), the TensorBoard writer flushed and closed
(rsl_rl's own ``SummaryWriter`` buffers up to 10 s, torch's default 120 s), ``stdout``/``stderr`` flushed (Python's
and C's stdio), and the process's ``atexit`` handlers run as an orderly exit runs them (``logging.shutdown``
among them). What is skipped:
the script's code after ``learn()`` (Isaac Lab 3.0: a ``Training time`` line, ``close_env``, the launchers'
``close``), module teardown and the interpreter's final collections.

The normal path (the script's own cleanup, then the process's exit) stays wherever the skipped code was not checked
to be only memory release (``refusal`` names the reason, printed on stderr and in ``stopped``'s ``cleanup``):

* ``ISAACD_SHIM_FAST_EXIT=0`` (the operator's switch);
* ``learn()`` called by code other than Isaac Lab 3.0.0's rsl_rl train entry point
  (``isaaclab_rl.entrypoints.backends.train_rsl_rl._run``) or the built-in trainer's (``isaacd_trainer.isaaclab30
  .run``, ``isaacd_trainer.train_v2``'s ``train``): a user's script, Isaac Lab 2.x's ``train.py`` (Kit's
  ``simulation_app.close()``), another Isaac Lab version;
* a logger other than torch's own ``SummaryWriter`` (W&B, Neptune, a custom ``LogWriter``, rsl_rl 2.x-4.x's W&B and
  Neptune ``SummaryWriter`` subclasses): their upload and finish run in the script's cleanup and the interpreter's;
* torch.distributed initialised (the script destroys the process group; every rank exits its own way);
* Isaac Sim's Kit app or the OVRTX renderer loaded (their shutdown was not checked);
* an environment whose ``close`` was not checked: any wrapper other than gymnasium's forwarding ones and Isaac Lab's
  ``RslRlVecEnvWrapper`` (``RecordVideo``, Isaac Lab's ``CaptureEnvSensors``, ...), an env class overriding
  ``close``, an Isaac Lab env with video recorders or a recorder manager writing a dataset file;
* a thread the interpreter would wait for (non-daemon) still running.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading

if __package__:  # isaacd_trainer.shim_exit
    from . import shim_rsl_rl as R
else:  # run by path: shim.py loaded it from beside it first (isaacd need not be installed)
    R = sys.modules["isaacd_shim_rsl_rl"]

FAST_EXIT_ENV = "ISAACD_SHIM_FAST_EXIT"

# the functions that call learn() whose code after it was read (module as imported or run with -m, function name):
# Isaac Lab 3.0.0 (isaaclab_rl/entrypoints/backends/train_rsl_rl.py: the Training time print, destroy_process_group,
# then the ExitStack's close_env and launch_simulation's launchers' close); the built-in trainer (the same, and
# train_v2's env.close())
_CALLERS = {("isaaclab_rl.entrypoints.backends.train_rsl_rl", "_run"): "isaaclab",
            ("isaacd_trainer.isaaclab30", "run"): None, ("isaacd_trainer.train_v2", "train"): None}
_CHECKED_ISAACLAB = ("3.0.0",)
# close() functions that do nothing but forward to the wrapped env's
_FORWARDING = {"gymnasium.core.Wrapper.close", "gymnasium.wrappers.common.PassiveEnvChecker.close",
               "isaaclab_rl.rsl_rl.vecenv_wrapper.RslRlVecEnvWrapper.close"}
# Isaac Lab 3.0.0's env close(): the sim stopped and cleared (memory), video recorders and the recorder manager's
# dataset files closed (checked for separately, in _isaaclab_env_writes)
_ISAACLAB_ENV_CLOSE = {"isaaclab.envs.direct_rl_env.DirectRLEnv.close",
                       "isaaclab.envs.manager_based_rl_env.ManagerBasedRLEnv.close",
                       "isaaclab.envs.manager_based_env.ManagerBasedEnv.close"}
_BUILTIN_ENVS = "isaacd_trainer.envs."  # the built-in trainer's envs: close() does nothing
_SIM_APPS = ("omni.kit.app", "isaacsim", "isaaclab_ov.app")


def caller(frame) -> tuple[str, str]:
    """(module, function) of the code that called learn(); the module as imported, also when run with -m."""
    if frame is None:
        return ("", "")
    g = frame.f_globals
    spec = g.get("__spec__")
    module = getattr(spec, "name", None) or g.get("__name__", "")
    return (module, frame.f_code.co_name)


def _qualname(fn) -> str:
    fn = getattr(fn, "__func__", fn)
    return f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', '')}"


def _isaaclab_version() -> str | None:
    try:
        from importlib import metadata

        return metadata.version("isaaclab")
    except Exception:
        return None


def _isaaclab_env_writes(env) -> str | None:
    if getattr(env, "video_recorders", None):
        return "the environment records videos (env.close() writes them)"
    rec = getattr(env, "recorder_manager", None)
    if rec is not None and (getattr(rec, "_dataset_file_handler", None) is not None
                            or getattr(rec, "_failed_episode_dataset_file_handler", None) is not None):
        return "the environment's recorder manager writes a dataset file (env.close() closes it)"
    return None


def _env_refusal(runner) -> str | None:
    env, seen = getattr(runner, "env", None), 0
    while env is not None and seen < 32:
        seen += 1
        close = _qualname(type(env).close) if hasattr(type(env), "close") else ""
        if close in _FORWARDING:
            env = getattr(env, "env", None)
            continue
        if close in _ISAACLAB_ENV_CLOSE:
            return _isaaclab_env_writes(env)
        if type(env).__module__.startswith(_BUILTIN_ENVS):
            return None
        return f"the environment's close() ({close or type(env).__qualname__}) was not checked"
    return "the runner's environment was not found"


def refusal(runner, called_by: tuple[str, str]) -> str | None:
    """Why a stop that has saved must run the script's own cleanup, or None: it may exit now. Never raises: a check
    that fails keeps the normal path (the stop itself must go on)."""
    try:
        return _refusal(runner, called_by)
    except Exception as e:
        return f"the quick exit's check failed ({type(e).__name__}: {e})"


def _refusal(runner, called_by: tuple[str, str]) -> str | None:
    if os.environ.get(FAST_EXIT_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return f"{FAST_EXIT_ENV}=0"
    if called_by not in _CALLERS:
        return f"learn() called by {called_by[0]}.{called_by[1]}, whose code after it was not checked"
    if _CALLERS[called_by] == "isaaclab" and _isaaclab_version() not in _CHECKED_ISAACLAB:
        return f"Isaac Lab {_isaaclab_version()} (checked: {', '.join(_CHECKED_ISAACLAB)})"
    w = R.writer(runner)
    if w is not None and _qualname(type(w)) != "torch.utils.tensorboard.writer.SummaryWriter":
        return f"the logger {_qualname(type(w))} finishes in the script's cleanup"
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return "torch.distributed is initialised"
    loaded = [m for m in _SIM_APPS if m in sys.modules]
    if loaded:
        return f"{loaded[0]} is loaded (its shutdown was not checked)"
    why = _env_refusal(runner)
    if why:
        return why
    waits = [t.name for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()]
    if waits:
        return f"the interpreter would wait for thread {waits[0]}"
    return None


def exit_now(runner) -> None:
    """The writer closed, output flushed, the atexit handlers run, then ``os._exit(0)``. Returns only if the writer
    could not be closed (the normal path then goes on)."""
    w = R.writer(runner)
    if w is not None:
        try:
            w.flush()
            w.close()
        except Exception as e:  # the normal path then tries again
            print(f"[isaacd-shim] closing the TensorBoard writer failed ({type(e).__name__}: {e}): the script's own "
                  "cleanup runs", file=sys.stderr, flush=True)
            return
    print("[isaacd-shim] checkpoint saved: exiting now (the train script's cleanup after learn() is skipped; "
          f"{FAST_EXIT_ENV}=0 keeps it)", file=sys.stderr, flush=True)
    try:
        atexit._run_exitfuncs()  # logging.shutdown and the libraries' own exit handlers, as an orderly exit
    finally:
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                if stream is not None:
                    stream.flush()
            except Exception:
                pass
        _flush_c_stdio()
        os._exit(0)


def _flush_c_stdio() -> None:
    """What native code (Warp, Newton, torch) printed through C's stdio and still buffers: exit(3) would flush it,
    _exit(2) does not."""
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except Exception:
        pass
