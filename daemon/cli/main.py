"""isaacd: keeps Isaac Lab training alive and visible.

`isaacd run` is the supervisor; every other command is a client of a running supervisor (through its
control socket) or reads the config.
"""

# Client commands must start fast (`isaacd status` in a watch loop): this module imports only the stdlib
# and isaacd's light modules at the top; pydantic (config), structlog and the supervisor are imported by
# the commands that need them.

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from .. import __version__
from ..control import NotRunning, request
from ..config.locate import (EMBEDDED_DEFAULT_NAME, Ambiguous, Found, config_path, denied, find_socket,
                             not_running_hint)
from ..status.types import JobStatus, Status
from ..wording import no_such_job
from .eval_cli import COMMANDS as EVAL_COMMANDS, eval_arguments
from .sweep_cli import COMMANDS as SWEEP_COMMANDS, sweep_arguments


class CliError(Exception):
    """A message for the user and an exit code; main() prints it without a traceback."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


def _load(arg: str | None) -> tuple[Any, str | None]:
    """The full, validated config (imports pydantic: only for commands that need more than the socket)."""
    from ..config.schema import ConfigError, load_config, load_embedded_default

    path = config_path(arg)
    try:
        if path is None:
            return load_embedded_default(Path.cwd()), None
        return load_config(path), path
    except ConfigError as exc:
        raise CliError(str(exc), 2) from None


def _load_found(args: argparse.Namespace) -> tuple[Any, str | None]:
    """check-config's and doctor's config with no file named: the one the supervisor this command finds runs
    (cli/config_target.py, issue 39), so `--socket S` checks S's config, not $ISAACD_CONFIG's or ./var's."""
    from ..config.schema import ConfigError
    from .config_target import load_target, target_config

    client = Client(args)
    try:
        return load_target(target_config(client.found, client))
    except LookupError as exc:
        raise CliError(f"isaacd: {exc}", 2) from None
    except ConfigError as exc:
        raise CliError(str(exc), 2) from None


class Client:
    """Requests to the supervisor this invocation means (see locate.find_socket)."""

    def __init__(self, args: argparse.Namespace):
        try:
            self.found: Found = find_socket(args.socket, args.config)
        except Ambiguous as exc:
            raise CliError(f"isaacd: {exc}", 3) from None

    def __call__(self, req: dict[str, Any]) -> Any:
        try:
            return request(self.found.socket, req)
        except NotRunning as exc:
            hint = not_running_hint(self.found)
            raise CliError(f"isaacd: {hint or exc}", 3) from None
        except RuntimeError as exc:
            raise CliError(f"isaacd: {exc}", 1) from None


# ---- commands -------------------------------------------------------------------------------
def cmd_run(args: argparse.Namespace) -> int:
    from ..foreground import run_supervisor

    cfg, path = _load(args.config)
    return run_supervisor(cfg, path)


def cmd_check_config(args: argparse.Namespace) -> int:
    if args.file and args.config and Path(args.file).resolve() != Path(args.config).resolve():
        raise CliError(f"isaacd check-config: two files given ({args.file} and --config {args.config}); "
                       "give one: `isaacd check-config FILE`", 2)
    file = args.file or args.config
    cfg, path = _load(file) if file else _load_found(args)
    from ..config.schema import ConfigError
    from ..workflows import config_issues  # what only the filesystem can tell: train script, Isaac Lab generation

    issues = config_issues(cfg)
    if issues:
        raise CliError(str(ConfigError(str(path or EMBEDDED_DEFAULT_NAME), issues)), 2)
    print(f"{path or EMBEDDED_DEFAULT_NAME}: OK, {len(cfg.jobs)} job(s): {', '.join(j.name for j in cfg.jobs) or '-'}")
    from ..workflows import resolve

    for j in cfg.jobs:  # the contract each job's trainer speaks: its Isaac Lab version and where it was read
        print(f"  {j.name}: {resolve(j).workflow.contract}")  # (the launcher's probe is cached: no second run)
    return 0


def _job_or_fail(st: Status, name: str) -> JobStatus:
    job = st.job(name)
    if job is None:
        raise CliError(f"isaacd: {no_such_job(name, [j.name for j in st.jobs])}", 1)
    return job


def cmd_status(args: argparse.Namespace) -> int:
    client = Client(args)
    if not args.watch:
        print(_status_text(client, args))
        return 0
    while True:  # until Ctrl-C, which main() turns into exit 130 without a traceback (a closed pipe: 141)
        text = _status_text(client, args)
        if sys.stdout.isatty():
            sys.stdout.write("\x1b[H\x1b[2J")  # cursor home, clear: each redraw replaces the last
        print(f"every {args.interval:g} s, {time.strftime('%H:%M:%S')}; Ctrl-C to stop\n{text}", flush=True)
        time.sleep(args.interval)


def _status_text(client: Client, args: argparse.Namespace) -> str:
    from .json_out import one_element_per_line
    from .render import format_status

    raw = client({"cmd": "status"})
    if args.json and not args.job:  # as it came, not read into a Status first (1,000 jobs: issue 39's scale goal)
        return one_element_per_line(raw)
    st = Status.from_json(raw)
    if args.job:
        st = replace(st, jobs=(_job_or_fail(st, args.job),))
        raw["jobs"] = [j for j in raw["jobs"] if j.get("name") == args.job]
    if args.json:  # the supervisor's JSON as it came: scripts may read fields this client does not know
        return one_element_per_line(raw)
    # The restart and resume stories come from the event journal: only for jobs that restarted.
    events = {j.name: client({"cmd": "events", "job": j.name, "limit": 50}) for j in st.jobs if j.restarts}
    return format_status(st, events=events)


FOLLOW_POLL = 1.0  # seconds between reads of the journal for `events -f`
FOLLOW_WINDOW = 500  # events read at each poll; more arriving within one poll leaves a gap, said so


def cmd_events(args: argparse.Namespace) -> int:
    from .render import format_events
    from .render_ended import events_note

    client = Client(args)
    req = {"cmd": "events", "job": args.job, "limit": args.limit}
    events = client({**req, "ended": args.ended} if args.ended is not None else req)
    ended = events_note(args.job, events)  # a cancelled or removed job's: said first, and nothing more comes
    if ended is not None and not args.json:
        print(ended)
    if not args.follow or ended is not None:
        print(json.dumps(events, indent=1) if args.json else format_events(events))
        return 0

    def show(new: list[dict[str, Any]]) -> None:  # -f --json: one event a line, as it comes
        if new:
            print("\n".join(json.dumps(e) for e in new) if args.json else format_events(new), flush=True)

    show(events)
    seen = [e for e in events if e.get("event") != "journal_damaged"]  # that one is re-made at every read
    last = seen[-1] if seen else None
    while True:  # until Ctrl-C (exit 130, no traceback)
        time.sleep(FOLLOW_POLL)
        recent = [e for e in client({"cmd": "events", "job": args.job, "limit": FOLLOW_WINDOW})
                  if e.get("event") != "journal_damaged"]
        at = max((i for i, e in enumerate(recent) if e == last), default=None) if last is not None else -1
        if at is None:
            print(f"(more than {FOLLOW_WINDOW} events within {FOLLOW_POLL:g} s; earlier ones: `isaacd events "
                  f"{args.job}`)", flush=True)
            at = -1
        show(recent[at + 1:])
        last = recent[-1] if recent else last
        if last is not None and last.get("event") == "ended":  # cancelled or removed while followed: no more comes
            return 0


def cmd_history(args: argparse.Namespace) -> int:
    from .render_ended import format_ended

    rows = Client(args)({"cmd": "history", "job": args.job})
    print(json.dumps(rows, indent=2) if args.json else format_ended(rows))
    return 0


def cmd_job(args: argparse.Namespace) -> int:
    client = Client(args)
    if args.command in ("start", "restart"):  # a restart of a completed job is a start (jobs/machine.py)
        from .render import iterations_done

        job = _job_or_fail(Status.from_json(client({"cmd": "status"})), args.job)
        done = iterations_done(job)
        if job.state == "completed" and (done is None or job.max_iterations is None or done >= job.max_iterations):
            # Starting it would launch a trainer asked for 0 more iterations and leave an empty run dir.
            print(f"{args.job} is complete ({done}/{job.max_iterations} iterations); nothing to {args.command}. "
                  f"To train it further, raise its max_iterations in the config, then `isaacd reload` "
                  f"and `isaacd start {args.job}`. To train it from scratch, `isaacd reset {args.job}` (its old "
                  f"runs are kept, moved aside); isaacd never deletes checkpoints.")
            return 0
    print(f"{args.job}: {client({'cmd': args.command, 'job': args.job})}")
    return 0


def cmd_backup(args: argparse.Namespace) -> int:
    print(f"{args.job}: {Client(args)({'cmd': 'backup-' + args.action, 'job': args.job})}")
    return 0


def cmd_reload(args: argparse.Namespace) -> int:
    client = Client(args)
    st = Status.from_json(client({"cmd": "status"}))
    if st.supervisor.config_path == EMBEDDED_DEFAULT_NAME:
        # Not a rejection: there is no file to re-read.
        print("nothing to reload: this supervisor runs the embedded default config (no file). To change jobs, "
              "write a config (see etc/isaacd.toml) and restart it with `isaacd run --config FILE`.")
        return 0
    res = client({"cmd": "reload"})
    if not res.get("ok"):
        raise CliError(f"reload rejected, previous config still in force:\n{res['error']}", 2)
    from .render_reload import format_reload

    print(format_reload(st.supervisor.config_path, res))
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    from ..history.log_source import LogSource
    from .job_logs import show_logs

    client = Client(args)  # the supervisor every command finds (config/locate.py), not a config read here
    try:
        req = {"cmd": "log-source", "job": args.job}
        answer = client({**req, "ended": args.ended} if args.ended is not None else req)
        if isinstance(answer, dict) and isinstance(answer.get("ended"), dict):  # said first, beside the output
            from .render_ended import ended_note

            print(ended_note(args.job, answer["ended"]), file=sys.stderr)
    except CliError as exc:
        if exc.code != 3:  # refused, or no such job: the supervisor's word
            raise
        source = _offline_log_source(args, client.found, exc)  # none answers: its config's files, read only
    else:
        try:
            source = LogSource.from_json(answer)
        except ValueError as bad:
            raise CliError(f"isaacd: {bad} (is it an older isaacd? `isaacd status` shows its version)") from None
    ask = client if args.ended is None else (lambda req: client({**req, "ended": args.ended}))  # the same ended job
    return show_logs(source, follow=args.follow, lines=args.lines, attempt=args.attempt, ask=ask)


def _offline_log_source(args: argparse.Namespace, found: Found, not_running: CliError) -> Any:
    """`isaacd logs` while no supervisor answers: the job's files in the state dir of the config it would use
    (--config, $ISAACD_CONFIG, /etc/isaacd/isaacd.toml, or the embedded default's ./var/state where one ran in this
    directory), read without creating anything. With --socket, a registered supervisor, a socket that is there but
    not ours to connect to (a supervisor runs: its answer, not a config read here, is the truth), or nothing to read
    here: why none answers."""
    from ..history.log_source import read_log_source

    here = Path.cwd() / "var" / "state" / "jobs"
    if args.socket or found.entry is not None or found.unread is not None or denied(found.socket) \
            or (config_path(args.config) is None and not here.is_dir()):
        raise not_running
    cfg, _ = _load(args.config)
    job = cfg.job(args.job)
    if job is None or args.ended is not None:  # a cancelled or removed job's archive (history/ended.py)
        from ..history.ended import ended_log_source, find_ended
        from .render_ended import ended_note

        ended = find_ended(cfg.supervisor.state_dir, args.job, args.ended or 1)
        if ended is not None:
            print(ended_note(args.job, ended.to_json()), file=sys.stderr)
            return ended_log_source(ended)
    if args.ended is not None:
        raise CliError(f"isaacd: {args.job} has no ended job number {args.ended} of that name in "
                       f"{cfg.supervisor.state_dir} (`isaacd history {args.job}` lists them)", 1)
    if job is None:
        raise CliError(f"isaacd: {no_such_job(args.job, [j.name for j in cfg.jobs])}", 1)
    try:
        return read_log_source(cfg.supervisor.state_dir, job.name, job.runtime)
    except PermissionError as exc:
        raise CliError(f"{not_running} ({exc.filename} is not yours to read)", 3) from None


def cmd_doctor(args: argparse.Namespace) -> int:
    from .doctor import run_doctor

    cfg, _ = _load(args.config) if args.config else _load_found(args)
    return run_doctor(cfg, as_json=args.json)


def cmd_nodes(args: argparse.Namespace) -> int:
    from .render import format_nodes

    res = Client(args)({"cmd": "nodes"})
    print(json.dumps(res, indent=2, default=str) if args.json else format_nodes(res))
    return 0


def cmd_cordon(args: argparse.Namespace) -> int:
    req: dict[str, Any] = {"cmd": args.command, "node": args.node}
    if args.command == "cordon" and args.reason:
        req["reason"] = args.reason
    print(Client(args)(req))
    return 0


def cmd_agent(args: argparse.Namespace) -> int:
    from ..agent import run_agent

    cfg, _ = _load(args.config)
    return run_agent(cfg, node=args.node, listen=args.listen, health_file=args.health_file)


def cmd_install_units(args: argparse.Namespace) -> int:
    from ..service.units import install_units

    return install_units(args)


# ---- parser ---------------------------------------------------------------------------------
def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {n}")
    return n


def _seconds(text: str) -> float:
    try:
        s = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not s >= 0.1:  # also NaN
        raise argparse.ArgumentTypeError(f"must be 0.1 s or more, got {text}")
    return s


_JOB_HELP = "the job's name, as in the config and `isaacd status`"

_COMMANDS: list[tuple[str, str, str]] = [
    ("run", "run the supervisor in the foreground",
     "Supervise the config's jobs in the foreground: launch them, resume them from their newest complete "
     "checkpoint when they die, run the watchdogs, serve the control socket and /metrics. Ctrl-C or SIGTERM "
     "asks the trainers to save and stop, then exits 0."),
    ("check-config", "validate a config file and explain every problem",
     "Validate a config file and print every problem with its key path and what is allowed. The file is FILE, "
     "or --config FILE (the same thing; if both are given they must name one file), else the config of the supervisor "
     "this command finds as every command finds it (--socket PATH: the one that supervisor runs; $ISAACD_CONFIG; "
     "/etc/isaacd/isaacd.toml; the one supervisor your user runs), else the embedded default."),
    ("status", "jobs, GPUs, checkpoints and watchdogs at a glance",
     "One line per job (state, iterations done, reward, newest checkpoint, restarts, uptime), then why jobs "
     "stopped or restarted, watchdog states and the GPUs."),
    ("events", "what happened to a job and why",
     "The job's event journal, oldest first: launches (and the checkpoint resumed from), exits, restarts, "
     "watchdog trips, config changes, each with its reason."),
    ("stop", "stop a job gracefully (SIGINT, grace, SIGKILL)",
     "Ask the job's trainer to save and exit (SIGINT), SIGKILL after its stop_timeout. The job stays stopped, "
     "also across supervisor restarts, until `isaacd start`."),
    ("start", "start a stopped job",
     "Start a stopped or failed job; it resumes from its newest complete checkpoint. A start while the job is "
     "stopping is remembered: the trainer stops, then the job starts. A completed job is not started again: raise "
     "its max_iterations first."),
    ("restart", "stop and resume a job from its newest complete checkpoint",
     "Stop the job's trainer gracefully and launch it again at once, resuming from its newest complete "
     "checkpoint. Applies config changes made since it started. On a completed job it does what start does "
     "(no restart is counted)."),
    ("reset", "train a job from scratch again, keeping its old runs",
     "Train a stopped, completed or failed job from scratch: it starts at once from no checkpoint, and its old run "
     "dirs are moved, whole, into a dated folder beside its experiment dir (`<experiment>.reset-<time>/`; "
     "`isaacd events JOB` names it). Nothing is deleted. A job with a trainer is refused (exit 1): "
     "`isaacd stop JOB` first. So is a job with a [jobs.backup] target, whose checkpoints it would resume from."),
    ("backup", "a job's backup target: `isaacd backup takeover JOB`",
     "takeover JOB: this supervisor takes the job's bucket prefix over from another host now (its lease, "
     "docs/backup.md), without waiting for that lease to expire: for a host that is gone for good. The other "
     "supervisor, if it still runs, stops uploading at its next renewal. An event on both."),
    ("reload", "re-read the config (same as SIGHUP); a bad file changes nothing",
     "Re-read the config file the supervisor was started with. A broken file changes nothing (exit 2); a valid "
     "change applies to each job at its next start, and running trainers are never killed by a reload. It names "
     "every key that changed, in every section, and whether it is in force now or needs a supervisor restart."),
    ("submit", "add a job from a job file to the host's queue",
     "Validate FILE (one [[jobs]] table, as in the host config) and add it: written into [supervisor] jobs_dir "
     "and applied as a reload applies a change, so it survives a supervisor restart. A job asking for GPUs "
     "(gpus = N, gpu_memory) waits in the queue until they are free; the answer says whether it was placed at "
     "once (on which GPUs) or its place and why it waits. A bad file, or a request larger than this host, is "
     "refused naming the key and the fix (exit 1); nothing running is touched. The job is yours: its file in "
     "jobs_dir is yours, and only you "
     "and an admin may stop or cancel it (docs/security.md). docs/queue.md"),
    ("cancel", "stop a submitted job with a save and remove it",
     "The submitted job saves at its next iteration boundary, stops and leaves the queue; its history and logs "
     "are kept, its file moved into jobs_dir/.cancelled/. Jobs of the host config are refused: `isaacd stop`."),
    ("queue", "the host's queue: who waits for which GPUs, in order, and why",
     "Jobs that ask for GPUs (gpus = N, gpu_memory): the waiting ones in the order they will start (priority, then "
     "submission), each with what it asks for, how long it has waited and why it waits; then the placed ones with "
     "their GPUs."),
    *SWEEP_COMMANDS,
    *EVAL_COMMANDS,
    ("history", "jobs that ended: cancelled, or removed from the config",
     "Every ended job (or those named JOB), newest first: its owner, when it was submitted and when it ended, how "
     "(cancelled by whom, or removed from the config), its last state and reason, and where its history, logs and "
     "run dirs are kept. `isaacd events JOB` and `isaacd logs JOB` read an ended job's (--ended N: an older one of "
     "that name). docs/history.md"),
    ("logs", "a job's trainer output",
     "The job's trainer output: the process runtime's log file, `podman logs` or the unit's journal, where the "
     "supervisor this command finds (as every command finds it, from any directory) says it is. A user "
     "who cannot read root's state dir gets the output of their own jobs through the supervisor."),
    ("doctor", "check this host for what isaacd and Isaac Lab need",
     "Check the driver, NVML, CDI spec, Podman/Quadlet, shared memory, disk space and listeners for the "
     "config's jobs (--config FILE, else the config of the supervisor the command finds, as check-config); exit 1 if "
     "a check fails."),
    ("nodes", "the Ray cluster's nodes: resources, jobs, cordons",
     "For runtime = \"ray\": every node of the cluster with its free GPUs/CPUs, the jobs placed on it, whether "
     "isaacd avoids it (cordoned: lost, GPU reset, log_root not shared, or by an operator) and jobs waiting for room."),
    ("cordon", "stop placing jobs on a Ray node",
     "No new attempt is placed on NODE until `isaacd uncordon NODE`; trainers running there keep running."),
    ("uncordon", "place jobs on a Ray node again",
     "Clear a cordon: a node isaacd avoided (node lost, GPU reset-class XID, log_root not shared, operator) "
     "takes jobs again."),
    ("agent", "GPU sampler and /metrics on a Ray node (no jobs)",
     "Run on every Ray node: samples its GPUs (NVML), serves /metrics, and on a reset-class XID marks the GPU "
     "unhealthy in [ray] health_file, which the job's actor on this node reads: the job moves to another node "
     "and this one is cordoned."),
    ("install-units", "install the systemd unit and an example config",
     "Install the supervisor's systemd unit and, when missing, an example /etc/isaacd/isaacd.toml."),
]


def _add_arguments(name: str, s: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    if name == "run":
        return cmd_run
    if name == "check-config":
        s.add_argument("file", nargs="?", metavar="FILE", help="the config file to check (or --config FILE)")
        return cmd_check_config
    if name == "status":
        s.add_argument("job", nargs="?", help="show only this job")
        s.add_argument("--json", action="store_true", help="the full status as JSON, for scripts")
        s.add_argument("-w", "--watch", action="store_true", help="redraw it every --interval seconds until Ctrl-C")
        s.add_argument("--interval", type=_seconds, default=2.0, metavar="SECONDS",
                       help="with --watch: seconds between redraws (default 2)")
        return cmd_status
    if name == "events":
        s.add_argument("job", help=_JOB_HELP)
        s.add_argument("--limit", type=_positive, default=None, metavar="N", help="only the newest N events")
        s.add_argument("--json", action="store_true", help="the events as JSON, for scripts (with -f: one a line)")
        s.add_argument("-f", "--follow", action="store_true", help="keep printing new events until Ctrl-C")
        _ended_option(s)
        return cmd_events
    if name == "history":
        s.add_argument("job", nargs="?", help="only the ended jobs of this name")
        s.add_argument("--json", action="store_true", help="the ended jobs as JSON, for scripts")
        return cmd_history
    if name in ("stop", "start", "restart", "reset"):
        s.add_argument("job", help=_JOB_HELP)
        return cmd_job
    if name == "reload":
        return cmd_reload
    if name in ("submit", "cancel", "queue"):
        return _queue_command(name, s)
    if name in ("sweep", "sweeps"):
        return sweep_arguments(name, s, Client, CliError)
    if name in ("evals", "best"):
        return eval_arguments(name, s, Client, CliError)
    if name == "backup":
        s.add_argument("action", choices=["takeover"], help="takeover: take the job's bucket prefix over now")
        s.add_argument("job", help=_JOB_HELP)
        return cmd_backup
    if name == "logs":
        s.add_argument("job", help=_JOB_HELP)
        s.add_argument("-f", "--follow", action="store_true", help="keep printing new output until Ctrl-C")
        s.add_argument("-n", "--lines", type=_positive, default=50, metavar="N",
                       help="how many lines of earlier output to print first (default 50)")
        s.add_argument("--attempt", type=_positive, default=None, metavar="N",
                       help="attempt N's output instead (`isaacd events JOB` numbers each start)")
        _ended_option(s)
        return cmd_logs
    if name == "doctor":
        s.add_argument("--json", action="store_true", help="the checks as JSON, for scripts")
        return cmd_doctor
    if name == "nodes":
        s.add_argument("--json", action="store_true", help="the nodes as JSON, for scripts")
        return cmd_nodes
    if name in ("cordon", "uncordon"):
        s.add_argument("node", help="the node's name, as `isaacd nodes` shows it")
        if name == "cordon":
            s.add_argument("--reason", default=None, help="why (shown by `isaacd nodes`)")
        return cmd_cordon
    if name == "agent":
        s.add_argument("--node", default=None, help="this node's name in metrics (default: the hostname)")
        s.add_argument("--listen", default=None, metavar="HOST:PORT",
                       help="where /metrics is served (default: [metrics] listen)")
        s.add_argument("--health-file", default=None, metavar="PATH",
                       help="where unhealthy GPUs are written (default: [ray] health_file)")
        return cmd_agent
    s.add_argument("--agent", action="store_true",
                   help="install isaacd-agent.service (a Ray node: GPU metrics and XID health, no jobs) instead")
    s.add_argument("--prefix", default="/", help="root to install into (for packaging)")
    s.add_argument("--bin", default=None, help="path of the isaacd executable for ExecStart")
    return cmd_install_units


def _ended_option(s: argparse.ArgumentParser) -> None:
    s.add_argument("--ended", type=_positive, nargs="?", const=1, default=None, metavar="N",
                   help="the job of this name that ended (cancelled or removed), not the live one; N: the Nth newest "
                        "(`isaacd history JOB` lists them). A name no live job has reads its newest ended one anyway")


def _queue_command(name: str, s: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    from . import queue_cli

    if name == "submit":
        s.add_argument("file", metavar="FILE", help="a job file: one [[jobs]] table")
    elif name == "cancel":
        s.add_argument("job", help="a submitted job's name")
    else:
        s.add_argument("--json", action="store_true", help="the queue as JSON, for scripts")
    run = {"submit": queue_cli.cmd_submit, "cancel": queue_cli.cmd_cancel, "queue": queue_cli.cmd_queue}[name]

    def command(args: argparse.Namespace) -> int:
        try:
            return run(Client(args), args)
        except queue_cli.SubmitFileError as exc:
            raise CliError(str(exc), 2) from None
    return command


def build_parser() -> argparse.ArgumentParser:
    # --config/--socket work before or after the subcommand (`isaacd run --config F`, `isaacd -c F status`)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", "-c", default=argparse.SUPPRESS, metavar="FILE",
                        help="host config (default: $ISAACD_CONFIG, /etc/isaacd/isaacd.toml, "
                             "else the embedded default with state under ./var)")
    common.add_argument("--socket", default=argparse.SUPPRESS, metavar="PATH",
                        help="control socket of the supervisor to talk to (default: from the config; with no "
                             "config, ./var/isaacd.sock or this user's running supervisor)")
    p = argparse.ArgumentParser(prog="isaacd", description=__doc__, parents=[common],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="`isaacd COMMAND --help` describes a command.")
    p.add_argument("--version", action="version", version=f"isaacd {__version__}")
    sub = p.add_subparsers(dest="command", title="commands", metavar="COMMAND")
    for name, short, long in _COMMANDS:
        s = sub.add_parser(name, help=short, description=long, parents=[common])
        s.set_defaults(func=_add_arguments(name, s))
    return p


def _silence_stdout() -> None:
    """After a closed pipe: point stdout at /dev/null so the interpreter's final flush cannot complain."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # bare `isaacd`: the command list, not a usage error
        parser.print_help()
        return 0
    args.config = getattr(args, "config", None)
    args.socket = getattr(args, "socket", None)
    try:
        return int(args.func(args) or 0)
    except CliError as exc:
        print(str(exc), file=sys.stderr)
        return exc.code
    except RuntimeError as exc:  # a refusal from a module the command calls (units, doctor): its text says why
        print(f"isaacd: {exc}", file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    if "run" in words:  # `isaacd run`: a SIGHUP while starting up is a reload request, not death
        from ..service.early_signals import defer

        defer()
    try:
        try:
            return _main(argv)
        finally:
            # Flush here, not at interpreter exit: a reader that is gone must be seen while we can still
            # handle it (a late flush prints "Exception ignored ... BrokenPipeError" and exits 120).
            sys.stdout.flush()
    except KeyboardInterrupt:
        _silence_stdout()
        return 130  # the shell's code for "ended by Ctrl-C" (128 + SIGINT), and no traceback
    except BrokenPipeError:
        # `isaacd status | head -3`: the reader is gone; end quietly like a tool killed by SIGPIPE
        _silence_stdout()
        return 141
