"""Issue 14: the attacks that broke isaacd, replayed against a real `isaacd run` (real files, real sockets,
a real tmpfs that fills up). Each test fails on the code before the fix."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest
from free_ports import free_port
from helpers import builtin_job, wait_for, write_config

from isaacd.control import request

SLEEPER = ["sh", "-c", "sleep 600"]


def _checkpoint(path: Path) -> None:
    """A checkpoint as rsl_rl 5.x's OnPolicyRunner.save writes it (torch.save of its state dicts and `iter`), so it
    passes isaacd's completeness and deep checks."""
    import torch

    it = int(path.stem.split("_")[1])
    net = torch.nn.Linear(4, 2)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"actor_state_dict": net.state_dict(), "critic_state_dict": net.state_dict(), "iter": it,
                "infos": None}, path)


def _events(sp, job):  # noqa: ANN001, ANN202
    return sp.events(job)


# ---- 1. corrupted job history ------------------------------------------------------------------------
CORRUPTIONS = {
    "truncated": lambda good: good[: len(good) // 2],
    "empty": lambda good: b"",
    "random_bytes": lambda good: os.urandom(300),
    "json_list": lambda good: b"[1, 2, 3]",
}


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
def test_corrupt_history_is_kept_aside_and_the_job_resumes_from_its_own_newest_checkpoint(
        tmp_path, supervisor_factory, kind):
    job = builtin_job("cp", command=SLEEPER)
    other = builtin_job("other", command=SLEEPER)
    cfg = write_config(tmp_path, job + other)
    exp = tmp_path / "logs" / "rsl_rl" / "cp"
    run = exp / "2026-01-01_10-00-00_cp"
    for it in (10, 33):
        _checkpoint(run / f"model_{it}.pt")
    (run / "model_40.pt").write_bytes(b"PK\x03\x04 half written")  # a crash mid-save: never chosen
    _checkpoint(exp / "2026-01-02_10-00-00_xcp" / "model_90.pt")  # another job's run: never ours
    hist = tmp_path / "state" / "jobs" / "cp.json"
    hist.parent.mkdir(parents=True)
    good = json.dumps({"name": "cp", "restarts": 2, "attempts": [
        {"number": 1, "started_at": 1.0, "reason": "initial", "run_dir": str(run), "ended_at": 2.0,
         "exit": {"code": 1}}]}).encode()
    bad = CORRUPTIONS[kind](good)
    hist.write_bytes(bad)

    sp = supervisor_factory(cfg)  # before: exit 1 with a traceback naming no file, no job supervised
    wait_for(lambda: all(j["pid"] for j in sp.status()["jobs"]), 20, what="both jobs running")
    ev = _events(sp, "cp")
    corrupt = [e for e in ev if e["event"] == "history_corrupt"]
    assert len(corrupt) == 1 and corrupt[0]["path"] == str(hist), ev
    kept = Path(corrupt[0]["kept_as"])
    assert kept.read_bytes() == bad  # the evidence is kept aside, not overwritten
    started = [e for e in ev if e["event"] == "started"][-1]
    assert started["resume_from"]["iteration"] == 33 and str(run) in started["resume_from"]["path"]
    assert "history_corrupt" in sp.cli("events", "cp").stdout and str(hist) in sp.cli("events", "cp").stdout
    assert [e["event"] for e in _events(sp, "other")].count("history_corrupt") == 0
    json.loads(hist.read_text())  # a good document again


def test_history_from_a_newer_version_keeps_its_counts(tmp_path, supervisor_factory):
    cfg = write_config(tmp_path, builtin_job("cp", command=SLEEPER))
    hist = tmp_path / "state" / "jobs" / "cp.json"
    hist.parent.mkdir(parents=True)
    hist.write_text(json.dumps({"name": "cp", "restarts": 7, "schema": 3, "attempts": [
        {"number": 4, "started_at": 1.0, "reason": "initial", "ended_at": 2.0, "exit": {"code": 1},
         "launch_token": "from-the-future"}]}))
    sp = supervisor_factory(cfg)
    j = wait_for(lambda: (x := sp.job("cp"))["pid"] and x, 20, what="running")
    assert j["restarts"] == 7 and j["attempt"] == 5
    assert not [e for e in _events(sp, "cp") if e["event"] == "history_corrupt"]


def test_corrupt_history_with_a_live_trainer_adopts_it_instead_of_starting_a_duplicate(tmp_path,
                                                                                         supervisor_factory):
    cfg = write_config(tmp_path, builtin_job("cp", command=SLEEPER))
    sp = supervisor_factory(cfg)
    pid = wait_for(lambda: sp.job("cp")["pid"], 20, what="running")
    os.kill(sp.proc.pid, signal.SIGKILL)
    sp.proc.wait(10)
    (tmp_path / "state" / "jobs" / "cp.json").write_bytes(b"\x00garbage{")
    sp2 = supervisor_factory(cfg)
    j = wait_for(lambda: (x := sp2.job("cp"))["state"] == "running" and x, 20, what="adopted")
    assert j["pid"] == pid
    ev = [e["event"] for e in _events(sp2, "cp")]
    assert ev.count("started") == 1 and "adopted" in ev and "history_corrupt" in ev


# ---- 2. events journal ---------------------------------------------------------------------------------
def test_damaged_journal_lines_are_skipped_and_counted_and_appends_start_on_a_fresh_line(tmp_path,
                                                                                         supervisor_factory):
    cfg = write_config(tmp_path, builtin_job("cp", command=SLEEPER))
    journal = tmp_path / "state" / "jobs" / "cp.events.jsonl"
    journal.parent.mkdir(parents=True)
    ok = json.dumps({"time": 1.0, "job": "cp", "event": "note", "detail": "before"}).encode()
    journal.write_bytes(ok + b"\n\xff\xfe not utf-8 \x80\n" + b'{"time": 2.0, "job": "cp", "ev')  # torn last line
    sp = supervisor_factory(cfg)
    wait_for(lambda: sp.job("cp")["pid"], 20, what="running")
    res = sp.cli("events", "cp", check=False)
    assert res.returncode == 0, res.stderr  # before: UnicodeDecodeError, the whole journal unreadable
    ev = _events(sp, "cp")
    names = [e["event"] for e in ev]
    assert names[0] == "note"
    # the first event appended after the torn line is not swallowed by it
    assert names[1] == "state" and ev[1]["new"] == "starting", names
    assert "started" in names
    assert ev[-1]["event"] == "journal_damaged" and ev[-1]["skipped_lines"] == 2
    assert "journal_damaged" in res.stdout


def test_control_socket_errors_read_evenly_and_limit_is_checked(tmp_path, supervisor_factory):
    cfg = write_config(tmp_path, builtin_job("cp", command=SLEEPER))
    sp = supervisor_factory(cfg)
    wait_for(lambda: sp.job("cp")["pid"], 20, what="running")
    for req in ({"cmd": "events", "job": "nope"}, {"cmd": "stop", "job": "nope"}):
        with pytest.raises(RuntimeError) as exc:
            request(sp.socket, req)
        assert str(exc.value) == 'no job named "nope"; jobs here: cp'
    with pytest.raises(RuntimeError, match=r"^limit must be a whole number >= 0, got -1$"):
        request(sp.socket, {"cmd": "events", "job": "cp", "limit": -1})
    with pytest.raises(RuntimeError, match=r"^missing field 'job'"):
        request(sp.socket, {"cmd": "events"})
    with pytest.raises(RuntimeError, match=r"^unknown command \"frob\""):
        request(sp.socket, {"cmd": "frob"})
    every = request(sp.socket, {"cmd": "events", "job": "cp"})
    assert request(sp.socket, {"cmd": "events", "job": "cp", "limit": 2}) == every[-2:]
    assert request(sp.socket, {"cmd": "events", "job": "cp", "limit": 0}) == []


# ---- 3. reload races ------------------------------------------------------------------------------------
def _pids(sp):  # noqa: ANN001, ANN202
    return {j["name"]: j["pid"] for j in sp.status()["jobs"]}


def test_in_place_edits_and_empty_files_never_stop_a_trainer(tmp_path, supervisor_factory):
    a, b = builtin_job("a", command=SLEEPER), builtin_job("b", command=SLEEPER)
    cfg = write_config(tmp_path, a + b)
    full = cfg.read_bytes()
    half = full[: full.index(b'name = "b"')]  # a valid TOML prefix that lacks job b
    sp = supervisor_factory(cfg)
    wait_for(lambda: all(_pids(sp).values()) and len(_pids(sp)) == 2, 20, what="both running")
    before = _pids(sp)
    for _ in range(20):  # an editor saving in place: truncate, write part, pause, write the rest
        with open(cfg, "r+b") as fh:
            fh.truncate(0)
            fh.write(half)
            fh.flush()
            sp.proc.send_signal(signal.SIGHUP)
            time.sleep(0.15)  # longer than a tick: the old supervisor read the half file here
            fh.write(full[len(half):])
    res = sp.cli("reload")  # waits for the file to settle, then applies: nothing changed
    assert "removed" not in res.stdout, res.stdout
    # an explicit empty file is refused too: it would stop every job
    cfg.write_bytes(b"")
    res = sp.cli("--socket", str(sp.socket), "reload", check=False)  # an empty file names no socket
    assert res.returncode == 2 and "no [[jobs]]" in res.stderr and "jobs = []" in res.stderr
    assert _pids(sp) == before
    assert all(j["state"] == "starting" for j in sp.status()["jobs"])  # a sleeper never reports a step
    for name in ("a", "b"):
        assert "stopping" not in [e["event"] for e in _events(sp, name)]
        os.kill(before[name], 0)
    # removing every job on purpose still works
    cfg.write_bytes(b"jobs = []\n" + full.split(b"[[jobs]]")[0])
    assert "removed" in sp.cli("reload").stdout


def test_reload_and_status_find_a_non_default_socket_through_a_toml_syntax_error(tmp_path):
    cfg = write_config(tmp_path, builtin_job("cp", command=SLEEPER))
    cfg.write_text(cfg.read_text().replace('control_socket = "isaacd.sock"', 'control_socket = "ctl/my.sock"'))
    from helpers import SupervisorProc

    sp = SupervisorProc(cfg)
    sp.socket = tmp_path / "ctl" / "my.sock"
    sp.start()
    try:
        wait_for(lambda: sp.job("cp")["pid"], 20, what="running")
        cfg.write_text(cfg.read_text() + "\n[[jobs]\nname = = oops\n")
        res = sp.cli("reload", check=False)
        assert res.returncode == 2, res.stderr  # before: rc 3, looked for /run/isaacd/isaacd.sock
        assert "not valid TOML" in res.stderr and str(cfg) in res.stderr
        res = sp.cli("status", check=False)
        assert res.returncode == 0 and "last reload rejected" in res.stdout
    finally:
        sp.stop()


# ---- 4. control socket floods -----------------------------------------------------------------------------
def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_silent_half_requests_cannot_starve_supervision(tmp_path, supervisor_factory):
    cfg = write_config(tmp_path, builtin_job("cp", command=SLEEPER))
    sp = supervisor_factory(cfg)
    pid = wait_for(lambda: sp.job("cp")["pid"], 20, what="running")
    base_fds = _fds(sp.proc.pid)
    flood = []
    for _ in range(256):  # connect, send half a request, never finish
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        flood.append(s)
        s.connect(str(sp.socket))
        try:
            s.sendall(b'{"cmd": "sta')
        except (BrokenPipeError, ConnectionResetError):
            pass  # the supervisor already shed this one (over its client limit): what bounded means
    try:
        # the supervisor holds a bounded number of them, not one fd and thread each
        assert _fds(sp.proc.pid) <= base_fds + 40
        os.kill(pid, signal.SIGKILL)
        journal = tmp_path / "state" / "jobs" / "cp.events.jsonl"
        # read the journal from disk: supervision must not need the socket
        wait_for(lambda: sum(1 for ln in journal.read_text().splitlines() if '"event": "started"' in ln) == 2,
                 20, what="restart while the socket is flooded")
    finally:
        for s in flood:
            s.close()
    j = wait_for(lambda: (x := sp.job("cp"))["pid"] not in (None, pid) and x, 20, what="status after the flood")
    assert j["restarts"] == 1


def test_many_clients_polling_take_turns_instead_of_failing(tmp_path, supervisor_factory):
    cfg = write_config(tmp_path, builtin_job("cp", command=SLEEPER))
    sp = supervisor_factory(cfg)
    wait_for(lambda: sp.job("cp")["pid"], 20, what="running")
    stop = threading.Event()
    errors: list[str] = []

    def poll() -> None:
        while not stop.is_set():
            try:
                request(sp.socket, {"cmd": "status"}, timeout=10, retry_for=30)
            except Exception as exc:  # noqa: BLE001
                errors.append(repr(exc))

    pollers = [threading.Thread(target=poll) for _ in range(8)]
    for t in pollers:
        t.start()
    try:
        results = [sp.cli("status", check=False) for _ in range(10)]
        results += [sp.cli("stop", "cp", check=False), sp.cli("start", "cp", check=False)]
    finally:
        stop.set()
        for t in pollers:
            t.join()
    bad = [(r.returncode, r.stderr[-300:]) for r in results if r.returncode != 0]
    assert not bad  # before: BlockingIOError, 20 of 20
    assert not errors


# ---- 5. full disks -----------------------------------------------------------------------------------------
@pytest.fixture
def tiny_disk(tmp_path, tmpfs):
    return tmpfs(tmp_path / "small")


@pytest.mark.slow
def test_a_full_log_root_is_named_in_the_exit_event_status_metrics_and_doctor(tmp_path, tiny_disk,
                                                                              supervisor_factory):
    port = free_port()
    job = builtin_job("cp", log_root=str(tiny_disk), extra_args=["agent.num_steps_per_env=8"],
                      restart={"max_restarts": 1, "backoff_initial": 0.1, "backoff_max": 0.2})
    cfg = write_config(tmp_path, job)
    cfg.write_text(cfg.read_text().replace("[metrics]\nenabled = false",
                                           f'[metrics]\nenabled = true\nlisten = "127.0.0.1:{port}"'))
    with open(tiny_disk / "filler", "wb") as fh:  # the disk is full before the trainer starts
        try:
            while True:
                fh.write(b"\0" * 65536)
        except OSError:
            pass
    sp = supervisor_factory(cfg)
    j = wait_for(lambda: (x := sp.job("cp"))["state"] == "failed" and x, 120, what="failed")
    # before: "restart limit reached ...; last: exited with code 1" and the cause only in the trainer log
    assert "No space left on device" in j["state_reason"], j["state_reason"]
    exited = [e for e in _events(sp, "cp") if e["event"] == "exited"]
    assert exited and "No space left on device" in exited[-1]["description"]
    assert any("No space left on device" in ln for ln in exited[-1]["output_tail"])
    assert "No space left on device" in sp.cli("status").stdout

    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    free = [ln for ln in text.splitlines() if ln.startswith("isaacd_volume_free_bytes{")
            and 'use="log_root"' in ln and f'path="{tiny_disk}"' in ln]
    assert free and float(free[0].rsplit(" ", 1)[1]) < 65536, free
    assert any(ln.startswith("isaacd_volume_size_bytes{") and 'use="state"' in ln for ln in text.splitlines())

    doc = json.loads(sp.cli("doctor", "--json", check=False).stdout)
    checks = {c["name"]: c for c in (doc["checks"] if isinstance(doc, dict) else doc)}
    assert checks["disk:cp"]["status"] == "fail" and checks["disk:state"]["status"] in ("pass", "warn")


# ---- 6. a torn live TensorBoard event file ------------------------------------------------------------------
def _damage_middle_record(path: Path) -> int:
    """Overwrite bytes inside a record in the middle of the file, in place (the writer keeps appending)."""
    data = path.read_bytes()
    at = len(data) // 2
    with open(path, "r+b") as fh:
        fh.seek(at)
        fh.write(b"\xde\xad\xbe\xef" * 4)
    return at


@pytest.mark.slow
def test_a_damaged_record_in_an_adopted_trainers_event_file_is_skipped_and_reported(tmp_path, supervisor_factory):
    cfg = write_config(tmp_path, builtin_job("cp", max_iterations=100000, extra_args=["agent.num_steps_per_env=8"]))
    sp = supervisor_factory(cfg)
    j = wait_for(lambda: (x := sp.job("cp"))["iteration"] and x["iteration"] >= 6 and x, 120, what="training")
    os.kill(sp.proc.pid, signal.SIGKILL)
    sp.proc.wait(10)
    events_file = next(Path(j["run_dir"]).glob("events.out.tfevents.*"))
    _damage_middle_record(events_file)
    sp2 = supervisor_factory(cfg)
    wait_for(lambda: sp2.job("cp")["pid"] == j["pid"], 20, what="adopted")
    # before: progress reading stopped at the damaged record for good, far behind the trainer
    wait_for(lambda: (sp2.job("cp")["iteration"] or 0) > j["iteration"] + 3, 60, what="reading past the damage")
    damaged = [e for e in _events(sp2, "cp") if e["event"] == "tensorboard_damaged"]
    assert damaged and damaged[0]["path"] == str(events_file) and damaged[0]["skipped_bytes"] > 0


def test_event_reader_waits_at_a_torn_tail_and_reads_past_a_hole(tmp_path):
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    from isaacd.observations.tensorboard import TensorBoardTail

    path = tmp_path / "events.out.tfevents.1.host"

    def record(step: int) -> bytes:
        buf = io.BytesIO()
        ev = event_pb2.Event(step=step, wall_time=1.0, summary=summary_pb2.Summary(
            value=[summary_pb2.Summary.Value(tag="Train/mean_reward", simple_value=float(step))]))
        RecordWriter(buf).write(ev.SerializeToString())
        return buf.getvalue()

    tail = TensorBoardTail(tmp_path)
    first = b"".join(record(s) for s in range(3))
    torn = record(3)
    path.write_bytes(first + torn[:7])  # mid-append
    tail.poll()
    assert tail.progress.last_step == 2 and not tail.take_damage()
    # the rest of the torn record never comes: a hole of zeros, then the writer goes on
    with open(path, "ab") as fh:
        fh.write(b"\0" * 100 + b"".join(record(s) for s in range(4, 7)))
    tail.poll()
    assert tail.progress.last_step == 6
    assert [d["offset"] for d in tail.take_damage()] == [len(first)]
    # a complete record whose data was overwritten in place: skipped, the next ones are read
    bad = bytearray(record(7))
    bad[20] ^= 0xFF
    with open(path, "ab") as fh:
        fh.write(bytes(bad) + record(8))
    tail.poll()
    assert tail.progress.last_step == 8
    assert [d["problem"] for d in tail.take_damage()] == ["record data fails its CRC"]


# ---- 7. HTTP nits ---------------------------------------------------------------------------------------------
def _raw_http(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def _metrics_up(port: int) -> None:
    # the control socket answers before the metrics endpoint is bound: wait for the endpoint itself
    wait_for(lambda: _raw_http(port, b"GET /healthz HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.0 200"), 20,
             what="metrics endpoint")


def test_metrics_http_head_delete_and_http09(tmp_path, supervisor_factory):
    port = free_port()
    cfg = write_config(tmp_path, builtin_job("cp", command=SLEEPER))
    cfg.write_text(cfg.read_text().replace("[metrics]\nenabled = false",
                                           f'[metrics]\nenabled = true\nlisten = "127.0.0.1:{port}"'))
    supervisor_factory(cfg)
    _metrics_up(port)
    head = _raw_http(port, b"HEAD /metrics HTTP/1.0\r\n\r\n")
    status, _, body = head.partition(b"\r\n\r\n")
    assert status.startswith(b"HTTP/1.0 200") and body == b""
    delete = _raw_http(port, b"DELETE / HTTP/1.0\r\n\r\n")
    assert delete.startswith(b"HTTP/1.0 405") and b"Allow: GET, HEAD" in delete
    old = _raw_http(port, b"GET /metrics\r\n")  # HTTP/0.9: answered and closed, not left hanging
    assert old.startswith(b"HTTP/1.0 505")
    ok = _raw_http(port, b"GET /metrics HTTP/1.0\r\n\r\n")
    assert ok.startswith(b"HTTP/1.0 200") and b"isaacd_volume_free_bytes" in ok


def test_silent_http_clients_cost_the_supervisor_a_bounded_number_of_fds(tmp_path, supervisor_factory):
    port = free_port()
    cfg = write_config(tmp_path, builtin_job("cp", command=SLEEPER))
    cfg.write_text(cfg.read_text().replace("[metrics]\nenabled = false",
                                           f'[metrics]\nenabled = true\nlisten = "127.0.0.1:{port}"'))
    sp = supervisor_factory(cfg)
    _metrics_up(port)
    base = _fds(sp.proc.pid)
    flood = [socket.create_connection(("127.0.0.1", port)) for _ in range(200)]
    try:
        _raw_http(port, b"GET /healthz HTTP/1.0\r\n\r\n")  # accepted after all of them (FIFO): they were seen
        assert _fds(sp.proc.pid) <= base + 45  # before: one fd and one thread per silent client
        os.kill(sp.job("cp")["pid"], signal.SIGKILL)  # and supervision goes on meanwhile
        wait_for(lambda: sp.job("cp")["restarts"] == 1, 20, what="restart during the flood")
    finally:
        for s in flood:
            s.close()


def test_deleted_history_resumes_from_the_jobs_own_newest_checkpoint_not_from_zero(tmp_path, supervisor_factory):
    cfg = write_config(tmp_path, builtin_job("cp", command=SLEEPER) + builtin_job("fresh", command=SLEEPER))
    run = tmp_path / "logs" / "rsl_rl" / "cp" / "2026-01-01_10-00-00_cp"
    _checkpoint(run / "model_33.pt")
    sp = supervisor_factory(cfg)
    wait_for(lambda: all(j["pid"] for j in sp.status()["jobs"]), 20, what="both running")
    started = [e for e in _events(sp, "cp") if e["event"] == "started"][-1]
    assert started["resume_from"]["iteration"] == 33  # before: from iteration 0
    assert [e["event"] for e in _events(sp, "cp")][0] == "history_missing"
    assert [e["event"] for e in _events(sp, "fresh")].count("history_missing") == 0  # a new job starts fresh


def test_corrupt_history_keeps_an_operator_stop(tmp_path, supervisor_factory):
    cfg = write_config(tmp_path, builtin_job("cp", command=SLEEPER))
    sp = supervisor_factory(cfg)
    wait_for(lambda: sp.job("cp")["pid"], 20, what="running")
    sp.cli("stop", "cp")
    wait_for(lambda: sp.job("cp")["state"] == "stopped", 20, what="stopped")
    sp.stop()
    (tmp_path / "state" / "jobs" / "cp.json").write_text('{"name": "cp", "restarts": ')
    sp2 = supervisor_factory(cfg)
    j = sp2.job("cp")
    assert j["state"] == "stopped" and j["pid"] is None and "operator stop" in j["state_reason"]
    assert [e["event"] for e in _events(sp2, "cp")].count("started") == 1
