"""The launcher shim's warm spare, ``shim.py --isaacd-spare`` (shim.py's docstring has the whole contract): the plain
spare (state-free start-up, then one go line on the control FIFO) and the booted spare (the job's train script run
to its first ``learn()`` in the daemon's staging dir, then turned into the attempt at the go). Stdlib only, loaded
with the shim (shim.py)."""

from __future__ import annotations

import importlib
import json
import os
import re
import select
import signal
import sys
import time

if __package__:  # isaacd_trainer.shim_spare
    from . import shim_emit as E, shim_hooks as H, shim_protocol as P, shim_rsl_rl as R
else:  # run by path: shim.py loaded these from beside it first (isaacd need not be installed)
    E, H, P, R = (sys.modules["isaacd_shim_emit"], sys.modules["isaacd_shim_hooks"],
                  sys.modules["isaacd_shim_protocol"], sys.modules["isaacd_shim_rsl_rl"])

ShimEvent = P.ShimEvent
emit, Events = E.emit, E.Events
_log_dir, _rsl_rl_version = R.log_dir, R.rsl_rl_version
run_target, install_import_hook, install_signal_handlers = (H.run_target, H.install_import_hook,
                                                            H.install_signal_handlers)


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
        Events.reopen()  # no events file any more: the target's shim_started goes nowhere
        run_target(argv)
        return
    install_signal_handlers()
    run_target(argv)


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
    H.BeforeLearn.park = _park_booted  # the hooks' learn() parks there, once
    _Booted.staging = os.path.abspath(staging)
    os.chdir(os.path.join(_Booted.staging, P.STAGING_WORK))  # what the boot writes (logs/...) stays in staging
    run_target(argv)
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
    Events.reopen()
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
