#!/usr/bin/env python3
"""isaacd's launcher shim: run an unmodified train script, save a checkpoint when asked to stop. Stdlib only.

Usage (any Python, e.g. Isaac Lab's own ``python.sh``/``isaaclab.sh -p``; isaacd need not be installed)::

    <python> /abs/path/shim.py SCRIPT.py [args...]
    <python> /abs/path/shim.py -m MODULE [args...]

runs the script exactly like ``<python> SCRIPT.py args`` / ``<python> -m MODULE args`` in this same process
(``sys.argv[0]`` = the script, ``sys.path[0]`` = its directory (the working directory for ``-m``), run as
``__main__``; its exit status and ``SystemExit`` are its own), plus:

* When ``rsl_rl.runners`` is imported (lazily, by a ``sys.meta_path`` hook: nothing is imported early), rsl_rl's
  ``OnPolicyRunner`` and ``DistillationRunner`` get their ``learn``/``save``/``load`` wrapped (rsl_rl 2.x - 5.x:
  the learn loop always calls ``alg.act`` first in an iteration and ``alg.update`` last before logging and the
  periodic save; the run dir is ``runner.log_dir`` (2.x - 4.x) or ``runner.logger.log_dir`` (5.x)).
* Side channel: with ``ISAACD_SHIM_EVENTS=<abs path>`` every event is one JSON line appended with a single
  ``os.write`` on an ``O_APPEND`` fd: ``event``, ``time``, ``pid``, ``rank`` and ``shim_started`` (``script``,
  ``argv``), ``checkpoint_loaded`` (``path``, ``iteration``), ``runner_started`` (``run_dir``,
  ``start_iteration``, ``num_learning_iterations``, ``runner_class``, ``rsl_rl_version``), ``checkpoint_saved``
  (``path``, ``iteration``), ``stop_requested`` (``signal``), ``stopped`` (``iteration``, ``checkpoint``),
  ``learn_finished`` (``iteration``).
* Save on stop (unless ``ISAACD_SHIM_SAVE_ON_STOP=0``): the first SIGINT/SIGTERM only sets a flag. At the next
  iteration boundary (iteration N updated, logged and periodically saved; nothing of N+1 run yet, not even an
  observation-normaliser update) ``model_<N>.pt`` is saved through the runner's own ``save`` into its run dir
  (unless rsl_rl just saved exactly that), ``stopped`` is reported and ``learn()`` returns normally, so the
  script's own cleanup runs and the process exits 0. A stop before ``learn()`` makes it return at once (no
  training, no save). A second signal exits at once with status 128+signum. With torch.distributed initialised
  the ranks agree on the stop (all_reduce MAX of the flag at every boundary). The handler is installed again
  when ``learn()`` starts, since Isaac Sim may replace handlers while it boots.
* The TensorBoard writer is flushed at every iteration boundary (rsl_rl's writer flushes only every 10 s).

With ``ISAACD_SHIM_SAVE_ON_STOP=0`` no signal handler is installed: signals behave exactly as without the shim.
"""

from __future__ import annotations

import json
import os
import runpy
import signal
import sys
import time

_PATCHED = "_isaacd_shim_patched"
_TARGETS = ("OnPolicyRunner", "DistillationRunner")


def _save_on_stop() -> bool:
    return os.environ.get("ISAACD_SHIM_SAVE_ON_STOP", "1").strip().lower() not in ("0", "false", "no", "off")


def _rank() -> int:
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


# ----------------------------------------------------------------------------------------------- side channel
class _Events:
    fd: int | None = None
    failed = False

    @classmethod
    def emit(cls, event: str, **fields) -> None:
        path = os.environ.get("ISAACD_SHIM_EVENTS")
        if not path or cls.failed:
            return
        try:
            if cls.fd is None:
                cls.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
            record = {"event": event, "time": time.time(), "pid": os.getpid(), "rank": _rank()}
            record.update(fields)
            os.write(cls.fd, (json.dumps(record, default=str) + "\n").encode("utf-8"))
        except OSError as e:  # the side channel must never break training
            cls.failed = True
            print(f"[isaacd-shim] cannot write events to {path}: {e}", file=sys.stderr, flush=True)


emit = _Events.emit


# ----------------------------------------------------------------------------------------------- signals
class _Stop:
    signum: int | None = None


def _on_signal(signum: int, frame) -> None:
    if _Stop.signum is not None:
        os._exit(128 + signum)
    _Stop.signum = signum
    name = signal.Signals(signum).name
    emit("stop_requested", signal=name)
    try:
        os.write(2, f"[isaacd-shim] {name}: saving a checkpoint at the next iteration boundary, then stopping "
                    f"(again to exit at once)\n".encode())
    except OSError:
        pass


def install_signal_handlers() -> None:
    if not _save_on_stop():
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            signal.signal(sig, _on_signal)
        except ValueError:  # not the main thread
            return


def _agree_to_stop() -> bool:
    """The local flag, OR-ed over all ranks when torch.distributed is up (a collective: call it on every rank)."""
    flag = _Stop.signum is not None
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return flag
    import torch

    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
    t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


# ----------------------------------------------------------------------------------------------- runner hooks
def _log_dir(runner) -> str | None:
    d = getattr(runner, "log_dir", None)
    if d is None:
        d = getattr(getattr(runner, "logger", None), "log_dir", None)
    return os.path.abspath(d) if d else None


def _writer(runner):
    w = getattr(getattr(runner, "logger", None), "writer", None)
    return w if w is not None else getattr(runner, "writer", None)


def _flush_writer(runner) -> None:
    w = _writer(runner)
    if w is not None and hasattr(w, "flush"):
        try:
            w.flush()
        except Exception:
            pass


def _logs_disabled(runner) -> bool:
    return bool(getattr(runner, "disable_logs", False) or getattr(getattr(runner, "logger", None), "disable_logs",
                                                                        False))


def _rsl_rl_version() -> str | None:
    try:
        from importlib import metadata

        for dist in ("rsl-rl-lib", "rsl_rl"):
            try:
                return metadata.version(dist)
            except metadata.PackageNotFoundError:
                continue
    except Exception:
        pass
    return getattr(sys.modules.get("rsl_rl"), "__version__", None)


class _StopAtBoundary(BaseException):
    """Leaves rsl_rl's learn loop at an iteration boundary (not an error; never escapes the learn wrapper)."""


class _LearnState:
    def __init__(self, start: int):
        self.start = start
        self.updates = 0  # iterations whose update finished
        self.boundary_pending = True  # the next alg.act starts an iteration

    @property
    def last_completed(self) -> int | None:
        return self.start + self.updates - 1 if self.updates else None


def _set_instance_attr(obj, name: str, value, saved: list) -> None:
    saved.append((obj, name, obj.__dict__.get(name, _MISSING)))
    setattr(obj, name, value)


_MISSING = object()


def _restore(saved: list) -> None:
    for obj, name, old in reversed(saved):
        if old is _MISSING:
            obj.__dict__.pop(name, None)
        else:
            setattr(obj, name, old)


def _num_iterations(args, kwargs):
    if "num_learning_iterations" in kwargs:
        return kwargs["num_learning_iterations"]
    return args[0] if args else None


def _wrap_learn(orig):
    def learn(self, *args, **kwargs):
        if self.__dict__.get("_isaacd_in_learn"):
            return orig(self, *args, **kwargs)
        install_signal_handlers()
        stop_enabled = _save_on_stop()
        start = int(getattr(self, "current_learning_iteration", 0) or 0)
        st = _LearnState(start)
        emit("runner_started", run_dir=_log_dir(self), start_iteration=start,
             num_learning_iterations=_num_iterations(args, kwargs), runner_class=type(self).__name__,
             rsl_rl_version=_rsl_rl_version())
        if stop_enabled and _agree_to_stop():
            emit("stopped", iteration=None, checkpoint=None)
            return None

        alg = self.alg
        orig_act, orig_update = alg.act, alg.update

        def act(*a, **kw):
            if st.boundary_pending:
                st.boundary_pending = False
                if st.updates:
                    _flush_writer(self)
                if stop_enabled and _agree_to_stop():
                    raise _StopAtBoundary
            return orig_act(*a, **kw)

        def update(*a, **kw):
            out = orig_update(*a, **kw)
            st.updates += 1
            st.boundary_pending = True
            return out

        saved: list = []
        self.__dict__["_isaacd_in_learn"] = True
        try:
            _set_instance_attr(alg, "act", act, saved)
            _set_instance_attr(alg, "update", update, saved)
            try:
                result = orig(self, *args, **kwargs)
            except _StopAtBoundary:
                _restore(saved)
                saved = []
                self.__dict__["_isaacd_in_learn"] = False
                _stop_now(self, st)
                return None
        finally:
            _restore(saved)
            self.__dict__["_isaacd_in_learn"] = False
        _flush_writer(self)
        emit("learn_finished", iteration=st.last_completed)
        return result

    learn.__wrapped__ = orig
    learn.__doc__ = orig.__doc__
    return learn


def _stop_now(runner, st: _LearnState) -> None:
    """At the boundary after iteration N: save model_N.pt through runner.save (unless just saved), report."""
    n = st.last_completed
    ckpt = None
    log_dir = _log_dir(runner)
    if n is not None and log_dir is not None and not _logs_disabled(runner) and _writer(runner) is not None:
        path = os.path.join(log_dir, f"model_{n}.pt")
        if runner.__dict__.get("_isaacd_last_save") == (path, n):
            ckpt = path
        else:
            runner.current_learning_iteration = n
            runner.save(path)
            ckpt = path
    _flush_writer(runner)
    logger = getattr(runner, "logger", None)
    if logger is not None and hasattr(logger, "stop_logging_writer") and _writer(runner) is not None:
        try:
            logger.stop_logging_writer()
        except Exception:
            pass
    name = signal.Signals(_Stop.signum).name if _Stop.signum else "stop"
    print(f"[isaacd-shim] stopped after iteration {n} ({name}); checkpoint: {ckpt}", file=sys.stderr, flush=True)
    emit("stopped", iteration=n, checkpoint=ckpt)


def _wrap_save(orig):
    def save(self, path, *args, **kwargs):
        if self.__dict__.get("_isaacd_in_save"):
            return orig(self, path, *args, **kwargs)
        self.__dict__["_isaacd_in_save"] = True
        try:
            result = orig(self, path, *args, **kwargs)
        finally:
            self.__dict__["_isaacd_in_save"] = False
        it = int(self.current_learning_iteration)
        self.__dict__["_isaacd_last_save"] = (os.path.abspath(path), it)
        emit("checkpoint_saved", path=os.path.abspath(path), iteration=it)
        return result

    save.__wrapped__ = orig
    return save


def _wrap_load(orig):
    def load(self, path, *args, **kwargs):
        if self.__dict__.get("_isaacd_in_load"):
            return orig(self, path, *args, **kwargs)
        self.__dict__["_isaacd_in_load"] = True
        try:
            result = orig(self, path, *args, **kwargs)
        finally:
            self.__dict__["_isaacd_in_load"] = False
        emit("checkpoint_loaded", path=os.path.abspath(path), iteration=getattr(self, "current_learning_iteration",
                                                                                  None))
        return result

    load.__wrapped__ = orig
    return load


def patch_runner_class(cls) -> None:
    if cls.__dict__.get(_PATCHED):
        return
    for name, wrap in (("learn", _wrap_learn), ("save", _wrap_save), ("load", _wrap_load)):
        orig = cls.__dict__.get(name)
        if orig is not None and callable(orig):
            setattr(cls, name, wrap(orig))
    setattr(cls, _PATCHED, True)


def patch_runners_module(module) -> None:
    for name in _TARGETS:
        cls = getattr(module, name, None)
        if isinstance(cls, type):
            patch_runner_class(cls)


class _PatchingLoader:
    def __init__(self, inner):
        self._inner = inner

    def create_module(self, spec):
        create = getattr(self._inner, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module):
        self._inner.exec_module(module)
        patch_runners_module(module)

    def __getattr__(self, name):
        return getattr(self._inner, name)


class RunnerImportHook:
    """``sys.meta_path`` finder: patches the runner classes right after ``rsl_rl.runners`` is executed."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "rsl_rl.runners":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _PatchingLoader(spec.loader)
        return spec


def install_import_hook() -> None:
    if any(isinstance(f, RunnerImportHook) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, RunnerImportHook())
    mod = sys.modules.get("rsl_rl.runners")
    if mod is not None:  # already imported (not the normal case)
        patch_runners_module(mod)


# ----------------------------------------------------------------------------------------------- main
USAGE = "usage: shim.py SCRIPT.py [args...] | shim.py -m MODULE [args...]"


def main() -> None:
    argv = sys.argv[1:]
    if not argv or argv[0] in ("-h", "--help") or (argv[0] == "-m" and len(argv) < 2):
        print(USAGE, file=sys.stderr if argv[:1] not in (["-h"], ["--help"]) else sys.stdout)
        sys.exit(0 if argv[:1] in (["-h"], ["--help"]) else 2)
    # keep this module importable under its own name while the target runs as __main__
    sys.modules.setdefault("isaacd_shim", sys.modules[__name__])
    install_import_hook()
    install_signal_handlers()
    if argv[0] == "-m":
        module, rest = argv[1], argv[2:]
        sys.argv = [module] + rest  # run_module(alter_sys=True) puts the module's file in argv[0]
        sys.path[0] = os.getcwd()
        emit("shim_started", script=module, argv=[module] + rest)
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        script, rest = argv[0], argv[1:]
        sys.argv = [script] + rest
        sys.path[0] = os.path.dirname(os.path.realpath(script))
        emit("shim_started", script=os.path.abspath(script), argv=[script] + rest)
        runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
