#!/usr/bin/env python3
"""isaacd's launcher shim: run an unmodified train script, save a checkpoint when asked to stop. Stdlib only.

Usage (any Python, e.g. Isaac Lab's own ``python.sh``/``isaaclab.sh -p``; isaacd need not be installed)::

    <python> /abs/path/shim.py SCRIPT.py [args...]
    <python> /abs/path/shim.py -m MODULE [args...]

runs the script exactly like ``<python> SCRIPT.py args`` / ``<python> -m MODULE args`` in this same process
(``sys.argv[0]`` = the script, ``sys.path[0]`` = its directory (the working directory for ``-m``), run as
``__main__``; its exit status and ``SystemExit`` are its own), plus what follows. The names it shares with the
daemon (events, environment variables, snapshot files, the spare's go line) are defined once, in
``shim_protocol.py``, which must sit beside this file (as it does in the package; containers get both mounted):
the shim loads it from there by path, so no isaacd needs to be installed in the trainer's Python.

* When ``rsl_rl.runners`` is imported (lazily, by a ``sys.meta_path`` hook: nothing is imported early), rsl_rl's
  ``OnPolicyRunner`` and ``DistillationRunner`` get their ``learn``/``save``/``load`` wrapped (rsl_rl 2.x - 5.x:
  the learn loop always calls ``alg.act`` first in an iteration and ``alg.update`` last before logging and the
  periodic save; the run dir is ``runner.log_dir`` (2.x - 4.x) or ``runner.logger.log_dir`` (5.x)).
* Side channel: with ``ISAACD_SHIM_EVENTS=<abs path>`` every event is one JSON line appended with a single
  ``os.write`` on an ``O_APPEND`` fd: ``event``, ``time``, ``pid``, ``rank`` and ``shim_started`` (``script``,
  ``argv``), ``checkpoint_loaded`` (``path``, ``iteration``), ``runner_started`` (``run_dir``,
  ``start_iteration``, ``num_learning_iterations``, ``runner_class``, ``rsl_rl_version``), ``checkpoint_saved``
  (``path``, ``iteration``), ``stop_requested`` (``signal``), ``stopped`` (``iteration``, ``checkpoint``),
  ``learn_finished`` (``iteration``); around the process's first ``gymnasium.make`` (Isaac Lab's scene build;
  ``gymnasium.make`` is wrapped by the same import hook, and only when the side channel is on) ``env_creating``
  (``task``) and ``env_created`` (``task``, ``seconds``): the daemon tells the boot's phase from these.
* Stop before the first iteration (unless ``ISAACD_SHIM_SAVE_ON_STOP=0``): a SIGINT/SIGTERM before this process
  has completed any iteration (the script still booting, or the first iteration running) reports ``stopped``
  (``iteration`` None, ``checkpoint`` None, ``before_first_iteration`` true) and exits 0 at once: there is
  nothing worth saving, and no checkpoint of this run exists for a resume to pick.
* Save on stop (unless ``ISAACD_SHIM_SAVE_ON_STOP=0``): the first SIGINT/SIGTERM only sets a flag. At the next
  iteration boundary (iteration N updated, logged and periodically saved; nothing of N+1 run yet, not even an
  observation-normaliser update) ``model_<N>.pt`` is saved through the runner's own ``save`` into its run dir
  (unless rsl_rl just saved exactly that), ``stopped`` is reported and ``learn()`` returns normally, so the
  script's own cleanup runs and the process exits 0. A second signal exits at once with status 128+signum,
  except the same signal again within 1 s: a wrapper such as ``uv run`` forwards the signal its process group
  already delivered, and that is still the first request. When this process is not its process group's leader (a
  wrapper started it), ``learn()`` returns only once that forwarded copy has come or the 1 s has passed: the
  script's cleanup may set SIGINT to SIG_DFL (Isaac Lab 3.0's ``close_env``), where a copy still on its way would
  kill the process. With torch.distributed initialised
  the ranks agree on the stop (all_reduce MAX of the flag at every boundary). The handler is installed again
  when ``learn()`` starts, since Isaac Sim may replace handlers while it boots.
* The TensorBoard writer is flushed at every iteration boundary (rsl_rl's writer flushes only every 10 s).
* ``first_iteration`` (``iteration``) is emitted once per ``learn()``, when its first iteration's update returns
  (start-up time = that event's ``time`` minus the process start or the spare's ``spare_go``).

With ``ISAACD_SHIM_SAVE_ON_STOP=0`` no signal handler is installed: signals behave exactly as without the shim.

Per-iteration snapshots (rank 0 only; the run dir must exist and rsl_rl's log writer be on, as for the stop save):

* At the iteration boundary after iteration N (the stop-save boundary; no snapshot when stopping there, the stop
  writes ``model_<N>.pt``) the shim writes ``<run_dir>/isaacd_snapshot_<N>.pt``: the object the runner's own
  ``save`` passes to ``torch.save`` (``runner.save`` is called with ``torch.save`` intercepted on the training
  thread, which also skips rsl_rl's W&B/Neptune upload; ``iter`` = N), with every tensor detached and copied to the
  CPU (so it loads anywhere; ``runner.load`` moves it back to the runner's device). ``runner.load`` and Isaac
  Lab's ``--checkpoint`` accept it; Isaac Lab's default pattern ``model_.*.pt`` never matches it. The zip record
  prefix is ``archive/`` (torch.save to a file object) instead of the file's stem; torch.load ignores it.
* The training thread only copies (``copy_seconds``); a background thread (``isaacd-snapshot-writer``) torch.saves
  to ``<run_dir>/.isaacd_snapshot_<N>.pt.tmp.<pid>`` (never ends in ``.pt``), fsyncs, renames onto the final
  name, fsyncs the directory, then deletes all but the newest ``ISAACD_SNAPSHOT_KEEP`` ``isaacd_snapshot_*.pt``.
  If the writer is still busy at a boundary, that snapshot is skipped (never queued, never waited for). Nothing the
  trainer computes changes (no RNG use, no tensor or optimiser state touched).
* Env: ``ISAACD_SNAPSHOT_EVERY`` (default 1: iterations N with N % EVERY == 0; 0 disables),
  ``ISAACD_SNAPSHOT_MIN_SECONDS`` (default 0: at most one snapshot per that many seconds),
  ``ISAACD_SNAPSHOT_KEEP`` (default 2, at least 1), ``ISAACD_SNAPSHOT_BUDGET`` (default 0.01: a snapshot is taken only
  when the training time since the last one, times this share, covers the last one's cost: copy + write wall + writer
  CPU; 0 disables the budget).
* Events: ``snapshot_saved`` (``path``, ``iteration``, ``copy_seconds``, ``write_seconds``, ``write_cpu_seconds``:
  the writer thread's CPU time, ``bytes``) once the
  file is in place and pruning is done; ``snapshot_skipped`` (``iteration``, ``reason``, ``skipped``: the count
  so far in this learn()) the first time and every 100th; ``snapshot_failed`` (``path``, ``iteration``,
  ``error``); ``snapshot_unavailable`` (``reason``) if ``save`` never calls ``torch.save`` (snapshots then off).
* At a stop (before ``stopped``) and at the end of ``learn()`` (before ``learn_finished``, also when it raises) the
  shim waits up to 10 s for a write in flight, so no temp file is left behind by an orderly exit.

Warm spare: ``shim.py --isaacd-spare`` (no script) does the state-free start-up and waits for a go line.

* Env at spawn: ``ISAACD_SPARE_CONTROL`` (required: a FIFO the daemon created; opened O_RDONLY|O_NONBLOCK at once,
  so the daemon may open it for writing, non-blocking, as soon as the process exists), ``ISAACD_SHIM_EVENTS`` (the
  spare's own events file), ``ISAACD_SPARE_DEVICE`` (``cpu`` default, ``cuda``, ``cuda:N``),
  ``ISAACD_SPARE_PRELOAD`` (comma-separated module names).
* Preload: SIGINT/SIGTERM handlers that exit 0 at once (``spare_exited`` ``reason`` = the signal's name), the
  import hook, ``import torch``, for cuda a context on that device (one tiny allocation, then ``empty_cache``),
  ``import rsl_rl.runners`` (patched by the hook; ``GIT_PYTHON_REFRESH=quiet`` only during that import), then the
  preload modules. Import errors are reported in ``spare_ready``'s ``preload_errors`` {module: error}, not fatal.
  ``spare_ready``: ``preload_seconds``, ``rss_bytes``, ``device``, ``rsl_rl_version``, for cuda
  ``cuda_memory_bytes`` (this process on that GPU per NVML, None without nvidia-ml-py) and ``cuda_reserved_bytes``.
* Wait: one line of JSON from the FIFO: ``{"argv": ["SCRIPT.py" | "-m", "MODULE", args...], "env": {str: str},
  "cwd": "/abs/dir", "log": "/abs/file"}`` (``env``, ``cwd``, ``log`` optional; ``log``: stdout and stderr are
  reopened onto that file, appending). Every <= 0.5 s the spare checks ``os.getppid()`` against the parent it
  started with and exits 0 if it changed (``spare_exited`` ``parent exited``). EOF without a line (a writer opened
  and closed the FIFO): exit 0 (``spare_exited`` ``eof``). A line that is no valid go message: ``spare_failed``
  (``error``), exit 2. A spare writes nothing but its own events file before go.
* Go: ``spare_go`` (``argv``, ``cwd``, ``waited_seconds``) on the spare's events file: the ack isaacd holds the
  spare to (``[jobs.launch] spare_ack_timeout``; the test seam ``ISAACD_SHIM_TEST_FREEZE_AT_GO`` = ``before_ack`` /
  ``after_ack`` stops the spare itself just before / after it); then ``os.environ.update(env)``
  (new ``PYTHONPATH`` entries are also put on ``sys.path``; ``OMP_NUM_THREADS`` is applied through
  ``torch.set_num_threads``; ``PYTHONUNBUFFERED`` makes stdout/stderr write-through; changed variables that cannot
  take effect any more, e.g. ``CUDA_VISIBLE_DEVICES``, are named on stderr), the events writer is reopened (the go
  env's ``ISAACD_SHIM_EVENTS``), ``chdir(cwd)``, the save-on-stop handlers are installed, and the rest is exactly
  ``shim.py ARGV`` (``shim_started`` ... on the new events file; the script's exit status is the process's).

Booted spare (issue 21): with ``ISAACD_SPARE_BOOT_ARGV`` (a JSON list: the job's fresh-start ``SCRIPT.py args`` or
``-m MODULE args``) and ``ISAACD_SPARE_STAGING`` (a directory the daemon owns, with ``work/logs/`` in it), the spare
runs that command line in ``<staging>/work`` through the script's environment creation and runner construction, and
parks where upstream hands over to the runner: the first ``learn()`` (a fresh start never calls ``load``).

* ``spare_ready`` then says ``mode`` "booted", ``run_dir`` (the staged one), ``preload_seconds`` (the boot),
  ``rss_bytes``, ``device`` and for cuda ``cuda_memory_bytes``/``cuda_reserved_bytes``. A run dir outside the
  staging dir (a script with an absolute log path) is ``spare_failed``, exit 3; a script that ends before
  ``learn()`` too.
* The go line also carries ``resume``: ``{"checkpoint": abs path | null, "max_iterations": N, "seed": S | null}``
  (and ``log``). Then: the env, events file, output and cwd of the go as above, the save-on-stop handlers,
  ``shim_started`` (the go's ``argv``) on the attempt's events file; the staged run dir is moved to
  ``<cwd>/<its path below work/>`` under the name a cold start would give it now (``%Y-%m-%d_%H-%M-%S`` + the
  suffix; a taken name moves on by a second), ``runner.logger.log_dir`` / ``runner.log_dir`` and the env config's
  ``log_dir`` follow, ``run.json``'s ``created_at`` is renewed, and the top-level ``seed``, ``max_iterations``,
  ``load_checkpoint`` (``--checkpoint``), ``load_run``/``resume`` (2.x) and ``log_dir`` of ``params/*.yaml`` and
  ``runner.cfg`` say the attempt's values; the staging dir is removed; the env is re-seeded through its own
  ``seed`` (Isaac Lab: ``configure_seed``); ``runner.load(checkpoint)`` as Isaac Lab's script calls it
  (``map_location`` = the runner's device where ``load`` takes one); and ``learn()`` runs with
  ``num_learning_iterations`` = N. rsl_rl creates its writer (TensorBoard, W&B) and ``git/`` in ``learn()``, so
  those are the attempt's from the start.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import json
import os
import re
import runpy
import select
import signal
import sys
import threading
import time


def _load_protocol():
    """The shim <-> daemon contract, ``shim_protocol.py`` beside this file (event names, env variables, snapshot
    names). Imported as ``isaacd_trainer.shim_protocol`` when this file is ``isaacd_trainer.shim``; loaded by path
    when it runs as a script (``python /path/to/shim.py``, a container's ``/opt/isaacd/isaacd_shim.py``): the
    trainer's Python need not have isaacd installed, and the file beside the shim is the one it was shipped with."""
    if __package__:
        return importlib.import_module(".shim_protocol", __package__)
    name = "isaacd_shim_protocol"
    if name in sys.modules:
        return sys.modules[name]
    here = __file__
    dirs = dict.fromkeys(os.path.dirname(p) for p in (os.path.abspath(here), os.path.realpath(here)))
    for d in dirs:  # beside the file as named (a mount, a link), then beside what a link points to
        path = os.path.join(d, "shim_protocol.py")
        if os.path.isfile(path):
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module  # enum needs the module while it runs
            spec.loader.exec_module(module)
            return module
    raise ImportError(f"isaacd's launcher shim needs shim_protocol.py beside it (looked in {', '.join(dirs)}): "
                      "copy or mount it with the shim")


P = _load_protocol()
ShimEvent = P.ShimEvent

_PATCHED = "_isaacd_shim_patched"
_TARGETS = ("OnPolicyRunner", "DistillationRunner")


def _save_on_stop() -> bool:
    return os.environ.get(P.SAVE_ON_STOP_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def _rank() -> int:
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


# ----------------------------------------------------------------------------------------------- side channel
class _Events:
    fd: int | None = None
    failed = False
    lock = threading.Lock()  # the snapshot writer thread emits too

    @classmethod
    def reopen(cls) -> None:
        """Forget the open file: the next event goes to the (new) ``ISAACD_SHIM_EVENTS``."""
        with cls.lock:
            if cls.fd is not None:
                try:
                    os.close(cls.fd)
                except OSError:
                    pass
            cls.fd, cls.failed = None, False

    @classmethod
    def emit(cls, event: str, **fields) -> None:
        path = os.environ.get(P.SHIM_EVENTS_ENV)
        if not path or cls.failed:
            return
        try:
            if cls.fd is None:
                got = cls.lock.acquire(timeout=1.0)  # a timeout: a signal handler may emit while the lock is held
                try:
                    if cls.fd is None:
                        cls.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0),
                                         0o644)
                finally:
                    if got:
                        cls.lock.release()
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
    at: float = 0.0  # time.monotonic() of the first signal
    duplicates = 0  # the same signal again inside the window (a wrapper's forwarded copy), absorbed


# A wrapper between isaacd and Python (`uv run ... python`) forwards the signal the process group already got, so
# the same signal arrives twice: uv (crates/uv/src/child.rs, run_to_completion) forwards SIGTERM at once and, when
# its stdin is no terminal (isaacd's trainers), SIGINT 200 ms after it got it (uv 0.13: measured). That is one
# request, not an operator insisting.
_DUPLICATE_WINDOW_S = 1.0


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
        if signum == _Stop.signum and time.monotonic() - _Stop.at < _DUPLICATE_WINDOW_S:
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
    the copy came, or once the window is over (a signal after it is a second request anyway)."""
    if group_leader or duplicates:
        return 0.0
    return max(0.0, first_at + _DUPLICATE_WINDOW_S - now)


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


# ----------------------------------------------------------------------------------------------- snapshots
SNAPSHOT_PREFIX = P.SNAPSHOT_PREFIX
snapshot_name = P.snapshot_name


def _env_number(name: str, default, cast=int):
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return max(cast(raw), 0)
    except ValueError:
        print(f"[isaacd-shim] ignoring {name}={raw!r} (not a number); using {default}", file=sys.stderr, flush=True)
        return default


class _Captured(BaseException):
    """Raised by the intercepted ``torch.save`` to leave ``runner.save`` once its content is in hand."""


def _capture_save_dict(runner):
    """What ``runner.save(path)`` would write, from the runner's own ``save`` (any rsl_rl generation or subclass).

    ``torch.save`` is intercepted on this thread only; the first call's object is kept and ``save`` is left there,
    so nothing is written and the upload to W&B/Neptune that follows it in rsl_rl never happens.
    """
    import torch

    real, me, box = torch.save, threading.get_ident(), []

    def intercept(obj, f, *a, **kw):
        if threading.get_ident() != me or box:
            return real(obj, f, *a, **kw)
        box.append(obj)
        raise _Captured

    prev = runner.__dict__.get("_isaacd_in_save", _MISSING)
    runner.__dict__["_isaacd_in_save"] = True  # straight to the original save: no checkpoint_saved, no bookkeeping
    torch.save = intercept
    try:
        runner.save(os.path.join(_log_dir(runner) or ".", ".isaacd_snapshot_capture"))
    except _Captured:
        pass
    finally:
        if torch.save is intercept:
            torch.save = real
        if prev is _MISSING:
            runner.__dict__.pop("_isaacd_in_save", None)
        else:
            runner.__dict__["_isaacd_in_save"] = prev
    return box[0] if box else None


def _to_cpu(obj, torch):
    """A deep copy with every tensor detached and copied to the CPU (containers keep their types and attributes)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes)):
        return obj
    if isinstance(obj, dict):
        new = copy.copy(obj)  # same type; OrderedDict state_dicts keep their _metadata
        if hasattr(new, "__dict__"):
            new.__dict__.update(copy.deepcopy(obj.__dict__))
        for k, v in obj.items():
            new[k] = _to_cpu(v, torch)
        return new
    if isinstance(obj, list):
        return type(obj)(_to_cpu(v, torch) for v in obj) if type(obj) is list else copy.deepcopy(obj)
    if isinstance(obj, tuple):
        items = [_to_cpu(v, torch) for v in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
    return copy.deepcopy(obj)


class _SnapshotWriter:
    """One background thread that torch.saves one snapshot at a time: temp file, fsync, rename, fsync dir, prune."""

    def __init__(self, real_save):
        self.real_save = real_save
        self.cv = threading.Condition()
        self.job = None
        self.busy = False
        self.last_cost: float | None = None  # wall + CPU seconds of the last write (the snapshot budget's input)
        threading.Thread(target=self._run, name="isaacd-snapshot-writer", daemon=True).start()

    def submit(self, job: dict) -> None:
        with self.cv:
            self.busy, self.job = True, job
            self.cv.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        with self.cv:
            return self.cv.wait_for(lambda: not self.busy, timeout)

    def _run(self) -> None:
        while True:
            with self.cv:
                self.cv.wait_for(lambda: self.job is not None)
                job, self.job = self.job, None
            try:
                self._write(**job)
            except BaseException as e:  # never kill training over a snapshot
                emit(ShimEvent.SNAPSHOT_FAILED, path=job["path"], iteration=job["iteration"],
                     error=f"{type(e).__name__}: {e}")
            finally:
                with self.cv:
                    self.busy = False
                    self.cv.notify_all()

    def _write(self, obj, path: str, iteration: int, copy_seconds: float, keep: int) -> None:
        t0, c0 = time.perf_counter(), time.thread_time()
        d = os.path.dirname(path)
        tmp = os.path.join(d, P.snapshot_temp_name(os.path.basename(path), os.getpid()))  # never ends in .pt
        try:
            with open(tmp, "wb") as f:
                self.real_save(obj, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        try:
            dfd = os.open(d, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError:
            pass
        size = os.path.getsize(path)
        write_seconds = time.perf_counter() - t0
        self.last_cost = write_seconds + (time.thread_time() - c0)
        _prune_snapshots(d, keep, iteration)
        emit(ShimEvent.SNAPSHOT_SAVED, path=path, iteration=iteration, copy_seconds=round(copy_seconds, 6),
             write_seconds=round(write_seconds, 6), write_cpu_seconds=round(time.thread_time() - c0, 6), bytes=size)


def _prune_snapshots(run_dir: str, keep: int, newest: int) -> None:
    try:
        names = os.listdir(run_dir)
    except OSError:
        return
    its = sorted((int(m.group(1)) for m in map(P.SNAPSHOT_RE.match, names) if m), reverse=True)
    kept = [newest] + [i for i in its if i != newest][:max(keep, 1) - 1]
    for i in its:
        if i not in kept:
            try:
                os.unlink(os.path.join(run_dir, snapshot_name(i)))
            except OSError:
                pass


class _Snapshots:
    """Per ``learn()``: decides at each iteration boundary whether to snapshot, copies, hands off to the writer."""

    writer: _SnapshotWriter | None = None  # one per process
    DRAIN_SECONDS = 10.0

    def __init__(self):
        self.every = _env_number(P.SNAPSHOT_EVERY_ENV, 1)
        self.min_seconds = _env_number(P.SNAPSHOT_MIN_SECONDS_ENV, 0.0, float)
        self.keep = max(_env_number(P.SNAPSHOT_KEEP_ENV, 2), 1)
        # At most this share of training time goes to snapshots: the last snapshot's cost (copy on this thread,
        # the writer's wall and CPU time, which contends for the GIL) must be covered by budget x the training
        # time since it. Cheap snapshots of slow iterations (a real task: ~1 s per iteration) go every
        # iteration; a toy task at 0.1 s per iteration gets one every few iterations instead of losing 10 %.
        self.budget = _env_number(P.SNAPSHOT_BUDGET_ENV, 0.01, float)
        self.cost = 0.0
        self.last_copy = 0.0
        self.last: float | None = None
        self.skipped = 0
        self.off = self.every <= 0 or _rank() != 0

    def at_boundary(self, runner, n: int) -> None:
        if self.off or n % self.every:
            return
        log_dir = _log_dir(runner)
        if log_dir is None or _logs_disabled(runner) or _writer(runner) is None or not os.path.isdir(log_dir):
            return
        now = time.monotonic()
        if self.min_seconds and self.last is not None and now - self.last < self.min_seconds:
            return
        w = _Snapshots.writer
        if w is not None and w.last_cost is not None:
            self.cost = w.last_cost + self.last_copy
        if self.budget > 0 and self.last is not None and (now - self.last) * self.budget < self.cost:
            return
        if w is not None and w.busy:
            self.skipped += 1
            if self.skipped == 1 or self.skipped % 100 == 0:
                emit(ShimEvent.SNAPSHOT_SKIPPED, iteration=n, reason="writer busy", skipped=self.skipped)
            return
        import torch

        t0 = time.perf_counter()
        with torch.inference_mode(False), torch.no_grad():
            obj = _capture_save_dict(runner)
            if obj is None:
                self.off = True
                emit(ShimEvent.SNAPSHOT_UNAVAILABLE, reason="runner.save did not call torch.save")
                return
            obj = _to_cpu(obj, torch)
        if isinstance(obj, dict) and obj.get("iter", n) != n:
            obj["iter"] = n
        copy_seconds = time.perf_counter() - t0
        self.last, self.last_copy = now, copy_seconds
        if w is None:
            w = _Snapshots.writer = _SnapshotWriter(torch.save)
        w.submit({"obj": obj, "path": os.path.join(log_dir, snapshot_name(n)), "iteration": n,
                  "copy_seconds": copy_seconds, "keep": self.keep})

    @classmethod
    def drain(cls) -> None:
        w = cls.writer
        if w is not None and w.busy and not w.wait_idle(cls.DRAIN_SECONDS):
            print(f"[isaacd-shim] snapshot writer still busy after {cls.DRAIN_SECONDS:.0f} s; not waiting longer",
                  file=sys.stderr, flush=True)


def _wrap_learn(orig):
    def learn(self, *args, **kwargs):
        if self.__dict__.get("_isaacd_in_learn"):
            return orig(self, *args, **kwargs)
        if _Booted.waiting():  # a booted spare: upstream hands over to the runner here; wait for the go
            args, kwargs = _park_booted(self, args, kwargs)
        install_signal_handlers()
        stop_enabled = _save_on_stop()
        start = int(getattr(self, "current_learning_iteration", 0) or 0)
        st = _LearnState(start)
        emit(ShimEvent.RUNNER_STARTED, run_dir=_log_dir(self), start_iteration=start,
             num_learning_iterations=_num_iterations(args, kwargs), runner_class=type(self).__name__,
             rsl_rl_version=_rsl_rl_version())
        if stop_enabled and _agree_to_stop():
            emit(ShimEvent.STOPPED, iteration=None, checkpoint=None)
            _await_forwarded_copy()
            return None

        alg = self.alg
        orig_act, orig_update = alg.act, alg.update
        snaps = _Snapshots()

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
                _stop_now(self, st)
                _await_forwarded_copy()
                return None
        finally:
            _restore(saved)
            self.__dict__["_isaacd_in_learn"] = False
            _Snapshots.drain()
        _flush_writer(self)
        emit(ShimEvent.LEARN_FINISHED, iteration=st.last_completed)
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
    _Snapshots.drain()
    logger = getattr(runner, "logger", None)
    if logger is not None and hasattr(logger, "stop_logging_writer") and _writer(runner) is not None:
        try:
            logger.stop_logging_writer()
        except Exception:
            pass
    name = signal.Signals(_Stop.signum).name if _Stop.signum else "stop"
    print(f"[isaacd-shim] stopped after iteration {n} ({name}); checkpoint: {ckpt}", file=sys.stderr, flush=True)
    emit(ShimEvent.STOPPED, iteration=n, checkpoint=ckpt)


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


# ----------------------------------------------------------------------------------------------- main
USAGE = "usage: shim.py SCRIPT.py [args...] | shim.py -m MODULE [args...] | shim.py --isaacd-spare"


def _run_target(argv: list[str]) -> None:
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


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == [P.SPARE_FLAG]:
        sys.modules.setdefault("isaacd_shim", sys.modules[__name__])
        spare_main(argv[1:])
        return
    if not argv or argv[0] in ("-h", "--help") or (argv[0] == "-m" and len(argv) < 2):
        print(USAGE, file=sys.stderr if argv[:1] not in (["-h"], ["--help"]) else sys.stdout)
        sys.exit(0 if argv[:1] in (["-h"], ["--help"]) else 2)
    # keep this module importable under its own name while the target runs as __main__
    sys.modules.setdefault("isaacd_shim", sys.modules[__name__])
    install_import_hook()
    install_signal_handlers()
    _run_target(argv)


# ----------------------------------------------------------------------------------------------- warm spare
class _SpareExit(Exception):
    pass


def _rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _cuda_process_memory(device_index: int) -> int | None:
    """This process's memory on the GPU as NVML counts it (context included), if nvidia-ml-py is importable."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        try:
            import torch

            uuid = str(torch.cuda.get_device_properties(device_index).uuid)
            handle = None
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                u = pynvml.nvmlDeviceGetUUID(h)
                u = u.decode() if isinstance(u, bytes) else u
                if u.replace("GPU-", "") == uuid.replace("GPU-", ""):
                    handle = h
                    break
            if handle is None:
                return None
            for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if proc.pid == os.getpid():
                    return int(proc.usedGpuMemory) if proc.usedGpuMemory is not None else None
            return None
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None


def _spare_preload(device: str, preload: list[str], with_rsl_rl: bool = True) -> dict:
    """The state-free start-up: torch, the CUDA context, rsl_rl.runners (patched; not for a plain spare), the named
    modules."""
    fields: dict = {"device": device}
    errors = {}
    import torch  # noqa: F401

    if device.startswith("cuda"):
        dev = torch.device(device)
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        torch.zeros(1, device=torch.device("cuda", index))  # creates the context on that device
        torch.cuda.synchronize(index)
        torch.cuda.empty_cache()
    # rsl_rl's logger imports GitPython, which refuses to import without a git executable unless told to be quiet
    quiet_unset = "GIT_PYTHON_REFRESH" not in os.environ
    if quiet_unset:
        os.environ["GIT_PYTHON_REFRESH"] = "quiet"
    try:
        try:
            if with_rsl_rl:
                importlib.import_module("rsl_rl.runners")  # through the hook: patched
                fields["rsl_rl_version"] = _rsl_rl_version()
        except ImportError as e:
            errors["rsl_rl.runners"] = f"{type(e).__name__}: {e}"
        for name in preload:
            try:
                importlib.import_module(name)
            except BaseException as e:  # reported, not fatal (SystemExit included: a module that exits on import)
                if isinstance(e, KeyboardInterrupt):
                    raise
                errors[name] = f"{type(e).__name__}: {e}"
    finally:
        if quiet_unset:
            os.environ.pop("GIT_PYTHON_REFRESH", None)
    if device.startswith("cuda"):
        fields["cuda_memory_bytes"] = _cuda_process_memory(index)
        fields["cuda_reserved_bytes"] = int(torch.cuda.memory_reserved(index))
    if errors:
        fields["preload_errors"] = errors
    return fields


def _read_go(fd: int, parent: int) -> bytes | None:
    """One line from the FIFO (or what came before EOF); None on EOF with nothing read. Raises _SpareExit."""
    buf = b""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP)
    while True:
        if os.getppid() != parent:
            raise _SpareExit("parent exited")
        if not poller.poll(500):
            continue
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            continue
        if not chunk:
            # EOF: a writer opened the FIFO and every writer closed it again (Linux reports POLLHUP only after a
            # writer came and went, never while none has opened it yet): the daemon telling the spare to go away
            return buf if buf.strip() else None
        buf += chunk
        if b"\n" in buf:
            return buf.split(b"\n", 1)[0]


def _parse_go(line: bytes) -> tuple[list[str], dict[str, str], str | None, str | None, bool]:
    """(argv, env, cwd, log, plain) of a go line; ``plain``: run the target as plain Python (skrl, rl_games)."""
    msg = json.loads(line.decode("utf-8"))
    if not isinstance(msg, dict):
        raise ValueError("the go message is not a JSON object")
    argv, env, cwd, log = msg.get(P.GO_ARGV), msg.get(P.GO_ENV) or {}, msg.get(P.GO_CWD), msg.get(P.GO_LOG)
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv) or \
            (argv[0] == "-m" and len(argv) < 2):
        raise ValueError("'argv' must be a non-empty list of strings: SCRIPT.py [args] or -m MODULE [args]")
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise ValueError("'env' must map strings to strings")
    if cwd is not None and not isinstance(cwd, str):
        raise ValueError("'cwd' must be a string")
    if log is not None and not isinstance(log, str):
        raise ValueError("'log' must be a string")
    return argv, env, cwd, log, msg.get(P.GO_PLAIN) is True


# environment variables that cannot take effect once the interpreter, torch or CUDA are up
_FIXED_AT_START = ("PYTHONHASHSEED", "PYTHONOPTIMIZE", "PYTHONDONTWRITEBYTECODE", "PYTHONSAFEPATH", "LD_LIBRARY_PATH",
                   "LD_PRELOAD", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "PYTORCH_CUDA_ALLOC_CONF",
                   "MKL_NUM_THREADS")


def _apply_env(env: dict[str, str]) -> list[str]:
    """``os.environ.update(env)`` plus what can still follow: PYTHONPATH, OMP_NUM_THREADS, PYTHONUNBUFFERED.

    Returns the names whose new value differs from the spare's and cannot take effect in this process."""
    not_applied = sorted(k for k in _FIXED_AT_START if k in env and os.environ.get(k) != env[k])
    old_pythonpath = os.environ.get("PYTHONPATH", "")
    os.environ.update(env)
    if "PYTHONPATH" in env and env["PYTHONPATH"] != old_pythonpath:
        new = [p for p in env["PYTHONPATH"].split(os.pathsep) if p and p not in sys.path]
        sys.path[1:1] = [os.path.abspath(p) for p in new]
    if "OMP_NUM_THREADS" in env and "torch" in sys.modules:
        try:
            n = int(env["OMP_NUM_THREADS"])
            if n > 0 and sys.modules["torch"].get_num_threads() != n:
                sys.modules["torch"].set_num_threads(n)
        except ValueError:
            pass
    if env.get("PYTHONUNBUFFERED"):
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.reconfigure(write_through=True)
            except (AttributeError, ValueError):
                pass
    return not_applied


def _test_freeze(point: str) -> None:
    """The test seam ``ISAACD_SHIM_TEST_FREEZE_AT_GO`` (shim_protocol.py): stop this process here, as a spare stuck
    in a driver call would stand; only SIGCONT or SIGKILL move it on. isaacd never sets it."""
    if os.environ.get(P.TEST_FREEZE_AT_GO_ENV) == point:
        os.kill(os.getpid(), signal.SIGSTOP)


def _spare_quit(signum, frame) -> None:
    emit(ShimEvent.SPARE_EXITED, reason=signal.Signals(signum).name)
    os._exit(0)


def spare_main(extra: list[str]) -> None:
    """``shim.py --isaacd-spare``: the state-free start-up, then wait for one go line on ``ISAACD_SPARE_CONTROL``."""
    if extra:
        print("usage: shim.py --isaacd-spare (configured by ISAACD_SPARE_* environment variables)", file=sys.stderr)
        sys.exit(2)
    t_start = time.monotonic()
    parent = os.getppid()
    control = os.environ.get(P.SPARE_CONTROL_ENV)
    device = os.environ.get(P.SPARE_DEVICE_ENV, "").strip() or "cpu"
    preload = [m.strip() for m in os.environ.get(P.SPARE_PRELOAD_ENV, "").split(",") if m.strip()]
    if not control:
        print("[isaacd-shim] --isaacd-spare needs ISAACD_SPARE_CONTROL (the FIFO to read the go line from)",
              file=sys.stderr, flush=True)
        sys.exit(2)
    # waiting (and booting) a spare is not training: SIGINT/SIGTERM end it at once, exit 0, nothing written
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _spare_quit)
    try:
        fd = os.open(control, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        emit(ShimEvent.SPARE_FAILED, error=f"cannot open {control}: {e}")
        print(f"[isaacd-shim] spare: cannot open {control}: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
    plain = os.environ.get(P.SPARE_PLAIN_ENV) == "1"
    if not plain:
        install_import_hook()
    if os.environ.get(P.BOOTED_ARGV_ENV):
        _booted_spare_main(fd, parent, t_start)  # runs the train script; parks in learn() (_park_booted)
        return
    fields = _spare_preload(device, preload, with_rsl_rl=not plain)
    emit(ShimEvent.SPARE_READY, preload_seconds=round(time.monotonic() - t_start, 6), rss_bytes=_rss_bytes(), **fields)
    t_ready = time.monotonic()
    try:
        line = _read_go(fd, parent)
    except _SpareExit as e:
        emit(ShimEvent.SPARE_EXITED, reason=str(e))
        os._exit(0)
    finally:
        os.close(fd)
    if line is None:
        emit(ShimEvent.SPARE_EXITED, reason="eof")
        os._exit(0)
    try:
        argv, env, cwd, log, plain = _parse_go(line)
    except ValueError as e:
        emit(ShimEvent.SPARE_FAILED, error=f"bad go message: {e}")
        print(f"[isaacd-shim] spare: bad go message: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
    # go: from here on this process is the trainer, exactly as `shim.py ARGV` would be (Python's own handlers
    # until the env is applied; then the shim's save-on-stop ones, unless the job's env switches them off)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _test_freeze("before_ack")
    emit(ShimEvent.SPARE_GO, argv=argv, cwd=cwd, waited_seconds=round(time.monotonic() - t_ready, 6))
    _test_freeze("after_ack")
    _take_go(env, cwd, log)
    if plain:
        # a trainer isaacd runs without the shim (skrl, rl_games): from here on exactly `python SCRIPT args`
        for k in [k for k in os.environ if k.startswith(P.SPARE_ENV_PREFIX)] + [P.SHIM_EVENTS_ENV]:
            os.environ.pop(k, None)
        _Events.reopen()  # no events file any more: the target's shim_started goes nowhere
        _run_target(argv)
        return
    install_signal_handlers()
    _run_target(argv)


# ----------------------------------------------------------------------------------------------- booted spare
# Issue 21: a spare that has already run the job's train script through environment creation and runner
# construction. ``shim.py --isaacd-spare`` with ``ISAACD_SPARE_BOOT_ARGV`` runs that script (the job's fresh-start
# command line) in the daemon's staging directory and parks where upstream hands over to the runner: the first
# ``learn()`` (a fresh start never calls ``load``). At go it turns into the attempt a cold resume would have been:
# the run dir written at boot is moved to the name a cold start would give it now, the chosen checkpoint is loaded,
# the attempt's seed and iteration budget are taken, and ``learn()`` goes on. Nothing else of the script re-runs.
_RUN_TS_RE = re.compile(r"^\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}")  # upstream's run dir prefix (%Y-%m-%d_%H-%M-%S)
_RUN_TS_FORMAT = "%Y-%m-%d_%H-%M-%S"
# what an Isaac Lab rsl_rl train script writes into its run dir before learn(): the run manifest (3.x), params/,
# and (rsl_rl < 5) git/; anything else there is not the boot's own and is never removed
_BOOT_WRITES = {"run.json", "params", "git"}


class _Booted:
    """The booted spare's state (one per process): set by ``_booted_spare_main``, used once by ``_park_booted``."""

    fd: int | None = None  # the control FIFO, read end
    parent = 0
    t_start = 0.0
    staging: str | None = None
    parked = False

    @classmethod
    def waiting(cls) -> bool:
        return cls.fd is not None and not cls.parked


def _booted_spare_main(fd: int, parent: int, t_start: float) -> None:
    """Run the job's train script with its fresh-start command line; ``_park_booted`` holds it at ``learn()``."""
    try:
        argv = json.loads(os.environ.get(P.BOOTED_ARGV_ENV, ""))
    except ValueError:
        argv = None
    staging = os.environ.get(P.STAGING_ENV, "").strip()
    if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)
            and not (argv[0] == "-m" and len(argv) < 2)) or not staging:
        emit(P.ShimEvent.SPARE_FAILED, error=f"a booted spare needs {P.BOOTED_ARGV_ENV} (a JSON list: SCRIPT.py args or -m "
                                   f"MODULE args) and {P.STAGING_ENV}")
        sys.exit(2)
    _Booted.fd, _Booted.parent, _Booted.t_start = fd, parent, t_start
    _Booted.staging = os.path.abspath(staging)
    os.chdir(os.path.join(_Booted.staging, P.STAGING_WORK))  # what the boot writes (logs/...) stays in staging
    _run_target(argv)
    if not _Booted.parked:  # the script ended without ever reaching learn(): no booted spare to be had
        emit(P.ShimEvent.SPARE_FAILED, error="the train script ended before it reached the runner's learn()")
        sys.exit(3)


def _parse_resume(line: bytes) -> dict:
    """The go line's ``resume``: {checkpoint: abs path | None, max_iterations: int, seed: int | None}."""
    resume = json.loads(line.decode("utf-8")).get(P.GO_RESUME)
    if not isinstance(resume, dict):
        raise ValueError("a booted spare's go message needs 'resume' {checkpoint, max_iterations, seed}")
    ckpt, n, seed = resume.get("checkpoint"), resume.get("max_iterations"), resume.get("seed")
    if ckpt is not None and not isinstance(ckpt, str):
        raise ValueError("'resume.checkpoint' must be a path or null")
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError("'resume.max_iterations' must be an integer >= 0")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise ValueError("'resume.seed' must be an integer or null")
    return {"checkpoint": ckpt, "max_iterations": n, "seed": seed}


def _park_booted(runner, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Hold the booted script at ``learn()`` until the go; then make it the attempt. Returns learn's new args."""
    _Booted.parked = True
    staged = _log_dir(runner)
    problem = _staging_problem(staged, _Booted.staging)
    if problem is not None:
        emit(P.ShimEvent.SPARE_FAILED, error=problem)
        print(f"[isaacd-shim] booted spare: {problem}", file=sys.stderr, flush=True)
        os._exit(3)
    device = str(getattr(runner, "device", "cpu") or "cpu")
    emit(P.ShimEvent.SPARE_READY, preload_seconds=round(time.monotonic() - _Booted.t_start, 6), rss_bytes=_rss_bytes(),
         device=device, mode="booted", run_dir=staged, rsl_rl_version=_rsl_rl_version(), **_cuda_fields(device))
    t_ready = time.monotonic()
    fd, _Booted.fd = _Booted.fd, None
    try:
        line = _read_go(fd, _Booted.parent)
    except _SpareExit as e:
        emit(P.ShimEvent.SPARE_EXITED, reason=str(e))
        os._exit(0)
    finally:
        os.close(fd)
    if line is None:
        emit(P.ShimEvent.SPARE_EXITED, reason="eof")
        os._exit(0)
    try:
        argv, env, cwd, log, _plain = _parse_go(line)
        resume = _parse_resume(line)
    except ValueError as e:
        emit(P.ShimEvent.SPARE_FAILED, error=f"bad go message: {e}")
        print(f"[isaacd-shim] spare: bad go message: {e}", file=sys.stderr, flush=True)
        os._exit(2)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _test_freeze("before_ack")
    emit(P.ShimEvent.SPARE_GO, argv=argv, cwd=cwd, waited_seconds=round(time.monotonic() - t_ready, 6), mode="booted")
    _test_freeze("after_ack")
    _become_attempt(env, cwd, log)
    install_signal_handlers()
    _announce_target(argv)  # shim_started on the attempt's events file, as a cold start's first event
    run_dir = _adopt_staged_run(runner, staged, os.getcwd(), resume, argv)
    try:
        import shutil

        shutil.rmtree(_Booted.staging, ignore_errors=True)  # what is left of the staging: the empty logs/ tree
    except Exception:
        pass
    if resume["seed"] is not None:
        _reseed(runner, resume["seed"])
    ckpt = resume["checkpoint"]
    if ckpt is not None:
        print(f"[INFO]: Loading model checkpoint from: {ckpt}", flush=True)
        _load_like_upstream(runner, ckpt)
    print(f"[isaacd-shim] booted spare: took over as the attempt (run dir {run_dir}, "
          f"{resume['max_iterations']} iterations from {ckpt or 'scratch'})", file=sys.stderr, flush=True)
    n = resume["max_iterations"]
    if "num_learning_iterations" in kwargs or not args:
        kwargs = dict(kwargs, num_learning_iterations=n)
    else:
        args = (n,) + tuple(args[1:])
    return args, kwargs


def _staging_problem(run_dir: str | None, staging: str | None) -> str | None:
    """Why the boot's run dir cannot be staged (it must lie inside the staging dir), or None."""
    if run_dir is None:
        return "the runner has no log dir (logging off): nothing to hand over as the attempt's run dir"
    if staging is None:
        return "no staging directory"
    real, root = os.path.realpath(run_dir), os.path.realpath(os.path.join(staging, P.STAGING_WORK))
    if os.path.commonpath([real, root]) != root:
        return (f"the train script wrote its run dir {run_dir} outside the spare's working directory (an absolute "
                "log path): a booted spare would show up as a run of the job; use spare = imports")
    return None


def _take_go(env: dict, cwd: str | None, log: str | None) -> None:
    """A go's environment, events file, output and working directory: this process becomes the attempt's."""
    not_applied = _apply_env(env)
    _Events.reopen()
    if log is not None:
        lfd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(lfd, 1)
        os.dup2(lfd, 2)
        os.close(lfd)
    if not_applied:
        print(f"[isaacd-shim] spare: these variables differ from the spare's and cannot change in a running process: "
              f"{', '.join(not_applied)}", file=sys.stderr, flush=True)
    if cwd:
        os.chdir(cwd)


def _become_attempt(env: dict, cwd: str | None, log: str | None) -> None:
    """A booted spare's go: as ``spare_main``'s, and the spare's own variables gone (the train script runs on)."""
    _take_go(env, cwd, log)
    for k in [k for k in os.environ if k.startswith(P.SPARE_ENV_PREFIX)]:
        os.environ.pop(k, None)


def _announce_target(argv: list[str]) -> None:
    """``shim_started`` for the attempt's command line, and ``sys.argv`` as a cold start of it would have it."""
    if argv[0] == "-m":
        emit(P.ShimEvent.SHIM_STARTED, script=argv[1], argv=[argv[1]] + argv[2:])
        sys.argv[1:] = argv[2:]
    else:
        emit(P.ShimEvent.SHIM_STARTED, script=os.path.abspath(argv[0]), argv=list(argv))
        sys.argv[1:] = argv[1:]


def _fresh_run_name(old: str, parent: str, now: float | None = None) -> str:
    """The name a cold start would give this run dir now (upstream: ``<%Y-%m-%d_%H-%M-%S>[_<run_name>]``); a name
    taken already (two starts in one second) moves on by a second, as a cold start a second later would."""
    m = _RUN_TS_RE.match(old)
    t = time.time() if now is None else now
    for k in range(600):
        name = (time.strftime(_RUN_TS_FORMAT, time.localtime(t + k)) + old[m.end():]) if m else \
            (old if k == 0 else f"{old}_{k}")
        if not os.path.lexists(os.path.join(parent, name)):
            return name
    raise FileExistsError(f"no free run dir name for {old} in {parent}")


def _move_dir(src: str, dst: str) -> None:
    """rename(2); across filesystems (the staging under isaacd's state dir, log_root elsewhere) copy, then remove."""
    try:
        os.rename(src, dst)
    except OSError as e:
        import errno
        import shutil

        if e.errno != errno.EXDEV:
            raise
        shutil.copytree(src, dst, symlinks=True)
        shutil.rmtree(src, ignore_errors=True)


def _adopt_staged_run(runner, staged: str, cwd: str, resume: dict, argv: list[str]) -> str:
    """Move the boot's run dir to where a cold start in ``cwd`` would have made it now; point the runner (and the
    env's config) at it; make its run manifest and params say what a cold resume's would. Returns the new dir."""
    rel = os.path.relpath(staged, os.path.join(_Booted.staging or "", P.STAGING_WORK))
    parent = os.path.join(cwd, os.path.dirname(rel))
    os.makedirs(parent, exist_ok=True)
    target = os.path.join(parent, _fresh_run_name(os.path.basename(staged), parent))
    _move_dir(staged, target)
    for obj in (runner, getattr(runner, "logger", None)):
        d = getattr(obj, "log_dir", None) if obj is not None else None
        if isinstance(d, str) and os.path.abspath(d) == staged:
            obj.log_dir = target  # rsl_rl 2.x-4.x: runner.log_dir; 5.x: runner.logger.log_dir (writer made in learn)
    env_cfg = _env_cfg(runner)
    if env_cfg is not None and isinstance(getattr(env_cfg, "log_dir", None), str) and \
            os.path.abspath(env_cfg.log_dir) == staged:
        env_cfg.log_dir = target  # Isaac Lab's env_cfg.log_dir (videos, IO descriptors) is the run dir
    _renew_manifest(target)
    agent, env = _cold_values(resume, argv), {}
    if resume["seed"] is not None:
        env["seed"] = resume["seed"]
    env["log_dir"] = target
    _rewrite_top_level(os.path.join(target, "params", "agent.yaml"), agent)
    _rewrite_top_level(os.path.join(target, "params", "env.yaml"), env)
    cfg = getattr(runner, "cfg", None)
    if isinstance(cfg, dict):  # the runner's copy of the agent config (W&B's store_config uploads it in learn)
        for k, v in agent.items():
            if k in cfg:
                cfg[k] = v
    return target


def _cold_values(resume: dict, argv: list[str]) -> dict:
    """The agent config's top-level values a cold start of ``argv`` would have set (Isaac Lab's
    ``update_rsl_rl_cfg``: --seed, --checkpoint -> load_checkpoint, 2.x --resume / --load_run; --max_iterations)."""
    out: dict = {"max_iterations": resume["max_iterations"]}
    if resume["seed"] is not None:
        out["seed"] = resume["seed"]
    for flag, key in (("--checkpoint", "load_checkpoint"), ("--load_run", "load_run")):
        if flag in argv[:-1]:
            out[key] = argv[argv.index(flag) + 1]
    if "--resume" in argv:
        out["resume"] = True
    return out


def _env_cfg(runner):
    env = getattr(runner, "env", None)
    return getattr(getattr(env, "unwrapped", env), "cfg", None)


def _renew_manifest(run_dir: str) -> None:
    """Isaac Lab 3's ``run.json``: ``created_at`` is when the run began (``--checkpoint latest`` sorts by it): now."""
    path = os.path.join(run_dir, "run.json")
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return
    if not isinstance(manifest, dict) or "created_at" not in manifest:
        return
    from datetime import datetime, timezone

    manifest["created_at"] = datetime.now(timezone.utc).isoformat()
    tmp = os.path.join(run_dir, f".run.json.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:  # upstream's own format (write_run_manifest)
        f.write(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def _yaml_scalar(value) -> str:
    try:
        import yaml

        text = yaml.safe_dump({"k": value}, default_flow_style=False, width=float("inf"))
        if text.startswith("k: ") and text.count("\n") == 1:
            return text[3:-1]
    except Exception:
        pass
    return json.dumps(value)  # a JSON scalar is a YAML scalar


def _rewrite_top_level(path: str, values: dict) -> None:
    """Set top-level scalar keys of a params YAML file (``key: scalar`` lines at column 0), leaving every other
    line as the boot wrote it. Keys the file does not have at the top level are not added."""
    if not values:
        return
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except OSError:
        return
    changed = False
    for i, line in enumerate(lines):
        m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*): (\S.*)?$", line.rstrip("\n"))
        if m and m.group(1) in values and m.group(2) is not None:
            new = f"{m.group(1)}: {_yaml_scalar(values[m.group(1)])}\n"
            if new != line:
                lines[i], changed = new, True
    if changed:
        tmp = f"{path}.isaacd.{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(lines)
        os.replace(tmp, path)


def _reseed(runner, seed: int) -> None:
    """The attempt's seed: the env's own ``seed`` (Isaac Lab: ``configure_seed``: random, numpy, torch, CUDA, Warp)
    and its config; without one, Python's, NumPy's and torch's generators."""
    env = getattr(runner, "env", None)
    unwrapped = getattr(env, "unwrapped", env)
    seeder = getattr(unwrapped, "seed", None)
    if callable(seeder):
        seeder(seed)
    else:
        import random

        random.seed(seed)
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed(seed)
        import torch

        torch.manual_seed(seed)
    cfg = getattr(unwrapped, "cfg", None)
    if cfg is not None and hasattr(cfg, "seed"):
        try:
            cfg.seed = seed
        except Exception:
            pass


def _load_like_upstream(runner, path: str) -> None:
    """``runner.load`` as Isaac Lab's train script calls it for ``--checkpoint``: 3.x maps the checkpoint to the
    runner's device (``map_location=agent_cfg.device``); 2.x rsl_rl's ``load`` has no such parameter."""
    import inspect

    try:
        params = inspect.signature(runner.load).parameters
    except (TypeError, ValueError):
        params = {}
    if "map_location" in params:
        runner.load(path, map_location=getattr(runner, "device", None))
    else:
        runner.load(path)


def _cuda_fields(device: str) -> dict:
    if not device.startswith("cuda") or "torch" not in sys.modules:
        return {}
    torch = sys.modules["torch"]
    try:
        dev = torch.device(device)
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        return {"cuda_memory_bytes": _cuda_process_memory(index),
                "cuda_reserved_bytes": int(torch.cuda.memory_reserved(index))}
    except Exception:
        return {}


if __name__ == "__main__":
    main()
