"""The contract between isaacd's launcher shim (``shim.py``) and the supervisor: one definition, both sides import it.

What is here is everything a trainer process and the daemon must spell the same way:

* the shim's side-channel events (:class:`ShimEvent`: the ``event`` field of each JSON line);
* the environment variables the daemon sets for the shim and the trainer (``*_ENV``);
* the snapshot files the shim writes into a run dir (prefix, final name, the writer's temp name);
* the warm spare's command-line flag and the fields of its go line (``GO_*``);
* how a container sees the shim: the file names, so the shim finds this module beside itself.

Stdlib only, and written for any Python 3 the trainer may run (Isaac Sim's own 3.10, a container's): no
``enum.StrEnum`` (3.11), no match statements. The daemon imports it as ``isaacd_trainer.shim_protocol``
(importing ``isaacd_trainer`` pulls in no torch). The shim, run by path (``python /path/to/shim.py`` or a
container's ``/opt/isaacd/isaacd_shim.py``, where isaacd is not installed), loads it by path from its own
directory: wherever the shim goes, this file goes beside it (``SHIM_FILES``; the container runtimes mount both).
"""

from __future__ import annotations

import enum
import re

# ---------------------------------------------------------------------------------------------- side channel
class ShimEvent(str, enum.Enum):
    """The ``event`` of one side-channel line. A str: it compares equal to the parsed JSON's plain string and is
    written as its value (``json.dumps``, ``str``, f-strings), so the file format is the plain names."""

    SHIM_STARTED = "shim_started"  # script, argv
    CHECKPOINT_LOADED = "checkpoint_loaded"  # path, iteration
    ENV_CREATING = "env_creating"  # task: the process's first gymnasium.make began (Isaac Lab builds its scene)
    ENV_CREATED = "env_created"  # task, seconds: that make returned
    RUNNER_STARTED = "runner_started"  # run_dir, start_iteration, num_learning_iterations, runner_class, rsl_rl_version
    FIRST_ITERATION = "first_iteration"  # iteration
    CHECKPOINT_SAVED = "checkpoint_saved"  # path, iteration
    STOP_REQUESTED = "stop_requested"  # signal
    STOPPED = "stopped"  # iteration, checkpoint[, before_first_iteration][, exit_now[, cleanup]]
    LEARN_FINISHED = "learn_finished"  # iteration
    SNAPSHOT_SAVED = "snapshot_saved"  # path, iteration, copy_seconds, write_seconds, write_cpu_seconds, bytes
    SNAPSHOT_SKIPPED = "snapshot_skipped"  # iteration, reason, skipped
    SNAPSHOT_FAILED = "snapshot_failed"  # path, iteration, error
    SNAPSHOT_UNAVAILABLE = "snapshot_unavailable"  # reason
    SPARE_READY = "spare_ready"  # preload_seconds, rss_bytes, device, rsl_rl_version, cuda_*, preload_errors
    SPARE_GO = "spare_go"  # argv, cwd, waited_seconds
    SPARE_EXITED = "spare_exited"  # reason
    SPARE_FAILED = "spare_failed"  # error
    ALGORITHM_SET = "algorithm_set"  # values (set after a load), unknown (names the algorithm has no attribute of)

    def __str__(self) -> str:  # the value, on every Python (3.11 changed a mixed-in Enum's str/format)
        return self.value


# ---------------------------------------------------------------------------------------------- environment
SHIM_EVENTS_ENV = "ISAACD_SHIM_EVENTS"  # the side channel: an absolute path, one JSON line appended per event
SAVE_ON_STOP_ENV = "ISAACD_SHIM_SAVE_ON_STOP"  # "0" / "false" / "no" / "off": no signal handler, no save on stop
LAUNCH_TOKEN_ENV = "ISAACD_LAUNCH_TOKEN"  # the attempt's token: a new supervisor finds an unsaved trainer by it
SNAPSHOT_EVERY_ENV = "ISAACD_SNAPSHOT_EVERY"  # snapshot iterations N with N % EVERY == 0; 0: off
SNAPSHOT_MIN_SECONDS_ENV = "ISAACD_SNAPSHOT_MIN_SECONDS"  # at most one snapshot per that many seconds
SNAPSHOT_KEEP_ENV = "ISAACD_SNAPSHOT_KEEP"  # snapshots kept in the run dir
SNAPSHOT_BUDGET_ENV = "ISAACD_SNAPSHOT_BUDGET"  # the share of training time snapshots may cost; 0: no budget
# JSON {"checkpoint": "<folder>/<file>", "values": {name: value}}: set on rsl_rl's algorithm after the load() of that
# file (PBT, issue 40: an exploit resumes a copy of another member's checkpoint, whose optimizer carries that member's
# learning rate, with new values; shim_hooks._set_algorithm; daemon/launch/exploit.py sets it)
ALGORITHM_SET_ENV = "ISAACD_ALGORITHM_SET"
# the warm spare (``shim.py --isaacd-spare``): configured at spawn by these, all starting with SPARE_ENV_PREFIX
SPARE_ENV_PREFIX = "ISAACD_SPARE_"
SPARE_CONTROL_ENV = "ISAACD_SPARE_CONTROL"  # the FIFO the go line comes on (the daemon makes it)
SPARE_DEVICE_ENV = "ISAACD_SPARE_DEVICE"  # cpu (default), cuda, cuda:N
SPARE_PRELOAD_ENV = "ISAACD_SPARE_PRELOAD"  # comma-separated module names
SPARE_PLAIN_ENV = "ISAACD_SPARE_PLAIN"  # "1": at go, run the target as plain Python (skrl, rl_games: no shim)
# a booted spare (issue 21): it runs the job's fresh-start target up to the runner's learn() and parks there
BOOTED_ARGV_ENV = "ISAACD_SPARE_BOOT_ARGV"  # JSON list: SCRIPT.py args | -m MODULE args (the fresh-start form)
STAGING_ENV = "ISAACD_SPARE_STAGING"  # the daemon's staging dir of this spare; the boot runs in its work/
STAGING_WORK = "work"  # <staging>/work is the boot's cwd; its logs/ is a real directory, never the job's log_root
# a test seam (issue 28), never set by isaacd: a spare that reads its go line stops itself (SIGSTOP) "before_ack"
# (the line consumed, no spare_go) or "after_ack" (spare_go written, no first step): a spare that never answers,
# made by the real shim, so the supervisor's hand-over deadlines are tested on a real process
TEST_FREEZE_AT_GO_ENV = "ISAACD_SHIM_TEST_FREEZE_AT_GO"
# what a go line's env carries of the attempt's own environment (the spare was spawned with the spare's values)
GO_ATTEMPT_ENV = (SHIM_EVENTS_ENV, SNAPSHOT_EVERY_ENV, SNAPSHOT_MIN_SECONDS_ENV, SNAPSHOT_BUDGET_ENV, ALGORITHM_SET_ENV)

# ---------------------------------------------------------------------------------------------- warm spare
SPARE_FLAG = "--isaacd-spare"  # ``shim.py --isaacd-spare``: start up state-free, wait for one go line
# the go line: one JSON object, then "\n", written to the spare's FIFO
GO_ARGV = "argv"  # ["SCRIPT.py" | "-m", "MODULE", args...] (required)
GO_ENV = "env"  # {str: str}, applied with os.environ.update
GO_CWD = "cwd"  # the trainer's working directory
GO_LOG = "log"  # stdout and stderr reopened onto this file, appending
GO_PLAIN = "plain"  # true: run the target as plain Python would (no rsl_rl hook, Python's own signal handling)
GO_RESUME = "resume"  # booted spares only: {checkpoint, max_iterations, seed} of the attempt it takes over

# ---------------------------------------------------------------------------------------------- snapshots
SNAPSHOT_PREFIX = "isaacd_snapshot_"  # <run_dir>/isaacd_snapshot_<N>.pt; Isaac Lab's model_.*.pt never matches it
SNAPSHOT_RE = re.compile(r"^" + re.escape(SNAPSHOT_PREFIX) + r"(\d+)\.pt$")
# the shim's writer: `.isaacd_snapshot_<N>.pt.tmp.<pid>` (never ends in .pt), renamed onto the final name once
# fsynced; a trainer killed mid-write leaves one behind for the daemon to sweep
SNAPSHOT_TEMP_RE = re.compile(r"^\." + re.escape(SNAPSHOT_PREFIX) + r"\d+\.pt\.tmp\.\d+$")


def snapshot_name(iteration: int) -> str:
    return f"{SNAPSHOT_PREFIX}{iteration}.pt"


def snapshot_temp_name(final_name: str, pid: int) -> str:
    """The writer's temp file for ``final_name`` (a base name), in the same directory."""
    return f".{final_name}.tmp.{pid}"


# ---------------------------------------------------------------------------------------------- files
SHIM_FILE = "shim.py"
PROTOCOL_FILE = "shim_protocol.py"  # this file: the shim loads it from its own directory when run by path
SHIM_IN_CONTAINER = "/opt/isaacd/isaacd_shim.py"
PROTOCOL_IN_CONTAINER = "/opt/isaacd/" + PROTOCOL_FILE  # beside the shim, under the same name as here
# the shim's own parts, which it loads by path from beside itself as it loads this file (shim.py: _load_beside)
SHIM_PART_FILES = ("shim_emit.py", "shim_rsl_rl.py", "shim_snapshots.py", "shim_exit.py", "shim_hooks.py",
                   "shim_spare.py", "eval_core.py", "shim_eval.py")  # the last two: eval mode only (issue 41)
# (file in the isaacd_trainer package, path in a container): every file the shim needs to run by path
SHIM_FILES = ((SHIM_FILE, SHIM_IN_CONTAINER), (PROTOCOL_FILE, PROTOCOL_IN_CONTAINER)) + tuple(
    (name, "/opt/isaacd/" + name) for name in SHIM_PART_FILES)
