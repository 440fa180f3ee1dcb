"""What a user who is no admin may ask for in a job (daemon/access/limits.py, issue 32): each refusal names the key
and the fix; what is allowed passes. Pure: users are values, symlinks a fake realpath."""

from __future__ import annotations

import os

import pytest
from isaacd.access.limits import effective_limits, refusals
from isaacd.config.access import AccessConfig
from isaacd.config.schema import ConfigError, check_job_table
from isaacd.config.users import User

ALICE = User(1001, 1001, "alice", "/home/alice", ("alice", "lab", "vision"), (1001, 2000, 2001))
ACCESS = AccessConfig.model_validate({"areas": ["{home}", "/data/{user}"]})
# /home/alice/escape is a symlink to /etc; /data is itself a symlink to /mnt/data
LINKS = {"/home/alice/escape": "/etc", "/data": "/mnt/data"}


def fake_realpath(path: str) -> str:
    path = os.path.normpath(path)
    for link, target in LINKS.items():
        if path == link or path.startswith(link + "/"):
            return target + path[len(link):]
    return path


def job(**over) -> object:  # noqa: ANN003
    return check_job_table({"name": "g1", "log_root": "/data/alice/g1", **over}, "g1.toml")


def refused(access: AccessConfig = ACCESS, **over) -> dict[str, str]:  # noqa: ANN003
    return {i.key: i.message for i in refusals(job(**over), ALICE, access, realpath=fake_realpath)}


def test_a_job_inside_the_users_areas_asking_the_queue_is_allowed():
    env = {"PYTHONPATH": "/home/alice/ext:/data/alice/x", "WANDB_MODE": "offline"}
    assert refused(gpu_memory="12GiB", device="cpu", priority=0, launcher=["/opt/il/bin/python"],
                   command=None, isaaclab_dir="/opt/isaaclab", environment=env,
                   container={"volumes": ["/data/alice/assets:/assets:ro"], "ports": ["127.0.0.1:6006:6006"]}) == {}


def test_log_root_outside_the_areas_is_refused_naming_the_areas():
    msg = refused(log_root="/data/bob/g1")["jobs[0].log_root"]
    assert "/data/bob/g1 is outside your areas" in msg and "/home/alice or /mnt/data/alice" in msg


def test_a_symlink_inside_an_area_that_points_outside_is_refused():
    assert "jobs[0].log_root" in refused(log_root="/home/alice/escape/cron.d")
    assert "jobs[0].log_root" not in refused(log_root="/data/alice/run")  # /data -> /mnt/data: still hers


def test_a_home_of_slash_makes_no_area_of_the_whole_filesystem():
    daemon = User(2, 2, "daemon", "/", ("daemon",), (2,))
    got = {i.key for i in refusals(job(log_root="/etc/cron.d"), daemon, AccessConfig(), realpath=fake_realpath)}
    assert "jobs[0].log_root" in got
    nohome = User(3, 3, "ghost", "", ("ghost",), (3,))
    assert "jobs[0].log_root" in {i.key for i in refusals(job(log_root="/tmp/x"), nohome, AccessConfig(),
                                                          realpath=fake_realpath)}


def test_a_relative_log_root_is_refused():
    assert "jobs[0].log_root" in refused(log_root="logs")


def test_a_volume_outside_the_areas_or_a_named_volume_is_refused():
    got = refused(container={"volumes": ["/data/alice/a:/a", "/etc:/host-etc:ro", "shared:/cache"]})
    assert set(got) == {"jobs[0].container.volumes[1]", "jobs[0].container.volumes[2]"}
    assert "/etc is outside your areas" in got["jobs[0].container.volumes[1]"]
    assert "named volume" in got["jobs[0].container.volumes[2]"]


@pytest.mark.parametrize("key", ["LD_PRELOAD", "LD_AUDIT", "GCONV_PATH", "BASH_ENV", "PYTHONSTARTUP"])
def test_environment_keys_that_load_code_are_refused(key):
    msg = refused(environment={key: "/home/alice/x"})[f"jobs[0].environment.{key}"]
    assert msg.endswith(f"remove {key}")


def test_search_paths_outside_the_areas_are_refused_inside_them_allowed():
    got = refused(environment={"LD_LIBRARY_PATH": "/home/alice/lib:/tmp/lib", "PYTHONPATH": "/home/alice/src",
                               "PYTHONHOME": "/srv/py"})
    assert set(got) == {"jobs[0].environment.LD_LIBRARY_PATH", "jobs[0].environment.PYTHONHOME"}
    assert got["jobs[0].environment.LD_LIBRARY_PATH"].startswith("/tmp/lib is outside your areas")


def test_in_a_container_search_paths_name_the_image_but_loader_keys_are_still_refused():
    got = refused(runtime="podman", environment={"PYTHONPATH": "/workspace/isaaclab/source"},
                  container={"environment": {"LD_PRELOAD": "/x.so"}})
    assert set(got) == {"jobs[0].container.environment.LD_PRELOAD"}


def test_priority_above_the_users_max_priority_is_refused():
    assert refused(priority=0) == {}
    msg = refused(priority=5)["jobs[0].priority"]
    assert msg.startswith("5 is above your max_priority (0)")


def test_preemptible_false_needs_the_right():
    assert "jobs[0].preemptible" in refused(preemptible=False)
    allowed = AccessConfig.model_validate({"areas": ["/data/{user}"], "users": {"alice": {"non_preemptible": True}}})
    assert refused(allowed, preemptible=False) == {}


def test_a_non_admin_may_not_choose_the_containers_uid():
    assert "remove user" in refused(container={"user": "0"})["jobs[0].container.user"]


def test_a_job_may_not_be_given_to_someone_else():
    assert "jobs[0].owner" in refused(owner="bob") and refused(owner="alice") == {}


def test_naming_gpus_is_refused_asking_for_them_is_not():
    assert "ask with gpus = N" in refused(gpus=[0])["jobs[0].gpus"]
    assert "jobs[0].gpus" in refused(gpus="all")
    assert "jobs[0].device" in refused(device="cuda:1")
    assert refused(gpus=2) == {} and refused(gpus=1, device="cpu") == {}


def test_a_ray_job_is_refused():
    ray = check_job_table({"name": "g1", "log_root": "/data/alice/g1", "runtime": "ray"}, "g1.toml", {})
    assert [i.key for i in refusals(ray, ALICE, ACCESS, realpath=fake_realpath)] == ["jobs[0].runtime"]


def test_a_file_backup_outside_the_areas_is_refused():
    assert "jobs[0].backup.url" in refused(backup={"url": "file:///etc/backups"})
    assert refused(backup={"url": "file:///data/alice/backups"}) == {}


def test_a_privileged_host_port_is_refused():
    got = refused(container={"ports": ["127.0.0.1:80:8080", "22", "6006:6006"]})
    assert set(got) == {"jobs[0].container.ports[0]", "jobs[0].container.ports[1]"}


@pytest.mark.parametrize("key,value", [("privileged", True), ("cap_add", ["SYS_ADMIN"]), ("network", "host"),
                                       ("pid", "host")])
def test_the_schema_has_no_privileged_capability_host_network_or_pid_key(key, value):
    with pytest.raises(ConfigError) as err:
        check_job_table({"name": "g1", "container": {key: value}}, "g1.toml")
    assert f"container.{key}: unknown key" in str(err.value)


def test_limits_merge_defaults_then_groups_in_their_order_then_the_user():
    access = AccessConfig.model_validate({
        "defaults": {"max_priority": 1, "gpus": 1},
        "groups": {"vision": {"max_priority": 3, "gpus": 8}, "lab": {"max_priority": 5, "non_preemptible": True}},
        "users": {}})
    got = effective_limits(ALICE, access)
    # groups apply in [access] groups' order (vision, then lab), whatever the order of the user's groups
    assert (got.max_priority, got.non_preemptible) == (5, True)
    assert got.gpus == 1  # a group's quota is the group's own (its members together), not each member's
    access = access.model_copy(update={"users": {"alice": AccessConfig.model_validate(
        {"users": {"alice": {"max_priority": 2, "gpus": 3}}}).users["alice"]}})
    got = effective_limits(ALICE, access)
    assert (got.max_priority, got.gpus) == (2, 3)
    bare = effective_limits(ALICE, AccessConfig.model_validate({"defaults": {}}))
    assert (bare.max_priority, bare.non_preemptible, bare.gpus) == (0, False, None)


def test_object_storage_backups_are_refused_for_users_who_are_no_admins():
    """The supervisor uploads and prunes with its own credentials: a user's prefix could be anyone's."""
    job = check_job_table({"name": "j", "log_root": "/data/alice/j", "backup": {"url": "s3://lab-bucket/isaacd/j"}},
                          "j.toml")
    issues = refusals(job, ALICE, AccessConfig(areas=["/data/{user}"]), realpath=lambda p: p)
    assert [i.key for i in issues] == ["jobs[0].backup.url"] and "supervisor's credentials" in issues[0].message
