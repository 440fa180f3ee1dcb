"""Compile caches end to end (issue 21 part 2): a real supervisor hands its trainer WARP_CACHE_PATH, a process as
the host directory `<state_dir>/caches/<job>/warp`, a Podman container as a mount of that same directory.

`command` jobs stand in for the trainer (the built-in trainer has no Warp, so it gets no cache): they write what they
see and wait to be stopped."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from helpers import builtin_job, wait_for, write_config
from test_podman_runtime import cleanup_containers, podman_url  # noqa: F401 - fixtures

PROBE = 'echo "$WARP_CACHE_PATH" > {out}/warp.txt && touch "$WARP_CACHE_PATH/written-by-trainer" && exec sleep 1000'


def test_a_process_trainer_is_handed_the_jobs_warp_cache(tmp_path, supervisor_factory):
    out = tmp_path / "out"
    out.mkdir()
    cfg = write_config(tmp_path, builtin_job("pc", command=["sh", "-c", PROBE.format(out=out)]))
    sup = supervisor_factory(cfg)
    warp = tmp_path / "state" / "caches" / "pc" / "warp"
    wait_for(lambda: (warp / "written-by-trainer").exists(), 30, what="the trainer's file in its Warp cache")
    assert (out / "warp.txt").read_text().strip() == str(warp)
    caches = wait_for(lambda: sup.job("pc")["compile_caches"], 10, what="the caches in status")
    assert caches[0]["name"] == "warp" and caches[0]["path"] == str(warp)
    assert "pc compile caches in" in sup.cli("status").stdout


@pytest.mark.podman
def test_a_container_trainer_writes_into_the_hosts_warp_cache(tmp_path, podman_url, cleanup_containers,  # noqa: F811
                                                              supervisor_factory):
    name = f"cc{uuid.uuid4().hex[:6]}"
    cleanup_containers.append(name)
    logs = tmp_path / "logs"  # mounted at the same path: the probe reports there
    jobs = builtin_job(name, runtime="podman", log_root=str(logs), command=["sh", "-c", PROBE.format(out=logs)],
                       container={"image": "/:O", "shm_size": "64m"})
    supervisor_factory(write_config(tmp_path, jobs))
    host = tmp_path / "state" / "caches" / name / "warp"
    wait_for(lambda: (host / "written-by-trainer").exists(), 120, what="the container's file in the host's cache")
    assert (logs / "warp.txt").read_text().strip() == "/var/cache/isaacd/warp"
    mounts = subprocess.run(["podman", "inspect", "-f", "{{range .Mounts}}{{.Source}}={{.Destination}} {{end}}",
                             f"isaaclab-job-{name}"], capture_output=True, text=True).stdout.split()
    assert f"{host}=/var/cache/isaacd/warp" in mounts
    assert not any(m.endswith("=/root/.cache/ov") for m in mounts)  # a command job: no Kit caches
