"""doctor's memlock check on hosts without CAP_SYS_RESOURCE (seen on the H200 test VM, issue 15):
an unlimited hard limit is passed to containers as memlock=-1 and is no reason to warn."""

from __future__ import annotations

import resource
from pathlib import Path

from isaacd.cli import doctor
from isaacd.config.schema import parse_config
from isaacd.runtimes import host

CFG = """
[[jobs]]
name = "c"
runtime = "podman"
device = "cuda:0"
gpus = [0]
[jobs.container]
image = "/:O"
"""


def _check(monkeypatch, hard):
    monkeypatch.setattr(doctor, "has_cap_sys_resource", lambda: False)
    monkeypatch.setattr(host, "has_cap_sys_resource", lambda: False)
    monkeypatch.setattr(resource, "getrlimit", lambda which: (hard, hard))
    cfg = parse_config(CFG, "test", Path("/tmp"))
    return doctor.check_memlock(cfg), host.memlock_ulimit()


def test_unlimited_hard_limit_passes(monkeypatch):
    check, ulimit = _check(monkeypatch, resource.RLIM_INFINITY)
    assert ulimit == "memlock=-1:-1"
    assert check.status == "pass", check


def test_finite_hard_limit_warns(monkeypatch):
    check, ulimit = _check(monkeypatch, 8388608)
    assert ulimit == "memlock=8388608:8388608"
    assert check.status == "warn" and "8388608" in check.detail
