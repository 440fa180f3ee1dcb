"""`isaacd`: the supervisor (`isaacd run`) and its control client (everything else)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from . import __version__
from .config import EMBEDDED_DEFAULT_NAME, Config, ConfigError, load_config, load_embedded_default
from .control import NotRunning, request

SYSTEM_CONFIG = Path("/etc/isaacd/isaacd.toml")


def _config_path(arg: str | None) -> str | None:
    if arg:
        return arg
    env = os.environ.get("ISAACD_CONFIG")
    if env:
        return env
    return str(SYSTEM_CONFIG) if SYSTEM_CONFIG.exists() else None


def _load(arg: str | None) -> tuple[Config, str | None]:
    path = _config_path(arg)
    if path is None:
        return load_embedded_default(Path.cwd()), None
    return load_config(path), path


def _socket(args: argparse.Namespace) -> Path:
    if args.socket:
        return Path(args.socket)
    try:
        cfg, _ = _load(args.config)
        return cfg.supervisor.control_socket
    except ConfigError:
        # The file may be mid-edit or broken; the supervisor still runs on the old one. Find its socket anyway
        # so `isaacd reload` can report the error and `status` keeps working.
        return _socket_from_raw(_config_path(args.config))


def _socket_from_raw(path: str | None) -> Path:
    from .config import SupervisorConfig, tomllib

    default = SupervisorConfig().control_socket
    if path is None:
        return default
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return default
    try:
        found = tomllib.loads(text).get("supervisor", {}).get("control_socket")
    except Exception:  # noqa: BLE001 - a TOML syntax error elsewhere in the file: look for the one key
        found = _scan_control_socket(text)
    if not isinstance(found, str) or not found:
        return default
    sock = Path(found)
    return sock if sock.is_absolute() else (Path(path).resolve().parent / sock).resolve()


def _scan_control_socket(text: str) -> str | None:
    """`control_socket = "..."` under `[supervisor]`, line by line, for a file TOML cannot parse."""
    import re

    table = ""
    for line in text.splitlines():
        head = re.match(r"\s*\[+\s*([^\]]*?)\s*\]+", line)
        if head:
            table = head.group(1)
            continue
        m = re.match(r"""\s*control_socket\s*=\s*(?:"([^"]*)"|'([^']*)')""", line)
        if m and table == "supervisor":
            return m.group(1) if m.group(1) is not None else m.group(2)
    return None


# ---- formatting -----------------------------------------------------------------------------
def _age(ts: float | None, now: float) -> str:
    if ts is None:
        return "-"
    s = max(0, int(now - ts))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    if s < 172800:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


def _num(v: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if v is None else fmt.format(v)


def format_status(st: dict[str, Any], now: float | None = None) -> str:
    now = time.time() if now is None else now
    sup = st["supervisor"]
    lines = [f"isaacd {sup['version']}  pid {sup['pid']}  up {_age(sup['started_at'], now)}  "
             f"config {sup['config_path']}"]
    if sup.get("last_config_error"):
        lines.append(f"  ! last reload rejected (old config still in force): {sup['last_config_error']}")
    header = ["JOB", "STATE", "RUNTIME", "PID", "ITER/MAX", "REWARD", "FPS", "CHECKPOINT", "RESTARTS", "UPTIME"]
    rows = []
    notes = []
    for j in st["jobs"]:
        it = "-" if j["iteration"] is None else str(j["iteration"])
        ck = j.get("checkpoint")
        ck_s = f"{ck['iteration']} ({_age(ck['time'], now)} ago)" if ck else "-"
        rs = str(j["restarts"])
        if j.get("last_restart_reason"):
            rs += f" ({j['last_restart_reason']})"
        rows.append([j["name"], j["state"], j["runtime"], str(j["pid"] or "-"), f"{it}/{j['max_iterations']}",
                     _num(j["mean_reward"]), _num(j["fps"], "{:.0f}"), ck_s, rs, _age(j.get("started_at"), now)])
        if j.get("state_reason") and j["state"] in ("failed", "stopped", "backing-off", "stopping"):
            notes.append(f"  {j['name']}: {j['state_reason']}")
        wds = j.get("watchdogs") or {}
        quiet = [wd for wd, w in sorted(wds.items()) if w.get("state") in ("ok", "warmup")]
        if wds:
            states = {wd: wds[wd]["state"] for wd in quiet}
            summary = ", ".join(f"{wd} {st}" for wd, st in states.items())
            notes.append(f"  {j['name']} watchdogs: {summary}" if summary else f"  {j['name']} watchdogs:")
        for wd, w in sorted(wds.items()):
            if w.get("state") not in ("ok", "warmup", "disabled", None):
                since = f" since {_age(w['since'], now)} ago" if w.get("since") else ""
                notes.append(f"    {wd} {w['state'].upper()}{since}: {w.get('detail') or ''}".rstrip(": "))
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    if not rows:
        lines.append("(no jobs)")
    lines += notes
    gpus = st.get("gpus")
    if gpus is not None:
        lines.append("")
        lines.append(format_gpus(gpus))
    return "\n".join(lines)


def format_gpus(gpus: dict[str, Any]) -> str:
    if not gpus.get("up"):
        return f"GPUs: collector down ({gpus.get('reason') or 'no NVML'})"
    out = ["GPU  MODEL                 TEMP  UTIL  POWER        MEM             JOBS  HEALTH"]
    for g in gpus.get("devices", []):
        def f(key: str, fmt: str) -> str:
            v = g.get(key)
            return "-" if v is None else fmt.format(v)

        mem = "-" if g.get("memory_used_bytes") is None else \
            f"{g['memory_used_bytes'] / 2**30:.0f}/{(g.get('memory_total_bytes') or 0) / 2**30:.0f} GiB"
        power = "-" if g.get("power_watts") is None else \
            f"{g['power_watts']:.0f}/{g.get('power_limit_watts') or 0:.0f} W"
        out.append(f"{g['index']:<4} {str(g.get('model', ''))[:20]:<21} {f('temperature_celsius', '{:.0f}C'):<5} "
                   f"{f('utilization_ratio', '{:.0%}'):<5} {power:<12} {mem:<15} "
                   f"{','.join(g.get('jobs', [])) or '-':<5} {g.get('health', 'ok')}")
    return "\n".join(out)


def format_events(events: list[dict[str, Any]]) -> str:
    lines = []
    for e in events:
        ts = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e["time"]))
        rest = {k: v for k, v in e.items() if k not in ("time", "job", "event", "argv")}
        detail = " ".join(f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in rest.items()
                          if v is not None)
        lines.append(f"{ts}  {e['event']:<20} {detail}")
    return "\n".join(lines) or "(no events)"


# ---- commands -------------------------------------------------------------------------------
def cmd_run(args: argparse.Namespace) -> int:
    from .app import build_supervisor
    from .logs import configure_logging
    from .supervisor import AlreadyRunning

    try:
        cfg, path = _load(args.config)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    configure_logging(cfg.supervisor.log_level, cfg.supervisor.log_format)
    try:
        sup = build_supervisor(cfg, path)
    except AlreadyRunning as exc:
        print(f"isaacd: {exc}", file=sys.stderr)
        return 1
    sup.install_signal_handlers()
    sup.start()
    if path is None:
        print(f"isaacd: running the embedded default config (state in {cfg.supervisor.state_dir}); "
              f"`isaacd status` in this directory shows it", file=sys.stderr)
    sup.run_forever()
    return 0


def cmd_check_config(args: argparse.Namespace) -> int:
    try:
        cfg = load_config(args.file) if args.file else _load(args.config)[0]
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    print(f"{args.file or _config_path(args.config) or EMBEDDED_DEFAULT_NAME}: OK, "
          f"{len(cfg.jobs)} job(s): {', '.join(j.name for j in cfg.jobs) or '-'}")
    return 0


def _client(args: argparse.Namespace, req: dict[str, Any]) -> Any:
    return request(_socket(args), req)


def cmd_status(args: argparse.Namespace) -> int:
    st = _client(args, {"cmd": "status"})
    if args.job:
        st["jobs"] = [j for j in st["jobs"] if j["name"] == args.job]
        if not st["jobs"]:
            print(f"isaacd: no job named {args.job!r}", file=sys.stderr)
            return 1
    print(json.dumps(st, indent=2, default=str) if args.json else format_status(st))
    return 0


def cmd_events(args: argparse.Namespace) -> int:
    events = _client(args, {"cmd": "events", "job": args.job, "limit": args.limit})
    print(json.dumps(events, indent=1) if args.json else format_events(events))
    return 0


def cmd_job(args: argparse.Namespace) -> int:
    print(f"{args.job}: {_client(args, {'cmd': args.command, 'job': args.job})}")
    return 0


def cmd_reload(args: argparse.Namespace) -> int:
    res = _client(args, {"cmd": "reload"})
    if not res.get("ok"):
        print(f"reload rejected, previous config still in force:\n{res['error']}", file=sys.stderr)
        return 2
    print("reloaded: " + ", ".join(f"{k} {v}" for k, v in res.items() if k != "ok" and v))
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    from .joblogs import show_logs

    cfg, _ = _load(args.config)
    return show_logs(cfg, args.job, follow=args.follow, lines=args.lines)


def cmd_doctor(args: argparse.Namespace) -> int:
    from .doctor import run_doctor

    cfg, _ = _load(args.config)
    return run_doctor(cfg, as_json=args.json)


def cmd_install_units(args: argparse.Namespace) -> int:
    from .units import install_units

    return install_units(args)


def build_parser() -> argparse.ArgumentParser:
    # --config/--socket work before or after the subcommand (`isaacd run --config F`, `isaacd -c F status`)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", "-c", default=argparse.SUPPRESS,
                        help="host config (default: $ISAACD_CONFIG, /etc/isaacd/isaacd.toml, "
                             "else the embedded default with state under ./var)")
    common.add_argument("--socket", default=argparse.SUPPRESS, help="control socket (default: from the config)")
    p = argparse.ArgumentParser(prog="isaacd", description=__doc__, parents=[common])
    p.add_argument("--version", action="version", version=f"isaacd {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    _add = sub.add_parser
    sub.add_parser = lambda *a, **k: _add(*a, parents=[common], **k)  # type: ignore[method-assign]

    s = sub.add_parser("run", help="run the supervisor in the foreground")
    s.set_defaults(func=cmd_run)
    s = sub.add_parser("check-config", help="validate a config file and explain every problem")
    s.add_argument("file", nargs="?")
    s.set_defaults(func=cmd_check_config)
    s = sub.add_parser("status", help="jobs, GPUs, checkpoints and watchdogs at a glance")
    s.add_argument("job", nargs="?")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_status)
    s = sub.add_parser("events", help="what happened to a job and why")
    s.add_argument("job")
    s.add_argument("--limit", type=int, default=None)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_events)
    for name, help_ in (("stop", "stop a job gracefully (SIGINT, grace, SIGKILL)"), ("start", "start a stopped job"),
                        ("restart", "stop and resume a job from its newest complete checkpoint")):
        s = sub.add_parser(name, help=help_)
        s.add_argument("job")
        s.set_defaults(func=cmd_job)
    s = sub.add_parser("reload", help="re-read the config (same as SIGHUP); a bad file changes nothing")
    s.set_defaults(func=cmd_reload)
    s = sub.add_parser("logs", help="a job's trainer output")
    s.add_argument("job")
    s.add_argument("-f", "--follow", action="store_true")
    s.add_argument("-n", "--lines", type=int, default=50)
    s.set_defaults(func=cmd_logs)
    s = sub.add_parser("doctor", help="check this host for what isaacd and Isaac Lab need")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_doctor)
    s = sub.add_parser("install-units", help="install the systemd unit and an example config")
    s.add_argument("--prefix", default="/", help="root to install into (for packaging)")
    s.add_argument("--bin", default=None, help="path of the isaacd executable for ExecStart")
    s.set_defaults(func=cmd_install_units)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.config = getattr(args, "config", None)
    args.socket = getattr(args, "socket", None)
    try:
        return int(args.func(args) or 0)
    except NotRunning as exc:
        print(f"isaacd: {exc}", file=sys.stderr)
        return 3
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    except RuntimeError as exc:
        print(f"isaacd: {exc}", file=sys.stderr)
        return 1
