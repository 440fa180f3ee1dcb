"""`isaacd sweep submit|status|cancel|best` and `isaacd sweeps` (issue 39): the client side of sweeps. Each asks the
supervisor the command finds as every command does (--socket, --config: config/locate.py, through main.py's Client),
over the control socket's sweep requests; what it prints is cli/render_sweep.py's.

Registered by main.py: `COMMANDS` joins its command list and `sweep_arguments` builds each one's arguments. Nothing
here imports main.py (it hands over its Client and CliError), so there is no import cycle, and only the stdlib and
the light status types load at start: `submit` alone imports the sweep file's parser (pydantic)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable

from ..status.sweeps import SweepStatus

Ask = Callable[[dict[str, Any]], Any]  # one request to the supervisor, its `result` back (main.Client)

COMMANDS = [
    ("sweep", "a hyperparameter sweep: `isaacd sweep submit FILE`, status, cancel, best",
     "A sweep runs many trials of one task with different hyperparameters, each an ordinary job on the host's queue "
     "(<sweep>-t001, ...), and with ASHA pauses the ones that rank low at a rung (a stop with a save) and promotes "
     "them later, resuming exactly. submit FILE: check the sweep file here, then hand it to the supervisor. status "
     "NAME: the sweep and every trial, the best first. cancel NAME: every trial stops with a save; the sweep ends. "
     "best NAME: the best trial as a ready job file on stdout (`isaacd sweep best NAME > best.toml`). docs/sweeps.md"),
    ("sweeps", "every sweep, one line each",
     "Every sweep this supervisor knows: its owner, state, trials by state, its best trial and objective, and the "
     "GPU time its trials have used."),
]

_ACTIONS = {
    "submit": ("check a sweep file and start the sweep",
               "Validate FILE here (each mistake one line naming the file, the key and the fix; exit 2, nothing "
               "sent), then hand it to the supervisor, which writes its trials as jobs on the host's queue: at most "
               "`concurrency` at once. The sweep and its trials are yours."),
    "status": ("the sweep and its trials, the best first",
               "The sweep's objective, scheduler and rungs, its trials by state, its best trial and the GPU time so "
               "far; then one row per trial, the best first: its hyperparameters, state, iteration, objective and the "
               "rung it reached (a paused trial waits at that rung)."),
    "cancel": ("stop every trial with a save and end the sweep",
               "Every running trial saves at its next iteration boundary and stops; none is launched or promoted "
               "again. The trials' histories, logs and checkpoints are kept."),
    "best": ("the best trial as a job file, on stdout",
             "The best trial's job (the base job with its hyperparameters set) as a [[jobs]] TOML table: "
             "`isaacd sweep best NAME > best.toml`, then `isaacd submit best.toml` to train it further."),
}


def sweep_arguments(name: str, s: argparse.ArgumentParser, client: Callable[[argparse.Namespace], Ask],
                    cli_error: Callable[[str, int], Exception]) -> Callable[[argparse.Namespace], int]:
    """`name`'s arguments on `s` (a command of main's parser), and the function that runs it. `client(args)` is the
    supervisor the invocation means; `cli_error(message, code)` an error main() prints without a traceback."""
    if name == "sweeps":
        s.add_argument("--json", action="store_true", help="the sweeps as JSON, for scripts")
        return lambda args: cmd_sweeps(client(args), args)
    actions = s.add_subparsers(dest="action", title="actions", metavar="ACTION", required=True,
                               help="submit, status, cancel or best")
    for action, (short, long) in _ACTIONS.items():
        a = actions.add_parser(action, help=short, description=long)
        _common(a)
        if action == "submit":
            a.add_argument("file", metavar="FILE", help="a sweep file ([sweep], [sweep.space], [job]; see "
                                                        "etc/sweep.example.toml)")
        else:
            a.add_argument("sweep", metavar="NAME", help="the sweep's name ([sweep] name, as `isaacd sweeps` shows)")
        if action == "status":
            a.add_argument("--json", action="store_true", help="the sweep's status as JSON, for scripts")

    def run(args: argparse.Namespace) -> int:
        if args.action == "submit":
            return cmd_submit(args, client, cli_error)
        return {"status": cmd_status, "cancel": cmd_cancel, "best": cmd_best}[args.action](client(args), args)
    return run


def _common(a: argparse.ArgumentParser) -> None:
    # `isaacd sweep status NAME --socket S`: the words after the action are this parser's, so it takes the options
    # every command takes (main.py's common parser; SUPPRESS keeps one given before the action)
    a.add_argument("--config", "-c", default=argparse.SUPPRESS, metavar="FILE",
                   help="host config, to find its supervisor's socket (as every command: `isaacd --help`)")
    a.add_argument("--socket", default=argparse.SUPPRESS, metavar="PATH",
                   help="control socket of the supervisor to talk to (as every command: `isaacd --help`)")


def cmd_submit(args: argparse.Namespace, client: Callable[[argparse.Namespace], Ask],
               cli_error: Callable[[str, int], Exception]) -> int:
    from ..config.schema import ConfigError  # pydantic: only a submit pays for it
    from ..sweeps.spec import load_sweep

    path = Path(args.file)
    try:
        load_sweep(path)  # a bad file's lines here, with no supervisor needed and nothing sent
    except ConfigError as exc:
        raise cli_error(str(exc), 2) from None
    text = path.read_text(encoding="utf-8")  # (load_sweep read it: readable, UTF-8)
    print(client(args)({"cmd": "sweep-submit", "text": text, "source": str(path.resolve())}))
    return 0


def cmd_status(ask: Ask, args: argparse.Namespace) -> int:
    from .render_sweep import format_sweep

    raw = ask({"cmd": "sweep-status", "sweep": args.sweep})
    if args.json:  # the supervisor's JSON as it came: scripts may read fields this client does not know
        print(json.dumps(raw, indent=2, default=str))
        return 0
    print(format_sweep(SweepStatus.from_json(raw)))
    return 0


def cmd_cancel(ask: Ask, args: argparse.Namespace) -> int:
    print(ask({"cmd": "sweep-cancel", "sweep": args.sweep}))
    return 0


def cmd_best(ask: Ask, args: argparse.Namespace) -> int:
    text = best_file(ask, args.sweep)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")  # the file as it is: `> best.toml`
    return 0


def best_file(ask: Ask, sweep: str) -> str:
    """The best trial's job file as the supervisor writes it; a population's (issue 40) with its best member's
    schedule of hyperparameters and newest complete checkpoint as comments (render_sweep.population_best). The
    best is asked again should it change between the sweep's status and its file (a tick apart)."""
    for _ in range(3):
        sw = SweepStatus.from_json(ask({"cmd": "sweep-status", "sweep": sweep}))
        text = str(ask({"cmd": "sweep-best", "sweep": sweep}))
        if sw.scheduler != "pbt":
            return text
        best = sw.trial(sw.best) if sw.best is not None else None
        if best is not None and f"({best.job})" in text.partition("\n")[0]:
            from ..status.types import Status
            from .render_sweep import population_best

            job = Status.from_json(ask({"cmd": "status"})).job(best.job)
            return population_best(text, sw, best.number, job.checkpoint if job is not None else None)
    return text


def cmd_sweeps(ask: Ask, args: argparse.Namespace) -> int:
    from .render_sweep import format_sweeps

    raw = ask({"cmd": "sweeps"})
    rows = raw if isinstance(raw, list) else []
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
        return 0
    print(format_sweeps([SweepStatus.from_json(r) for r in rows if isinstance(r, dict)]))
    return 0
