#!/usr/bin/env python3
"""isaacd's launcher shim: run an unmodified train script, save a checkpoint when asked to stop. Stdlib only.

Usage (any Python, e.g. Isaac Lab's own ``python.sh``/``isaaclab.sh -p``; isaacd need not be installed)::

    <python> /abs/path/shim.py SCRIPT.py [args...]
    <python> /abs/path/shim.py -m MODULE [args...]

runs the script exactly like ``<python> SCRIPT.py args`` / ``<python> -m MODULE args`` in this same process
(``sys.argv[0]`` = the script, ``sys.path[0]`` = its directory (the working directory for ``-m``), run as
``__main__``; its exit status and ``SystemExit`` are its own), plus what follows. The names it shares with the
daemon (events, environment variables, snapshot files, the spare's go line) are defined once, in
``shim_protocol.py``. The shim is this file and its parts, one job each: ``shim_emit.py`` (writes the side
channel), ``shim_rsl_rl.py`` (what it reads off an rsl_rl runner), ``shim_snapshots.py``, ``shim_exit.py`` (the quick
exit after a stop's save), ``shim_hooks.py`` (save on stop, the runner and gymnasium hooks, running the target) and
``shim_spare.py`` (the warm spare). They must sit
beside this file (as they do in the package; containers get them all mounted, ``SHIM_FILES``): the shim loads them
from there by path, so no isaacd needs to be installed in the trainer's Python.

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
  (unless rsl_rl just saved exactly that) and ``stopped`` is reported (``exit_now``). Then, where the code after
  ``learn()`` was checked to only release memory (Isaac Lab 3.0.0's rsl_rl entry point and the built-in trainer,
  torch's TensorBoard writer, no video or dataset recording, no Kit, no torch.distributed: ``shim_exit.py``), the
  writer is closed, the ``atexit`` handlers run and the process exits 0 at once (``ISAACD_SHIM_FAST_EXIT=0``: never);
  otherwise ``stopped``'s ``cleanup`` says why, ``learn()`` returns normally, the script's own cleanup runs and
  the process exits 0. A second signal exits at once with status 128+signum,
  except the same signal again within 1 s: a wrapper such as ``uv run`` forwards the signal its process group
  already delivered, and that is still the first request. When this process is not its process group's leader (a
  wrapper started it) and the script's cleanup runs, ``learn()`` returns only once that forwarded copy has come or
  5 s have passed: the script's cleanup may set SIGINT to SIG_DFL (Isaac Lab 3.0's ``close_env``), where a copy
  still on its way would kill the process. The quick exit needs no such wait: until ``os._exit`` the shim's handler
  absorbs the copy, and a copy that comes later finds no process. With torch.distributed initialised
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

Evaluation (issue 41): with ``ISAACD_EVAL=1`` the shim evaluates the checkpoint ``ISAACD_EVAL_CHECKPOINT`` instead of
training (``shim_eval.py``, ``eval_core.py``: Isaac Lab's ``train`` becomes its ``play``, episodes are counted, a
result JSON is written); no save-on-stop handler is installed then.

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

import atexit
import importlib
import importlib.util
import os
import sys


def _load_beside(stem: str):
    """``<stem>.py`` beside this file: the shim <-> daemon contract (``shim_protocol``) or one of the shim's own
    parts. Imported as ``isaacd_trainer.<stem>`` when this file is ``isaacd_trainer.shim``; loaded by path as
    ``isaacd_<stem>`` when it runs as a script (``python /path/to/shim.py``, a container's
    ``/opt/isaacd/isaacd_shim.py``): the trainer's Python need not have isaacd installed, and the files beside the
    shim are the ones it was shipped with. The parts find the ones loaded before them under those names."""
    if __package__:
        return importlib.import_module("." + stem, __package__)
    name = "isaacd_" + stem
    if name in sys.modules:
        return sys.modules[name]
    here = __file__
    dirs = dict.fromkeys(os.path.dirname(p) for p in (os.path.abspath(here), os.path.realpath(here)))
    for d in dirs:  # beside the file as named (a mount, a link), then beside what a link points to
        path = os.path.join(d, stem + ".py")
        if os.path.isfile(path):
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module  # enum needs the module while it runs
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[name]
                raise
            return module
    raise ImportError(f"isaacd's launcher shim needs {stem}.py beside it (looked in {', '.join(dirs)}): "
                      "copy or mount it with the shim")


# in dependency order: each part uses only the ones before it
P = _load_beside("shim_protocol")
events = _load_beside("shim_emit")
_load_beside("shim_rsl_rl")
snapshots = _load_beside("shim_snapshots")
_load_beside("shim_exit")
hooks = _load_beside("shim_hooks")
spare = _load_beside("shim_spare")

ShimEvent = P.ShimEvent
emit = events.emit
install_import_hook, install_signal_handlers, run_target = (hooks.install_import_hook, hooks.install_signal_handlers,
                                                            hooks.run_target)
patch_runner_class, patch_runners_module, patch_gymnasium = (hooks.patch_runner_class, hooks.patch_runners_module,
                                                             hooks.patch_gymnasium)
RunnerImportHook = hooks.RunnerImportHook
spare_main = spare.spare_main
_Stop, _Progress = hooks._Stop, hooks._Progress  # the stop's state, for a host that calls install_signal_handlers

# ----------------------------------------------------------------------------------------------- main
USAGE = "usage: shim.py SCRIPT.py [args...] | shim.py -m MODULE [args...] | shim.py --isaacd-spare"


def _freeze_before_finalizing() -> None:
    """The last exit handler (registered first): every object alive now is left out of the interpreter's final
    garbage collections. A trained Isaac Lab process spent 7.8-8.8 s in them after its last handler
    (Py_FinalizeEx -> finalize_modules -> _PyGC_CollectNoFail over the whole heap; gdb, 3.0.0 on the CPU), and a
    paused sweep trial's GPU is free only when it exits: 0.8 s with this. What is freed by its reference count
    (a file closed, a buffer flushed) still is; only cyclic garbage is left to the kernel, which reclaims it."""
    import gc

    gc.freeze()


def main() -> None:
    atexit.register(_freeze_before_finalizing)  # first registered, last run
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
    evaluating = os.environ.get("ISAACD_EVAL", "").strip() == "1"
    if evaluating:
        # issue 41: evaluate a checkpoint (shim_eval.py): play instead of train, no save-on-stop (nothing to save)
        _load_beside("eval_core")
        argv = _load_beside("shim_eval").prepare(argv)
    install_import_hook()
    if not evaluating:
        install_signal_handlers()
    run_target(argv)


if __name__ == "__main__":
    main()
