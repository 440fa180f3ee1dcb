"""A warm spare's container as ContainerSpec.from_launch builds it (LaunchSpec.spare): its own name, the spare's
command, no published ports, the spare's dirs mounted at the same paths, its own settings and nothing else of the
host's environment. Also what an attempt's container takes of the shim's snapshot settings. No Podman needed: the
spare container running and taking over is test_podman_runtime.py's and test_isaaclab3_podman.py's."""

from __future__ import annotations

from pathlib import Path

from isaacd.config.schema import parse_config
from isaacd.runtimes.base import LaunchSpec
from isaacd.runtimes.container_spec import ContainerSpec, container_name, is_spare_container, spare_container_name
from isaacd_trainer.shim_protocol import (LAUNCH_TOKEN_ENV, SHIM_EVENTS_ENV, SNAPSHOT_EVERY_ENV, SPARE_CONTROL_ENV,
                                          SPARE_FLAG)

TOKEN = "0123456789abcdef0123456789abcdef"


def _job(tmp_path: Path):
    toml = f"""
[[jobs]]
name = "j"
runtime = "podman"
log_root = "{tmp_path}/logs"
[jobs.container]
image = "/:O"
ports = ["6006"]
"""
    return parse_config(toml, "test", tmp_path).jobs[0]


def test_a_spare_container_has_its_own_name_command_and_mounts_and_no_ports(tmp_path):
    job = _job(tmp_path)
    spare_dir, events_dir = tmp_path / "state" / "spare" / "j", tmp_path / "state" / "shim" / "j"
    env = {SPARE_CONTROL_ENV: str(spare_dir / "control.fifo"), SHIM_EVENTS_ENV: str(spare_dir / "events.jsonl"),
           LAUNCH_TOKEN_ENV: TOKEN, "HOSTS_OWN_SECRET": "never in a container", SNAPSHOT_EVERY_ENV: "1"}
    argv = ("python", "/opt/isaacd/isaacd_shim.py", SPARE_FLAG)
    spec = LaunchSpec(job=job, argv=[], trainer_args=[], env=env, cwd=Path("/"), log_path=tmp_path / "x.log",
                      token=TOKEN, spare=True, container_argv=argv, same_path_mounts=(spare_dir, events_dir))
    cs = ContainerSpec.from_launch(spec, TOKEN, 3)
    assert cs.name == spare_container_name("j", TOKEN) == "isaaclab-job-j-spare-0123456789ab"
    assert is_spare_container("j", cs.name) and not is_spare_container("j", container_name("j"))
    assert not is_spare_container("j", spare_container_name("j2", TOKEN))  # another job's spare
    assert [cs.entrypoint, *cs.args] == list(argv)
    assert cs.ports == []  # the attempt holds the job's ports (a job with ports gets no spare: spare_fits)
    inside = {dst: src for src, dst, _ in cs.volumes}
    assert inside[str(spare_dir)] == str(spare_dir) and inside[str(events_dir)] == str(events_dir)
    assert cs.env[SPARE_CONTROL_ENV] == env[SPARE_CONTROL_ENV] and cs.env[LAUNCH_TOKEN_ENV] == TOKEN
    assert "HOSTS_OWN_SECRET" not in cs.env
    assert cs.labels["isaacd.token"] == TOKEN and cs.labels["isaacd.job"] == "j"


def test_an_attempts_container_takes_the_snapshot_settings_with_its_side_channel(tmp_path):
    job = _job(tmp_path)
    events = tmp_path / "state" / "shim" / "j" / "attempt-1.jsonl"
    spec = LaunchSpec(job=job, argv=[], trainer_args=[], cwd=Path("/"), log_path=tmp_path / "x.log", token=TOKEN,
                      env={SHIM_EVENTS_ENV: str(events), SNAPSHOT_EVERY_ENV: "5", "HOSTS_OWN_SECRET": "x"})
    cs = ContainerSpec.from_launch(spec, TOKEN, 1)
    assert cs.name == container_name("j") and cs.ports == ["127.0.0.1:6006:6006"]
    assert cs.env[SNAPSHOT_EVERY_ENV] == "5" and cs.env[SHIM_EVENTS_ENV] == str(events)
    assert "HOSTS_OWN_SECRET" not in cs.env and LAUNCH_TOKEN_ENV not in cs.env
