"""`isaacd evals JOB` and `isaacd best JOB` (issue 41): the client side of checkpoint evaluations. Each asks the
supervisor the command finds as every command does (--socket, --config: config/locate.py, through main.py's Client),
over the control socket's `evals` request (the job's eval record); what it prints is cli/render_eval.py's.

Registered by main.py: `COMMANDS` joins its command list and `eval_arguments` builds each one's arguments. Nothing
here imports main.py (it hands over its Client and CliError), so there is no import cycle; only the stdlib and the
light evals/types.py load."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Callable

from ..evals.types import EvalResult

Ask = Callable[[dict[str, Any]], Any]  # one request to the supervisor, its `result` back (main.Client)

COMMANDS = [
    ("evals", "a job's checkpoint evaluations, oldest first, the best marked",
     "Every evaluation of the job's checkpoints ([jobs.eval]: each played headless with deterministic actions and "
     "the same seed, so scores compare), oldest first: its iteration and checkpoint, the episode return (mean ± "
     "std), episode length, success rate (where the task logs one), episodes counted, when it finished and how long "
     "it took. The best is marked with *. Then the checkpoints given up, with the reason. docs/evals.md"),
    ("best", "the best evaluated checkpoint's path",
     "The absolute path of the job's best evaluated checkpoint on stdout (`cp \"$(isaacd best JOB)\" ...`), its "
     "score on stderr; --json: its whole evaluation. Exit 1 with one line when no evaluation has finished yet. The "
     "best checkpoint is never pruned. docs/evals.md"),
]


def eval_arguments(name: str, s: argparse.ArgumentParser, client: Callable[[argparse.Namespace], Ask],
                   cli_error: Callable[[str, int], Exception]) -> Callable[[argparse.Namespace], int]:
    """`name`'s arguments on `s` (a command of main's parser), and the function that runs it. `client(args)` is the
    supervisor the invocation means; `cli_error(message, code)` an error main() prints without a traceback."""
    s.add_argument("job", help="the job's name, as in the config and `isaacd status`")
    if name == "evals":
        s.add_argument("--json", action="store_true", help="the job's evaluations as JSON, for scripts")
        return lambda args: cmd_evals(client(args), args)
    s.add_argument("--json", action="store_true", help="the best evaluation as JSON on stdout, instead of its path")
    return lambda args: cmd_best(client(args), args, cli_error)


def _results(answer: dict[str, Any]) -> list[EvalResult]:
    rows = answer.get("results")
    return [EvalResult.from_json(r) for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def cmd_evals(ask: Ask, args: argparse.Namespace) -> int:
    from .render_eval import format_evals

    answer = ask({"cmd": "evals", "job": args.job})
    if args.json:  # the supervisor's JSON as it came: scripts may read fields this client does not know
        print(json.dumps(answer, indent=2, default=str))
        return 0
    gave_up = [g for g in answer.get("given_up") or [] if isinstance(g, dict) and isinstance(g.get("iteration"), int)]
    newest = max(gave_up, key=lambda g: g.get("at") or 0, default={})  # its reason, said with the list
    print(format_evals(args.job, _results(answer), answer.get("best"), given_up=[g["iteration"] for g in gave_up],
                       last_error=newest.get("reason")))
    return 0


def cmd_best(ask: Ask, args: argparse.Namespace, cli_error: Callable[[str, int], Exception]) -> int:
    from .render_eval import best_score_line

    answer = ask({"cmd": "evals", "job": args.job})
    best = next((r for r in _results(answer) if r.iteration == answer.get("best")), None)
    if best is None:
        raise cli_error(f"isaacd: {args.job} has no evaluated checkpoint yet (`isaacd status {args.job}` shows its "
                        "evaluations as they run)", 1)
    if args.json:
        print(json.dumps({"job": args.job, **best.to_json()}, indent=2))
        return 0
    print(best.checkpoint)
    print(best_score_line(args.job, best), file=sys.stderr)
    if not os.path.exists(best.checkpoint):  # moved aside by `isaacd reset`, or deleted by hand
        print(f"isaacd: note: {best.checkpoint} is not there any more (a reset moves a job's runs aside: "
              f"`isaacd events {args.job}` names where)", file=sys.stderr)
    return 0
