"""The launcher shim's hooks on the trainer (shim.py's docstring says what they do): save on stop (the signal
handlers and the stop at an iteration boundary), rsl_rl's runner ``learn``/``save``/``load`` and ``gymnasium.make``
wrapped by a ``sys.meta_path`` import hook, and running the target script as ``__main__``. Stdlib only, loaded with
the shim (shim.py)."""

from __future__ import annotations

import json
import os
import runpy
import signal
import sys
import time

if __package__:  # isaacd_trainer.shim_hooks
    from . import shim_protocol as P, shim_emit as E, shim_rsl_rl as R, shim_snapshots as S, shim_exit as X
else:  # run by path: shim.py loaded these from beside it first (isaacd need not be installed)
    P, E, R, S, X = (sys.modules["isaacd_shim_protocol"], sys.modules["isaacd_shim_emit"],
                     sys.modules["isaacd_shim_rsl_rl"], sys.modules["isaacd_shim_snapshots"],
                     sys.modules["isaacd_shim_exit"])

ShimEvent = P.ShimEvent
emit = E.emit
_log_dir, _writer, _flush_writer, _logs_disabled, _rsl_rl_version = (R.log_dir, R.writer, R.flush_writer,
                                                                     R.logs_disabled, R.rsl_rl_version)
Snapshots = S.Snapshots

_PATCHED = "_isaacd_shim_patched"
_TARGETS = ("OnPolicyRunner", "DistillationRunner")


def _save_on_stop() -> bool:
    return os.environ.get(P.SAVE_ON_STOP_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


# ----------------------------------------------------------------------------------------------- signals
class _Stop:
    signum: int | None = None
    at: float = 0.0  # time.monotonic() of the first signal
    duplicates = 0  # the same signal again inside the window (a wrapper's forwarded copy), absorbed


# A wrapper between isaacd and Python (`uv run ... python`) forwards the signal the process group already got, so
# the same signal arrives twice: uv (crates/uv/src/child.rs, run_to_completion) forwards SIGTERM at once and, when
# its stdin is no terminal (isaacd's trainers), SIGINT 200 ms after it got it (uv 0.13: measured). That is one
# request, not an operator insisting.
_DUPLICATE_WINDOW_S = 1.0
# Under a wrapper (this process does not lead its process group) exactly one forwarded copy is expected: it is
# absorbed, and a finished stop waits for it before the script's cleanup, up to this long after the first signal.
# 200 ms is uv's delay on a quiet machine; on a loaded 2-core one the copy came after more than the 1 s window above
# (fresh-clone CI, 2026-12-06, twice: it landed in Isaac Lab's close_env at SIG_DFL, exit 130 after a clean stop).
_FORWARDED_COPY_WAIT_S = 5.0


class _Progress:
    """Iterations this process has completed, over all its learn() calls (a stop before the first has nothing
    to save)."""

    iterations = 0


def _exit_before_first_iteration(name: str) -> None:
    """A stop while the script still boots (Isaac Lab: imports, the scene, the runner; tens of seconds) ends the
    process now, exit 0: waiting for the first boundary would run the whole boot and then save an iteration-0
    checkpoint nobody needs. Nothing of this run holds a checkpoint, so nothing can resume from it."""
    emit(ShimEvent.STOPPED, iteration=None, checkpoint=None, before_first_iteration=True)
    try:
        os.write(2, f"[isaacd-shim] {name} before the first iteration: nothing to save, exiting now\n".encode())
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    except (OSError, ValueError, RuntimeError):
        pass
    os._exit(0)


def _on_signal(signum: int, frame) -> None:
    if _Stop.signum is not None:
        since = time.monotonic() - _Stop.at
        first_copy = _Stop.duplicates == 0 and os.getpgrp() != os.getpid() and since < _FORWARDED_COPY_WAIT_S
        if signum == _Stop.signum and (since < _DUPLICATE_WINDOW_S or first_copy):
            _Stop.duplicates += 1
            return
        os._exit(128 + signum)
    _Stop.signum, _Stop.at = signum, time.monotonic()
    name = signal.Signals(signum).name
    emit(ShimEvent.STOP_REQUESTED, signal=name)
    if _Progress.iterations == 0:
        _exit_before_first_iteration(name)
    try:
        os.write(2, f"[isaacd-shim] {name}: saving a checkpoint at the next iteration boundary, then stopping "
                    f"(again to exit at once)\n".encode())
    except OSError:
        pass


def _forwarded_copy_wait_s(now: float, first_at: float, duplicates: int, group_leader: bool) -> float:
    """How much longer a finished stop waits, before the script's own cleanup, for a wrapper's forwarded copy of the
    signal. 0 when no copy can come (this process leads its process group: nothing between the sender and it), when
    the copy came, or once _FORWARDED_COPY_WAIT_S is over (a wrapper that forwards nothing)."""
    if group_leader or duplicates:
        return 0.0
    return max(0.0, first_at + _FORWARDED_COPY_WAIT_S - now)


def _await_forwarded_copy() -> None:
    """Called when the stop is done and ``learn()`` is about to return. Upstream's cleanup after ``learn()`` can set
    SIGINT to SIG_DFL (Isaac Lab 3.0's ``close_env``: "another SIGINT forces exit"), so a forwarded copy landing
    there would kill the process (exit 130 under uv) after a clean stop; the copy must land on our handler."""
    if _Stop.signum is None:  # a rank told to stop by the others: no signal of its own
        return
    leader = os.getpgrp() == os.getpid()
    while True:
        left = _forwarded_copy_wait_s(time.monotonic(), _Stop.at, _Stop.duplicates, leader)
        if left <= 0:
            return
        time.sleep(min(left, 0.02))  # short naps: the handler runs between them (PEP 475 resumes a whole sleep)


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


class BeforeLearn:
    """What runs once at the first ``learn()`` before the hooks (returns learn's arguments): the booted spare's park
    (shim_spare.py sets it when it boots the train script), else nothing."""

    park = None


def _wrap_learn(orig):
    def learn(self, *args, **kwargs):
        if self.__dict__.get("_isaacd_in_learn"):
            return orig(self, *args, **kwargs)
        called_by = X.caller(sys._getframe(1))  # whose code runs after learn(): may a saved stop exit at once?
        park, BeforeLearn.park = BeforeLearn.park, None
        if park is not None:  # a booted spare: upstream hands over to the runner here; wait for the go
            args, kwargs = park(self, args, kwargs)
        install_signal_handlers()
        stop_enabled = _save_on_stop()
        start = int(getattr(self, "current_learning_iteration", 0) or 0)
        st = _LearnState(start)
        emit(ShimEvent.RUNNER_STARTED, run_dir=_log_dir(self), start_iteration=start,
             num_learning_iterations=_num_iterations(args, kwargs), runner_class=type(self).__name__,
             rsl_rl_version=_rsl_rl_version())
        if stop_enabled and _agree_to_stop():
            why = X.refusal(self, called_by)
            emit(ShimEvent.STOPPED, iteration=None, checkpoint=None, **_exit_fields(why))
            _end_stop(self, why)
            return None

        alg = self.alg
        orig_act, orig_update = alg.act, alg.update
        snaps = Snapshots()

        def act(*a, **kw):
            if st.boundary_pending:
                st.boundary_pending = False
                if st.updates:
                    _flush_writer(self)
                if stop_enabled and _agree_to_stop():
                    raise _StopAtBoundary
                if st.updates:
                    snaps.at_boundary(self, st.last_completed)
            return orig_act(*a, **kw)

        def update(*a, **kw):
            out = orig_update(*a, **kw)
            st.updates += 1
            _Progress.iterations += 1
            st.boundary_pending = True
            if st.updates == 1:
                emit(ShimEvent.FIRST_ITERATION, iteration=st.start)
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
                why = X.refusal(self, called_by)
                _stop_now(self, st, why)
                _end_stop(self, why)
                return None
        finally:
            _restore(saved)
            self.__dict__["_isaacd_in_learn"] = False
            Snapshots.drain()
        _flush_writer(self)
        emit(ShimEvent.LEARN_FINISHED, iteration=st.last_completed)
        return result

    learn.__wrapped__ = orig
    learn.__doc__ = orig.__doc__
    return learn


def _exit_fields(why: str | None) -> dict:
    """``stopped``'s ``exit_now`` (the process ends right after it) and, if not, ``cleanup`` (why the script's own
    cleanup runs first: shim_exit.refusal)."""
    return {"exit_now": True} if why is None else {"exit_now": False, "cleanup": why}


# a test seam (issue 42), never set by isaacd: a stop whose script's cleanup runs (no quick exit) holds here, after its
# save and its `stopped` event, while the file this names exists: a slow teardown (Isaac Lab's close_env, a logger's
# finish) made by the real shim, so the supervisor's kill at the save is tested without racing the trainer
TEST_HOLD_CLEANUP_ENV = "ISAACD_SHIM_TEST_HOLD_CLEANUP"


def _end_stop(runner, why: str | None) -> None:
    """After a stop's save: exit now where nothing after learn() needs to run (shim_exit.py); else learn() returns
    once a wrapper's forwarded copy of the signal can no longer land in the script's cleanup."""
    if why is None:
        X.exit_now(runner)  # returns only if the writer could not be closed
    else:
        print(f"[isaacd-shim] the train script's own cleanup runs: {why}", file=sys.stderr, flush=True)
        hold = os.environ.get(TEST_HOLD_CLEANUP_ENV)
        while hold and os.path.exists(hold):
            time.sleep(0.05)
    _await_forwarded_copy()


def _stop_now(runner, st: _LearnState, why: str | None = None) -> None:
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
    Snapshots.drain()
    logger = getattr(runner, "logger", None)
    if logger is not None and hasattr(logger, "stop_logging_writer") and _writer(runner) is not None:
        try:
            logger.stop_logging_writer()
        except Exception:
            pass
    name = signal.Signals(_Stop.signum).name if _Stop.signum else "stop"
    print(f"[isaacd-shim] stopped after iteration {n} ({name}); checkpoint: {ckpt}", file=sys.stderr, flush=True)
    emit(ShimEvent.STOPPED, iteration=n, checkpoint=ckpt, **_exit_fields(why))


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
        emit(ShimEvent.CHECKPOINT_SAVED, path=os.path.abspath(path), iteration=it)
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
        emit(ShimEvent.CHECKPOINT_LOADED, path=os.path.abspath(path),
             iteration=getattr(self, "current_learning_iteration", None))
        _set_algorithm(self, path)
        return result

    load.__wrapped__ = orig
    return load


def _set_algorithm(runner, path: str) -> None:
    """Set ALGORITHM_SET_ENV's values on the runner's algorithm again, after the load() of its checkpoint.

    PBT (issue 40): an exploit resumes a copy of another member's checkpoint with new hyperparameters. rsl_rl's
    PPO.load takes the learning rate from the checkpoint's optimizer (rsl_rl 5.5.1 algorithms/ppo.py:
    ``self.learning_rate = self.optimizer.param_groups[0]["lr"]``), and a booted spare's algorithm was built with the
    member's old values; PPO keeps each ``agent.algorithm.<name>`` as an attribute of that name, read at every
    update. So each value is set on that attribute and, for the learning rate, in every optimizer param group; only
    after the load of the file the variable names (``<folder>/<file>``: a container sees another path), so a later
    resume of the member's own checkpoint keeps what it saved. A name the algorithm has no attribute of is reported
    (``unknown``), never set."""
    raw = os.environ.get(P.ALGORITHM_SET_ENV, "").strip()
    if not raw:
        return
    try:
        spec = json.loads(raw)
    except ValueError:
        spec = None
    values = spec.get("values") if isinstance(spec, dict) else None
    if not isinstance(values, dict) or not isinstance(spec.get("checkpoint"), str):
        emit(ShimEvent.ALGORITHM_SET, values={}, unknown=[],
             error=f"{P.ALGORITHM_SET_ENV} is no JSON object with checkpoint and values")
        return
    loaded = os.path.abspath(path)
    if f"{os.path.basename(os.path.dirname(loaded))}/{os.path.basename(loaded)}" != spec["checkpoint"]:
        return
    alg = getattr(runner, "alg", None)
    done, unknown = {}, []
    for name, value in values.items():
        if alg is None or not hasattr(alg, name):
            unknown.append(name)
            continue
        setattr(alg, name, value)
        if name == "learning_rate":
            for group in getattr(getattr(alg, "optimizer", None), "param_groups", ()):
                group["lr"] = value
        done[name] = value
    emit(ShimEvent.ALGORITHM_SET, values=done, unknown=unknown, checkpoint=loaded)
    print(f"[isaacd-shim] after the load of {spec['checkpoint']}, set {done or 'nothing'}"
          + (f"; the algorithm has no {', '.join(unknown)}" if unknown else ""), file=sys.stderr, flush=True)


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


class _Boot:
    env_made = False  # this process's first gymnasium.make returned: later ones (an eval env) are no boot phase


def _wrap_make(orig):
    """``gymnasium.make`` reporting the process's first environment creation (``env_creating``, ``env_created``):
    where Isaac Lab builds the scene, the longest part of a boot. Arguments, result and exceptions are make's own."""
    def make(*args, **kwargs):
        if _Boot.env_made:
            return orig(*args, **kwargs)
        task = args[0] if args else kwargs.get("id")
        task = task if isinstance(task, str) else getattr(task, "id", None)  # an EnvSpec
        t0 = time.monotonic()
        emit(ShimEvent.ENV_CREATING, task=task)
        env = orig(*args, **kwargs)
        _Boot.env_made = True
        emit(ShimEvent.ENV_CREATED, task=task, seconds=round(time.monotonic() - t0, 3))
        return env

    make.__wrapped__ = orig
    make.__doc__ = orig.__doc__
    make.__name__ = getattr(orig, "__name__", "make")
    return make


def patch_gymnasium(module) -> None:
    """Only with a side channel to report to: without one, gymnasium stays exactly as installed."""
    make = getattr(module, "make", None)
    if not os.environ.get(P.SHIM_EVENTS_ENV) or make is None or getattr(make, _PATCHED, False):
        return
    wrapped = _wrap_make(make)
    setattr(wrapped, _PATCHED, True)
    module.make = wrapped


# the modules the import hook patches right after they are executed
_PATCHERS = {"rsl_rl.runners": patch_runners_module, "gymnasium": patch_gymnasium}


class _PatchingLoader:
    def __init__(self, inner, patch=patch_runners_module):
        self._inner = inner
        self._patch = patch

    def create_module(self, spec):
        create = getattr(self._inner, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module):
        self._inner.exec_module(module)
        self._patch(module)

    def __getattr__(self, name):
        return getattr(self._inner, name)


class RunnerImportHook:
    """``sys.meta_path`` finder: patches the runner classes right after ``rsl_rl.runners`` is executed, and
    ``gymnasium.make`` right after ``gymnasium`` is."""

    def find_spec(self, fullname, path, target=None):
        patch = _PATCHERS.get(fullname)
        if patch is None:
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
            spec.loader = _PatchingLoader(spec.loader, patch)
        return spec


def install_import_hook() -> None:
    if any(isinstance(f, RunnerImportHook) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, RunnerImportHook())
    for name, patch in _PATCHERS.items():
        mod = sys.modules.get(name)
        if mod is not None:  # already imported (not the normal case)
            patch(mod)


def run_target(argv: list[str]) -> None:
    """Run ``SCRIPT.py args`` / ``-m MODULE args`` as ``__main__`` in this process (hook and handlers installed)."""
    if argv[0] == "-m":
        module, rest = argv[1], argv[2:]
        sys.argv = [module] + rest  # run_module(alter_sys=True) puts the module's file in argv[0]
        sys.path[0] = os.getcwd()
        emit(ShimEvent.SHIM_STARTED, script=module, argv=[module] + rest)
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        script, rest = argv[0], argv[1:]
        sys.argv = [script] + rest
        sys.path[0] = os.path.dirname(os.path.realpath(script))
        emit(ShimEvent.SHIM_STARTED, script=os.path.abspath(script), argv=[script] + rest)
        runpy.run_path(script, run_name="__main__")
