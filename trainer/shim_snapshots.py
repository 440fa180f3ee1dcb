"""The launcher shim's per-iteration snapshots (``isaacd_snapshot_<N>.pt``; shim.py's docstring says when and how):
the copy on the training thread, the background writer, pruning. Stdlib only (torch is the trainer's, imported when
a snapshot is taken), loaded with the shim (shim.py)."""

from __future__ import annotations

import copy
import os
import sys
import threading
import time

if __package__:  # isaacd_trainer.shim_snapshots
    from . import shim_protocol as P, shim_emit as E, shim_rsl_rl as R
else:  # run by path: shim.py loaded these from beside it first (isaacd need not be installed)
    P, E, R = sys.modules["isaacd_shim_protocol"], sys.modules["isaacd_shim_emit"], sys.modules["isaacd_shim_rsl_rl"]

ShimEvent = P.ShimEvent
emit, _rank = E.emit, E.rank
_log_dir, _writer, _logs_disabled = R.log_dir, R.writer, R.logs_disabled
_MISSING = object()

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


class Snapshots:
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
        w = Snapshots.writer
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
            w = Snapshots.writer = _SnapshotWriter(torch.save)
        w.submit({"obj": obj, "path": os.path.join(log_dir, snapshot_name(n)), "iteration": n,
                  "copy_seconds": copy_seconds, "keep": self.keep})

    @classmethod
    def drain(cls) -> None:
        w = cls.writer
        if w is not None and w.busy and not w.wait_idle(cls.DRAIN_SECONDS):
            print(f"[isaacd-shim] snapshot writer still busy after {cls.DRAIN_SECONDS:.0f} s; not waiting longer",
                  file=sys.stderr, flush=True)
