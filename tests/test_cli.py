"""The `isaacd` command line as a user meets it: the real binary, real supervisors, a pty where a terminal matters."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from free_ports import free_port
from helpers import BIN, builtin_job, wait_for, write_config

ISAACD = str(BIN / "isaacd")
REPO = Path(__file__).resolve().parents[1]
# Modules a client command has no use for; importing any of them is what made `isaacd status` slow.
HEAVY = ("pydantic", "structlog", "prometheus_client", "tensorboard", "torch", "isaacd.config.schema", "isaacd.supervisor")


@pytest.fixture(autouse=True)
def own_runtime_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test gets its own per-user registry, so supervisors of other tests or sessions are not found."""
    d = tmp_path / "xdg"
    d.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(d))
    monkeypatch.delenv("ISAACD_CONFIG", raising=False)
    return d


def isaacd(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
           **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ISAACD, *args], capture_output=True, text=True, timeout=60, cwd=cwd,
                          env=env or dict(os.environ), **kw)


def idle_job(name: str) -> str:
    """A job that never launches: enough for talking to the supervisor without training."""
    return f'\n[[jobs]]\nname = "{name}"\nautostart = false\n'


def metrics_on(port: int) -> str:
    return f'\n[metrics]\nenabled = true\nlisten = "127.0.0.1:{port}"\n'


def config_with_metrics(tmp: Path, jobs: str, port: int) -> Path:
    cfg = write_config(tmp, jobs)
    cfg.write_text(cfg.read_text().replace("[metrics]\nenabled = false\n", metrics_on(port).lstrip("\n")))
    return cfg


# ---- item 6: help ----------------------------------------------------------------------------
def test_bare_isaacd_prints_the_command_list():
    res = isaacd()
    assert res.returncode == 0, res.stderr
    for cmd in ("run", "status", "events", "stop", "start", "restart", "reload", "logs", "doctor", "check-config"):
        assert re.search(rf"^\s+{cmd}\s+\S", res.stdout, re.M), f"{cmd} missing from:\n{res.stdout}"


def _entries_without_help(page: str) -> list[str]:
    """argparse lists each argument as "  NAME   help", or "  NAME" with the help indented on the next line."""
    lines = page.splitlines()
    bare = []
    for i, ln in enumerate(lines):
        if re.match(r"^  \S", ln) and not re.search(r"\S\s{2,}\S", ln.strip()):
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            if not re.match(r"^ {10,}\S", nxt):
                bare.append(ln.strip())
    return bare


def test_every_command_has_a_description_and_every_argument_a_help():
    top = isaacd("--help").stdout
    commands = re.findall(r"^    ([a-z-]+)\s", top, re.M)
    assert len(commands) >= 10
    for cmd in commands:
        page = isaacd(cmd, "--help").stdout
        description = page.split("\n\n")[1]
        assert not description.startswith(("positional", "options")), f"{cmd} has no description"
        assert _entries_without_help(page) == [], f"isaacd {cmd}: arguments without help"


def test_check_config_file_and_config_option_must_agree(tmp_path):
    a = write_config(tmp_path, idle_job("a"))
    other = tmp_path / "b"
    other.mkdir()
    b = write_config(other, idle_job("b"))
    assert isaacd("check-config", str(a)).returncode == 0
    assert "1 job(s): a" in isaacd("check-config", "--config", str(a)).stdout
    both = isaacd("check-config", str(a), "--config", str(b))
    assert both.returncode == 2 and "two files given" in both.stderr
    assert isaacd("check-config", str(a), "--config", str(a)).returncode == 0


# ---- item 2: closed pipes and Ctrl-C ---------------------------------------------------------
def _run_into_closed_pipe(*args: str) -> subprocess.CompletedProcess[bytes]:
    r, w = os.pipe()
    os.close(r)  # the reader (`head -3`) has already gone
    try:
        return subprocess.run([ISAACD, *args], stdout=w, stderr=subprocess.PIPE, timeout=60)
    finally:
        os.close(w)


def test_closed_pipe_ends_quietly(tmp_path, supervisor_factory):
    cfg = write_config(tmp_path, idle_job("a"))
    res = _run_into_closed_pipe("check-config", str(cfg))
    assert res.returncode == 141 and res.stderr == b"", res.stderr.decode()
    sp = supervisor_factory(cfg)
    for args in (("status",), ("status", "--json"), ("events", "a")):
        res = _run_into_closed_pipe("--config", str(sp.config), *args)
        assert res.returncode == 141 and res.stderr == b"", (args, res.stderr.decode())


def _pty_run(argv: list[str], ready: bytes, cwd: Path) -> tuple[int, bytes]:
    """Run argv on a terminal, wait until it printed `ready`, press Ctrl-C; (exit code, everything shown)."""
    pid, fd = pty.fork()
    if pid == 0:  # child: a session leader on the pty, so ^C from the terminal is its SIGINT
        os.chdir(cwd)
        os.execv(argv[0], argv)
    out = b""
    deadline = time.monotonic() + 60
    while ready not in out and time.monotonic() < deadline:
        if select.select([fd], [], [], 1)[0]:
            out += os.read(fd, 4096)
    assert ready in out, out.decode(errors="replace")
    os.write(fd, b"\x03")
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), out


def test_ctrl_c_on_logs_follow_exits_130_without_traceback(tmp_path):
    cfg = write_config(tmp_path, idle_job("a"))
    log = tmp_path / "state" / "logs" / "a.log"
    log.parent.mkdir(parents=True)
    log.write_text("iteration 1\nlast line before ctrl-c\n")
    code, shown = _pty_run([ISAACD, "--config", str(cfg), "logs", "-f", "a"], b"last line before ctrl-c", tmp_path)
    assert code == 130, shown.decode(errors="replace")
    assert b"Traceback" not in shown and b"KeyboardInterrupt" not in shown


# ---- item 4: client start-up imports only what it needs ---------------------------------------
def test_client_commands_do_not_import_the_daemon_stack(tmp_path, supervisor_factory):
    sp = supervisor_factory(write_config(tmp_path, idle_job("a")))
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    for args in (("status",), ("events", "a"), ("stop", "a"), ("reload",)):
        res = isaacd("--config", str(sp.config), *args, env=env)
        assert res.returncode == 0, res.stderr[-2000:]
        imported = {m.group(1).strip() for m in re.finditer(r"^import time:.*\|\s*(\S+)$", res.stderr, re.M)}
        assert "isaacd.cli.main" in imported
        heavy = sorted(m for m in imported if m.split(".")[0] in HEAVY or m in HEAVY)
        assert not heavy, f"isaacd {' '.join(args)} imported {heavy}"


# ---- item 5: one wording for an unknown job -------------------------------------------------
def test_unknown_job_is_worded_once_and_names_the_jobs(tmp_path, supervisor_factory):
    sp = supervisor_factory(write_config(tmp_path, idle_job("alpha") + idle_job("beta")))
    want = 'isaacd: no job named "nope"; jobs here: alpha, beta'
    for args in (("status", "nope"), ("events", "nope"), ("stop", "nope"), ("start", "nope"),
                 ("restart", "nope"), ("logs", "nope")):
        res = isaacd("--config", str(sp.config), *args)
        assert (res.returncode, res.stderr.strip()) == (1, want), args


# ---- item 1: the metrics port is taken ------------------------------------------------------
def test_metrics_port_in_use_is_one_line_and_leaves_no_socket(tmp_path):
    port = free_port()
    holder = socket.socket()
    holder.bind(("127.0.0.1", port))
    holder.listen()
    try:
        cfg = config_with_metrics(tmp_path, idle_job("a"), port)
        res = isaacd("run", "--config", str(cfg))
    finally:
        holder.close()
    assert res.returncode == 1
    err = [ln for ln in res.stderr.splitlines() if not ln.startswith("{")]  # JSON log lines aside
    assert len(err) == 1, res.stderr
    assert f"127.0.0.1:{port}" in err[0] and "[metrics] listen" in err[0] and str(cfg) in err[0]
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "isaacd.sock").exists()


def test_second_supervisor_on_the_same_port_names_the_first(tmp_path, supervisor_factory):
    port = free_port()
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    first = supervisor_factory(config_with_metrics(tmp_path / "one", idle_job("a"), port))
    res = isaacd("run", "--config", str(config_with_metrics(tmp_path / "two", idle_job("b"), port)),
                 cwd=tmp_path / "two")
    assert res.returncode == 1
    line = [ln for ln in res.stderr.splitlines() if not ln.startswith("{")]
    assert len(line) == 1 and f"another isaacd supervisor (pid {first.proc.pid}" in line[0], res.stderr
    assert not (tmp_path / "two" / "isaacd.sock").exists()
    assert first.status()["supervisor"]["pid"] == first.proc.pid  # the first one is untouched


# ---- item 3: reach the supervisor from any directory ----------------------------------------
def talker_job(name: str) -> str:
    """A job whose trainer says one line and waits (no Python, no training): output for `isaacd logs` at once."""
    return (f'\n[[jobs]]\nname = "{name}"\ncommand = ["sh", "-c", "echo hello-from-{name}; exec sleep 600"]\n'
            'stop_timeout = 2.0\n')


def test_every_command_finds_the_users_supervisor_from_another_directory_and_writes_nothing_there(
        tmp_path, supervisor_factory):
    """Issue 37: status, events, logs (and logs --socket) from a directory that is not the supervisor's all answer
    from that supervisor, through the one lookup; none of them creates anything where it runs. A reload after an
    [access] change names it."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    none = isaacd("status", cwd=elsewhere)
    assert none.returncode == 3 and "--socket" in none.stderr and "isaacd run" in none.stderr, none.stderr
    none = isaacd("logs", "talk", cwd=elsewhere)
    assert none.returncode == 3 and "no supervisor runs for this user" in none.stderr, none.stderr
    cfg = write_config(tmp_path, idle_job("a") + talker_job("talk"))
    sp = supervisor_factory(cfg)
    logs = wait_for(lambda: (r := isaacd("logs", "talk", cwd=elsewhere)).returncode == 0 and "hello-from-talk" in
                    r.stdout and r, 30, what="the talker's output through `isaacd logs` from another directory")
    assert logs.stdout == "hello-from-talk\n", logs.stderr
    res = isaacd("status", cwd=elsewhere)  # no --config, no $ISAACD_CONFIG, not its directory
    assert res.returncode == 0, res.stderr
    assert f"pid {sp.proc.pid}" in res.stdout and re.search(r"^a\s+stopped", res.stdout, re.M)
    for args in (("logs", "talk", "--socket", str(sp.socket)), ("logs", "--attempt", "1", "talk")):
        r = isaacd(*args, cwd=elsewhere)
        assert (r.returncode, r.stdout) == (0, "hello-from-talk\n"), (args, r.stderr)
    ev = isaacd("events", "talk", cwd=elsewhere)
    assert ev.returncode == 0 and "started" in ev.stdout, ev.stderr
    unknown = isaacd("logs", "nope", "--socket", str(sp.socket), cwd=elsewhere)
    assert unknown.stderr.strip() == 'isaacd: no job named "nope"; jobs here: a, talk'

    cfg.write_text(cfg.read_text() + "\n[access.defaults]\ngpus = 1\n")
    reloaded = isaacd("reload", cwd=elsewhere)
    assert reloaded.returncode == 0, reloaded.stderr
    assert re.search(r"^  \[access\] defaults\.gpus: in force now$", reloaded.stdout, re.M), reloaded.stdout
    assert "no changes" not in reloaded.stdout
    assert list(elsewhere.iterdir()) == []  # no ./var, no state dir, nothing
    sp.stop()
    again = isaacd("status", cwd=elsewhere)
    assert again.returncode == 3 and "no supervisor runs for this user" in again.stderr
    offline = isaacd("logs", "talk", "--config", str(cfg), cwd=elsewhere)  # none answers: its state dir, read only
    assert (offline.returncode, offline.stdout) == (0, "hello-from-talk\n"), offline.stderr
    assert list(elsewhere.iterdir()) == []


def test_embedded_default_from_another_directory_and_reload_says_there_is_no_file(tmp_path):
    """The quick start's own case: `isaacd run` with no config in one directory, the client in another.

    The supervisor runs in its own network namespace so its fixed metrics port 9835 cannot clash with
    anything else on this machine; the control socket is a file and reachable from here."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("nsenter"):
        pytest.skip("needs root and util-linux's unshare/nsenter for a network namespace of its own")
    home, elsewhere = tmp_path / "quick", tmp_path / "elsewhere"
    home.mkdir()
    elsewhere.mkdir()
    log = open(tmp_path / "sup.log", "wb")
    sup = subprocess.Popen(["unshare", "--net", "sh", "-c", f"ip link set lo up && exec {ISAACD} run"],
                           cwd=home, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: isaacd("status", cwd=elsewhere).returncode == 0, 60, what="supervisor")
        st = isaacd("status", cwd=elsewhere)
        assert "config <embedded default>" in st.stdout and re.search(r"^cartpole\s", st.stdout, re.M)
        res = isaacd("reload", cwd=elsewhere)
        assert res.returncode == 0 and "nothing to reload" in res.stdout and "embedded default" in res.stdout
        assert res.stderr == ""
        # the same quick start again from another directory, in the first one's network: port 9835 is taken
        second = subprocess.run(["nsenter", f"--net=/proc/{sup.pid}/ns/net", ISAACD, "run"], cwd=elsewhere,
                                capture_output=True, text=True, timeout=60)
        said = [ln for ln in second.stderr.splitlines() if not ln.startswith("{") and "gpu collector" not in ln]
        assert second.returncode == 1 and len(said) == 1, second.stderr
        assert "127.0.0.1:9835" in said[0] and f"another isaacd supervisor (pid {sup.pid}" in said[0]
        assert "[metrics] listen" in said[0] and not (elsewhere / "var" / "isaacd.sock").exists()
    finally:
        sup.send_signal(signal.SIGTERM)
        try:
            sup.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(sup.pid, signal.SIGKILL)
            sup.wait()
        log.close()
    assert sup.returncode == 0, (tmp_path / "sup.log").read_text()[-3000:]


# ---- item 8: start-up log noise -------------------------------------------------------------
def test_start_up_log_is_quiet_on_a_cpu_only_host(tmp_path, supervisor_factory):
    cfg = config_with_metrics(tmp_path, idle_job("a"), free_port())
    cfg.write_text(cfg.read_text().replace('source = "none"', 'source = "nvml"'))
    sp = supervisor_factory(cfg)
    wait_for(lambda: "supervisor_started" in sp.log_text(), 30, what="start-up log")
    sp.stop()
    lines = [json.loads(ln) for ln in sp.log_text().splitlines() if ln.startswith("{")]
    down = [ln for ln in lines if ln["event"] == "gpu collector down"]
    assert all(ln["level"] == "info" for ln in down), down  # a CPU-only job needs no GPU collector
    assert len([ln for ln in lines if "metrics" in ln["event"] and "listen" in ln["event"]]) == 1


# ---- item 7: re-running the install ---------------------------------------------------------
def test_install_rerun_skips_pip_when_nothing_changed():
    install = str(REPO / "scripts" / "install.sh")
    first = subprocess.run([install], capture_output=True, text=True, timeout=600)  # installs if anything changed
    assert first.returncode == 0, first.stderr
    site = Path(sys.prefix) / "lib"
    before = sorted((str(p), p.stat().st_mtime_ns) for p in site.glob("*/site-packages/*.dist-info"))
    again = subprocess.run([install], capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "pip skipped" in again.stdout, again.stdout + again.stderr
    assert sorted((str(p), p.stat().st_mtime_ns) for p in site.glob("*/site-packages/*.dist-info")) == before


# ---- item 11: xid's action in status --------------------------------------------------------
def test_status_json_shows_the_xid_watchdogs_real_actions(tmp_path, supervisor_factory):
    sp = supervisor_factory(write_config(tmp_path, builtin_job("cp", max_iterations=3, num_envs=16)))
    j = wait_for(lambda: (x := sp.job("cp"))["watchdogs"].get("xid") and x, 120, what="watchdog status")
    xid = j["watchdogs"]["xid"]
    assert xid["action"] == "restart/stop"
    assert xid["actions_by_class"] == {"application": "restart", "reset": "stop", "other": "log"}


# ---- the README's Quick start is pasteable line by line ----------------------------------------
def test_readme_quick_start_lines_are_real_commands():
    readme = (REPO / "README.md").read_text()
    quick = readme[readme.index("## Quick start"):readme.index("\n## ", readme.index("## Quick start") + 1)]
    lines = [ln for block in re.findall(r"```sh\n(.*?)```", quick, re.S) for ln in block.splitlines() if ln.strip()]
    assert len(lines) >= 8
    commands = set(re.findall(r"^    ([a-z-]+)\s", isaacd("--help").stdout, re.M))
    for ln in lines:
        # zsh (macOS' default shell) does not take comments on the command line: no "cmd  # what it does"
        assert "#" not in ln.split("'")[0], f"a comment in a line to paste: {ln}"
        assert subprocess.run(["bash", "-n", "-c", ln]).returncode == 0, ln
        for m in re.finditer(r"isaacd (\S+)", ln):
            assert m.group(1) in commands, f"not an isaacd command: {m.group(1)!r} in {ln!r}"


def test_supervisor_whose_log_reader_is_gone_still_stops_its_trainers(tmp_path):
    """`isaacd run 2>&1 | grep ...`, then Ctrl-C reaches grep first: the supervisor must still stop its jobs."""
    cfg = write_config(tmp_path, '\n[[jobs]]\nname = "sl"\ncommand = ["sh", "-c", "sleep 300"]\nstop_timeout = 3.0\n')
    r, w = os.pipe()
    sup = subprocess.Popen([ISAACD, "run", "--config", str(cfg)], stdout=w, stderr=w, start_new_session=True)
    os.close(w)
    trainer = None
    try:
        job = wait_for(lambda: json.loads(isaacd("--config", str(cfg), "status", "--json").stdout)["jobs"][0]["pid"],
                       30, what="the job's pid")
        trainer = int(job)
        os.close(r)  # the log reader is gone
        sup.send_signal(signal.SIGTERM)
        assert sup.wait(30) == 0
        with pytest.raises(ProcessLookupError):
            os.kill(trainer, 0)
        assert not (tmp_path / "isaacd.sock").exists()
    finally:
        if sup.poll() is None:
            os.killpg(sup.pid, signal.SIGKILL)
            sup.wait()
        if trainer is not None:
            try:
                os.killpg(trainer, signal.SIGKILL)
            except ProcessLookupError:
                pass
