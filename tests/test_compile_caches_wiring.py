"""The compile caches wired in (issue 21 part 2): the `compile_cache` key, which jobs get which caches, the trainer's
WARP_CACHE_PATH (launch env, containers), the launch's refusal of an unwritable directory, doctor, status, metrics.

No process or container runs here: tests/test_compile_caches_e2e.py has those."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from isaacd.caches import compile_caches as cc
from isaacd.cli import doctor
from isaacd.runtimes import trainer_command
from isaacd.attempt.planner import LaunchPlan, LaunchPlanner
from isaacd.attempt.setting import JobSetting
from isaacd.caches.sizes import SizeSampler
from isaacd.config.schema import ConfigError, parse_config
from isaacd.jobs.messages import LaunchRefused, Settle
from isaacd.jobs.model import LaunchIntent
from isaacd.metrics.collector import IsaacdCollector
from isaacd.cli.render import format_status
from isaacd.runtimes.base import LaunchSpec
from isaacd.runtimes.container_spec import ContainerSpec
from isaacd.status.types import CompileCacheStatus, JobStatus, Status
from isaacd.attempt.job_status import compile_cache_status
from isaacd.history.store import JobHistory

from job_fakes import FakeClock

IMAGE_23 = "nvcr.io/nvidia/isaac-lab:2.3.2"


def job_of(tmp_path: Path, body: str, container: str = ""):
    toml = f'[supervisor]\nstate_dir = "{tmp_path}/state"\n[[jobs]]\nname = "cp"\nlog_root = "logs"\n{body}\n'
    if container:
        toml += f"[jobs.container]\n{container}\n"
    return parse_config(toml, "t.toml", tmp_path).jobs[0]


def names(dirs: list[cc.CacheDir]) -> list[str]:
    return [d.name for d in dirs]


# ---- the key ------------------------------------------------------------------------------------
def test_compile_cache_defaults_to_job_and_a_wrong_value_names_the_key(tmp_path):
    assert job_of(tmp_path, "").compile_cache == "job"
    assert job_of(tmp_path, 'compile_cache = "image"').compile_cache == "image"
    with pytest.raises(ConfigError) as info:
        job_of(tmp_path, 'compile_cache = "host"')
    msg = str(info.value)
    assert "compile_cache" in msg and '"job"' in msg and '"image"' in msg and '"off"' in msg


# ---- which jobs get which caches ------------------------------------------------------------------
def test_the_builtin_trainer_gets_none_but_a_command_job_gets_warp(tmp_path):
    state = tmp_path / "state"
    assert cc.for_job(job_of(tmp_path, ""), state) == []  # torch only: no Warp to cache
    dirs = cc.for_job(job_of(tmp_path, 'command = ["sleep", "9"]'), state)
    assert dirs == [cc.CacheDir("warp", state / "caches" / "cp" / "warp", None)]


def test_a_train_script_job_in_an_isaac_lab_image_gets_warp_and_kit(tmp_path):
    job = job_of(tmp_path, 'runtime = "podman"\nworkflow = "rsl_rl"', f'image = "{IMAGE_23}"')
    assert cc.kit_image(job)
    dirs = cc.for_job(job, tmp_path / "state")
    assert names(dirs) == ["warp", "kit", "ov", "glcache", "computecache"]
    assert {d.container for d in dirs} == {"/var/cache/isaacd/warp", *cc.KIT_TARGETS.values()}


@pytest.mark.parametrize("body,container", [
    # the kit-less 3.x form: the package in the image's venv, no checkout named
    ('runtime = "podman"\nworkflow = "rsl_rl"\nlauncher = ["/opt/isaaclab-venv/bin/python"]',
     'image = "nvcr.io/nvidia/isaac-lab:3.0.0"'),
    ('runtime = "systemd"\nworkflow = "rsl_rl"\nisaaclab_version = "3.0"', 'image = "registry.local/isaaclab:kitless"'),
    ('runtime = "podman"\ncommand = ["python", "train.py"]', f'image = "{IMAGE_23}"'),  # isaacd cannot tell
])
def test_kit_less_images_and_command_containers_get_warp_and_the_cuda_jit_cache_no_kit(tmp_path, body, container):
    job = job_of(tmp_path, body, container)
    assert not cc.kit_image(job)
    assert names(cc.for_job(job, tmp_path / "state")) == ["warp", "cuda"]


def test_a_process_runtime_job_never_gets_kit_mounts_and_off_gets_nothing(tmp_path):
    ck = tmp_path / "IsaacLab"
    job = job_of(tmp_path, f'workflow = "rsl_rl"\nisaaclab_dir = "{ck}"')
    assert not cc.kit_image(job) and names(cc.for_job(job, tmp_path / "state")) == ["warp"]
    off = job_of(tmp_path, 'command = ["x"]\ncompile_cache = "off"')
    assert cc.for_job(off, tmp_path / "state") == []


def test_image_scope_shares_one_directory_per_image_and_ray_containers_get_none(tmp_path):
    a = job_of(tmp_path, 'runtime = "podman"\nworkflow = "rsl_rl"\ncompile_cache = "image"', f'image = "{IMAGE_23}"')
    assert cc.for_job(a, tmp_path / "s")[0].host == tmp_path / "s" / "caches" / "images" / \
        "nvcr.io_nvidia_isaac-lab_2.3.2" / "warp"
    ray = a.model_copy(update={"runtime": "ray", "ray": a.ray.model_copy(update={"container": True})})
    assert ray.in_container
    assert cc.for_job(ray, tmp_path / "s") == []


# ---- the trainer's environment ----------------------------------------------------------------------
def test_launch_trainer_env_carries_warp_cache_path_and_the_jobs_own_wins(tmp_path):
    job = job_of(tmp_path, 'command = ["x"]')
    dirs = cc.for_job(job, tmp_path / "state")
    assert trainer_command.trainer_env(job, caches=dirs)["WARP_CACHE_PATH"] == str(tmp_path / "state/caches/cp/warp")
    assert "WARP_CACHE_PATH" not in trainer_command.trainer_env(job) or os.environ.get("WARP_CACHE_PATH")  # no caches: untouched
    own = job_of(tmp_path, 'command = ["x"]\nenvironment = { WARP_CACHE_PATH = "/scratch/warp" }')
    assert trainer_command.trainer_env(own, caches=cc.for_job(own, tmp_path / "state"))["WARP_CACHE_PATH"] == "/scratch/warp"


def container_spec(job, caches) -> ContainerSpec:
    ls = LaunchSpec(job=job, argv=[], trainer_args=["--x"], env={}, cwd=Path("/"), log_path=Path("/tmp/x.log"),
                    caches=tuple(caches))
    return ContainerSpec.from_launch(ls, "tok", 1)


def test_a_container_mounts_the_caches_and_its_warp_cache_path_is_the_mount(tmp_path):
    job = job_of(tmp_path, 'runtime = "podman"\nworkflow = "rsl_rl"', f'image = "{IMAGE_23}"')
    dirs = cc.for_job(job, tmp_path / "state")
    cs = container_spec(job, dirs)
    assert (str(tmp_path / "state/caches/cp/warp"), "/var/cache/isaacd/warp", "rw") in cs.volumes
    assert (str(tmp_path / "state/caches/cp/kit/ov"), "/root/.cache/ov", "rw") in cs.volumes
    assert cs.env["WARP_CACHE_PATH"] == "/var/cache/isaacd/warp"
    assert "-v" in cs.podman_run_options() and "Volume=" + str(tmp_path / "state/caches/cp/warp") + \
        ":/var/cache/isaacd/warp:rw" in cs.quadlet_lines()
    own = job_of(tmp_path, 'runtime = "podman"\nworkflow = "rsl_rl"',
                 f'image = "{IMAGE_23}"\nenvironment = {{ WARP_CACHE_PATH = "/mine" }}')
    assert container_spec(own, cc.for_job(own, tmp_path / "state")).env["WARP_CACHE_PATH"] == "/mine"
    assert "WARP_CACHE_PATH" not in container_spec(job, []).env  # compile_cache = "off"
    mine = job_of(tmp_path, 'runtime = "podman"\nworkflow = "rsl_rl"',
                  f'image = "{IMAGE_23}"\nvolumes = ["/data/kit:/isaac-sim/kit/cache"]')
    kit = [v for v in container_spec(mine, cc.for_job(mine, tmp_path / "state")).volumes
           if v[1] == "/isaac-sim/kit/cache"]
    assert kit == [("/data/kit", "/isaac-sim/kit/cache", "")]  # the user's own volume at that place wins


# ---- the launch: prepared, or refused naming the directory and the key -----------------------------
def planner(job, state: Path) -> LaunchPlanner:
    return LaunchPlanner(JobSetting.of(job), "process", state, FakeClock(), lambda *a, **k: None,
                         lambda program: None, lambda: None)


def test_the_launch_creates_the_cache_and_hands_it_to_the_trainer(tmp_path):
    job = job_of(tmp_path, 'command = ["sleep", "9"]\nspare = false')
    plan = planner(job, tmp_path / "state").plan(LaunchIntent(), JobHistory("cp"), job.num_envs)
    assert isinstance(plan, LaunchPlan)
    warp = tmp_path / "state" / "caches" / "cp" / "warp"
    assert warp.is_dir() and plan.spec.env["WARP_CACHE_PATH"] == str(warp)
    assert [d.host for d in plan.spec.caches] == [warp]


def test_a_cache_isaacd_cannot_create_refuses_the_launch_naming_it_and_the_key(tmp_path):
    job = job_of(tmp_path, 'command = ["sleep", "9"]\nspare = false')
    (tmp_path / "state" / "caches").mkdir(parents=True)
    (tmp_path / "state" / "caches" / "cp").write_text("in the way")  # root may write anywhere: a file blocks mkdir
    refused = planner(job, tmp_path / "state").plan(LaunchIntent(), JobHistory("cp"), job.num_envs)
    assert isinstance(refused, LaunchRefused) and refused.settle == Settle.FAILED
    assert "compile_cache" in refused.reason and str(tmp_path / "state/caches/cp/warp") in refused.reason


def test_a_container_jobs_caches_are_handed_to_a_numeric_container_user(tmp_path):
    job = job_of(tmp_path, 'runtime = "podman"\ncommand = ["sleep", "9"]\nspare = false',
                 'image = "/:O"\nuser = "1000:1000"')
    plan = planner(job, tmp_path / "state").plan(LaunchIntent(), JobHistory("cp"), job.num_envs)
    assert isinstance(plan, LaunchPlan)
    warp = tmp_path / "state" / "caches" / "cp" / "warp"
    if os.geteuid() == 0:  # only root may chown
        assert (warp.stat().st_uid, warp.stat().st_gid) == (1000, 1000)


# ---- sizes, status, metrics, doctor ------------------------------------------------------------------
class Spawned:
    def __init__(self) -> None:
        self.calls: list = []

    def __call__(self, fn) -> None:
        self.calls.append(fn)


def test_sizes_are_walked_off_the_caller_at_most_once_a_minute(tmp_path):
    now = [100.0]
    walked: list[Path] = []
    spawn = Spawned()
    s = SizeSampler(every=60, clock=lambda: now[0], walk=lambda p: walked.append(p) or 7, spawn=spawn)
    assert s.size(tmp_path) is None and len(spawn.calls) == 1 and walked == []  # the caller never walks
    assert s.size(tmp_path) is None and len(spawn.calls) == 1  # one walk at a time
    spawn.calls[0]()
    assert s.size(tmp_path) == 7 and len(spawn.calls) == 1  # measured; the next not before 60 s
    now[0] += 61
    assert s.size(tmp_path) == 7 and len(spawn.calls) == 2


def test_status_shows_where_the_caches_are_and_how_big(tmp_path):
    job = job_of(tmp_path, 'command = ["x"]')
    s = SizeSampler(spawn=lambda fn: fn())
    s.size(tmp_path / "state/caches/cp/warp")
    caches = compile_cache_status(job, tmp_path / "state", s)
    assert caches == (CompileCacheStatus("warp", str(tmp_path / "state/caches/cp/warp"), 0),)
    row = JobStatus(name="cp", state="running", runtime="process", compile_caches=(
        CompileCacheStatus("warp", "/var/lib/isaacd/caches/cp/warp", 3 * 2**20),
        CompileCacheStatus("ov", "/var/lib/isaacd/caches/cp/kit/ov")))
    text = format_status(Status(jobs=(row,)), now=0)
    assert "cp compile caches in /var/lib/isaacd/caches/cp: warp 3.0 MiB, ov ?" in text
    assert "compile caches" not in format_status(Status(jobs=(JobStatus(name="b", state="running"),)), now=0)


def test_metrics_export_one_gauge_per_measured_cache():
    row = JobStatus(name="cp", state="running", compile_caches=(CompileCacheStatus("warp", "/c/warp", 4096),
                                                                CompileCacheStatus("ov", "/c/kit/ov")))
    fams = {f.name: f for f in IsaacdCollector(lambda: Status(jobs=(row,))).collect()}
    samples = fams["isaacd_job_compile_cache_bytes"].samples
    assert [(s.labels, s.value) for s in samples] == [({"job": "cp", "cache": "warp"}, 4096.0)]  # ov: not measured


def test_doctor_lists_each_jobs_caches_and_fails_an_unwritable_one(tmp_path):
    cfg = parse_config(f'[supervisor]\nstate_dir = "{tmp_path}/state"\n[gpu]\nsource = "none"\n'
                       '[[jobs]]\nname = "cmd"\ncommand = ["x"]\nlog_root = "logs"\n'
                       '[[jobs]]\nname = "toy"\nlog_root = "logs"\n'
                       '[[jobs]]\nname = "blocked"\ncommand = ["x"]\nlog_root = "logs"\n', "t.toml", tmp_path)
    (tmp_path / "state" / "caches").mkdir(parents=True)
    (tmp_path / "state" / "caches" / "blocked").write_text("a file where the directory goes")
    checks = {c.name: c for c in doctor.check_compile_caches(cfg)}
    assert checks["compile-cache:cmd"].status == "pass"
    assert f"warp {tmp_path}/state/caches/cmd/warp (0.0 MiB)" in checks["compile-cache:cmd"].detail
    assert not (tmp_path / "state" / "caches" / "cmd").exists()  # doctor looks, it creates nothing
    assert "compile-cache:toy" not in checks  # the built-in trainer has no Warp: no line
    bad = checks["compile-cache:blocked"]
    assert bad.status == "fail" and "caches/blocked/warp" in bad.detail and "compile_cache" in bad.fix


def test_the_warm_spare_is_started_with_the_jobs_warp_cache(tmp_path):
    """The spare (spare.py `_start`) builds its env with trainer_command.trainer_env: a booted spare imports Warp at boot."""
    from os_fakes import FakeOs
    from test_spare_unit import acted

    from isaacd.jobs.model import JobState
    from isaacd.runtimes.process import ProcessRuntime
    from isaacd.attempt.spare import SpareKeeper
    from isaacd.workflows.launcher import Program

    job = parse_config(f'[[jobs]]\nname = "p"\nlog_root = "{tmp_path}/logs"\ncommand = ["x"]\n', "t.toml",
                       tmp_path).jobs[0]
    kernel = FakeOs()
    kernel.add(1, pid=100)
    keeper = SpareKeeper(job, ProcessRuntime(kernel), tmp_path / "state", lambda *a, **k: None, oscalls=kernel)
    program = Program(prefix=["python3", "shim.py", "train.py"], suffix=[], shim=True,
                      spare_head=["python3", "shim.py"], target=("train.py",))
    acted(keeper, keeper.tick(JobState.RUNNING, program, 10.0))
    (call,) = kernel.spawns
    assert call.env["WARP_CACHE_PATH"] == str(tmp_path / "state" / "caches" / "p" / "warp")
