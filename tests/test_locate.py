"""The one lookup every client command uses to find its supervisor (config/locate.py find_socket, issue 37), in its
order: --socket, the config (--config, $ISAACD_CONFIG, /etc/isaacd/isaacd.toml), ./var/isaacd.sock here, the user's
one registered supervisor; and that looking creates nothing."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest

from isaacd.config import locate
from isaacd.config.locate import Ambiguous, find_socket, not_running_hint


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """A cwd, an empty registry, no $ISAACD_CONFIG and a system config path that does not exist (yet)."""
    runtime = tmp_path / "xdg"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.delenv("ISAACD_CONFIG", raising=False)
    monkeypatch.setattr(locate, "SYSTEM_CONFIG", tmp_path / "etc" / "isaacd.toml")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    return tmp_path, cwd


def listening(path: Path) -> None:
    """A socket file at `path`, as a supervisor leaves one (the lookup checks that it exists; nothing connects)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))


def registered_elsewhere(tmp_path: Path, name: str) -> tuple[subprocess.Popen, Path]:
    """A live process registered as a supervisor with its own socket (registered() leaves out the caller's own pid)."""
    proc = subprocess.Popen(["sleep", "60"])
    sock = tmp_path / name / "isaacd.sock"
    listening(sock)
    entry = {"pid": proc.pid, "socket": str(sock), "config": str(tmp_path / name / "isaacd.toml"),
             "cwd": str(tmp_path / name), "metrics": None}
    (tmp_path / "xdg" / "isaacd").mkdir(mode=0o700, exist_ok=True)
    (tmp_path / "xdg" / "isaacd" / f"{proc.pid}.json").write_text(json.dumps(entry))
    return proc, sock


def test_the_lookup_goes_socket_config_here_registration_and_creates_nothing(world, monkeypatch):
    tmp_path, cwd = world
    procs = []
    try:
        assert find_socket(None, None, cwd).how == "none"  # nothing anywhere: the hint says what to do
        assert "no supervisor runs for this user" in not_running_hint(find_socket(None, None, cwd))
        proc, theirs = registered_elsewhere(tmp_path, "one")
        procs.append(proc)
        assert find_socket(None, None, cwd).socket == theirs  # from any directory: the user's one supervisor
        listening(cwd / "var" / "isaacd.sock")
        assert find_socket(None, None, cwd).socket == cwd / "var" / "isaacd.sock"  # one started here comes first
        system = locate.SYSTEM_CONFIG
        system.parent.mkdir()
        system.write_text('[supervisor]\ncontrol_socket = "/run/sys.sock"\n')
        assert find_socket(None, None, cwd).socket == Path("/run/sys.sock")  # the host's config comes before
        env = tmp_path / "env.toml"
        env.write_text('[supervisor]\ncontrol_socket = "env.sock"\n')  # relative to the file
        monkeypatch.setenv("ISAACD_CONFIG", str(env))
        assert find_socket(None, None, cwd).socket == tmp_path / "env.sock"
        mine = tmp_path / "mine.toml"
        mine.write_text('[supervisor]\ncontrol_socket = "/run/mine.sock"\n')
        assert find_socket(None, str(mine), cwd).socket == Path("/run/mine.sock")
        assert find_socket("/run/other.sock", str(mine), cwd).socket == Path("/run/other.sock")  # --socket wins
        assert sorted(p.name for p in cwd.iterdir()) == ["var"] and [p.name for p in (cwd / "var").iterdir()] == [
            "isaacd.sock"]  # the lookup made nothing here

        monkeypatch.delenv("ISAACD_CONFIG")
        system.unlink()
        (cwd / "var" / "isaacd.sock").unlink()
        proc, _ = registered_elsewhere(tmp_path, "two")
        procs.append(proc)
        with pytest.raises(Ambiguous, match="several isaacd supervisors run for this user"):
            find_socket(None, None, cwd)
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_the_config_a_found_supervisor_runs_is_its_own_never_the_defaults(world, monkeypatch):
    """Issue 39: `isaacd check-config|doctor --socket S` read the config S's supervisor runs (its status's config_path,
    made absolute against the directory it was started in), not $ISAACD_CONFIG's nor this directory's."""
    from isaacd.cli.config_target import target_config

    tmp_path, cwd = world
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("ISAACD_CONFIG", str(tmp_path / "other.toml"))  # the default points elsewhere
    started = tmp_path / "started-here"
    started.mkdir()
    sock = tmp_path / "sock" / "isaacd.sock"

    def says(config: str, pid: int | None):  # noqa: ANN202 - the supervisor's status answer, as the socket gives it
        return lambda req: {"supervisor": {"config_path": config, "pid": pid}} if req == {"cmd": "status"} else None

    socket_arg = find_socket(str(sock), None)
    assert target_config(socket_arg, says(str(started / "isaacd.toml"), None)).path == str(started / "isaacd.toml")
    proc = subprocess.Popen(["sleep", "60"], cwd=started)  # a supervisor that ran `isaacd run --config isaacd.toml`
    try:
        t = target_config(socket_arg, says("isaacd.toml", proc.pid))
        assert (t.path, t.cwd) == (str(started / "isaacd.toml"), started)
    finally:
        proc.kill()
        proc.wait()
    # a relative path whose directory cannot be read from here: said, with what to give instead
    with pytest.raises(LookupError, match=r"runs config 'isaacd.toml', a path relative.*give the file with --config"):
        target_config(socket_arg, says("isaacd.toml", proc.pid))
    # the embedded default: its ./var lies above the socket it serves
    embedded = find_socket(str(started / "var" / "isaacd.sock"), None)
    t = target_config(embedded, says(locate.EMBEDDED_DEFAULT_NAME, proc.pid))
    assert (t.path, t.cwd) == (None, started)
    # the user's one registered supervisor: its registry entry's config; $ISAACD_CONFIG is no longer in the way
    monkeypatch.delenv("ISAACD_CONFIG")
    proc, theirs = registered_elsewhere(tmp_path, "one")
    try:
        found = find_socket(None, None, cwd)
        assert found.socket == theirs
        t = target_config(found, lambda req: pytest.fail("the registry already says"))
        assert (t.path, t.cwd) == (str(tmp_path / "one" / "isaacd.toml"), tmp_path / "one")
    finally:
        proc.kill()
        proc.wait()


def test_a_config_that_is_not_ours_to_read_is_said_when_its_default_socket_is_silent(world):
    """A second user's `--config /etc/isaacd/isaacd.toml` (root's, 0600) cannot tell which socket it names: the default
    is tried, and when nothing answers there the hint says why and what to give, not only "not running"."""
    tmp_path, cwd = world
    unreadable = tmp_path / "dir-not-a-file"
    unreadable.mkdir()  # reading it fails for root as well as for another user (EISDIR)
    found = find_socket(None, str(unreadable), cwd)
    assert found.socket == locate.DEFAULT_SOCKET and found.unread is not None
    hint = not_running_hint(found)
    assert f"cannot read the config that names the supervisor's socket ({unreadable}:" in hint
    assert "--socket PATH" in hint
    readable = tmp_path / "isaacd.toml"
    readable.write_text('[supervisor]\ncontrol_socket = "run/x.sock"\n')
    found = find_socket(None, str(readable), cwd)
    assert (found.socket, found.unread, not_running_hint(found)) == (tmp_path / "run" / "x.sock", None, "")
