"""Where a job's compile caches live and how its trainer is told (daemon/caches/compile_caches.py).

The unwritable-directory case is the path-is-a-file test: these tests run as root, for whom every mode is writable."""

from __future__ import annotations

from isaacd.caches import compile_caches as cc


def test_caches_are_per_job_by_default_and_per_image_when_asked(tmp_path):
    assert cc.scope_dir(tmp_path, "cartpole", "job", "nvcr.io/nvidia/isaac-lab:2.3.0") == tmp_path / "caches" / "cartpole"
    shared = cc.scope_dir(tmp_path, "cartpole", "image", "nvcr.io/nvidia/isaac-lab:2.3.0")
    assert shared == tmp_path / "caches" / "images" / "nvcr.io_nvidia_isaac-lab_2.3.0"
    assert cc.scope_dir(tmp_path, "other", "image", "nvcr.io/nvidia/isaac-lab:2.3.0") == shared
    assert cc.scope_dir(tmp_path, "cartpole", "image", None) == tmp_path / "caches" / "cartpole"  # process runtime
    assert cc.scope_dir(tmp_path, "cartpole", "off", "img") is None


def test_a_process_trainer_gets_the_host_warp_cache_and_no_kit_mounts(tmp_path):
    dirs = cc.cache_dirs(tmp_path / "j", in_container=False, kit=True)
    assert [d.name for d in dirs] == ["warp"]
    assert cc.trainer_env(dirs, {}) == {"WARP_CACHE_PATH": str(tmp_path / "j" / "warp")}
    assert cc.container_volumes(dirs) == []


def test_a_container_of_an_isaac_sim_image_gets_warp_and_the_four_kit_caches_where_upstream_keeps_them(tmp_path):
    dirs = cc.cache_dirs(tmp_path / "j", in_container=True, kit=True)
    vols = {target: host for host, target, _ in cc.container_volumes(dirs)}
    assert set(vols) == {"/var/cache/isaacd/warp", "/isaac-sim/kit/cache", "/root/.cache/ov",
                         "/root/.cache/nvidia/GLCache", "/root/.nv/ComputeCache"}
    assert vols["/root/.nv/ComputeCache"] == str(tmp_path / "j" / "kit" / "computecache")
    assert cc.trainer_env(dirs, {}) == {"WARP_CACHE_PATH": "/var/cache/isaacd/warp"}
    kitless = cc.cache_dirs(tmp_path / "j", in_container=True, kit=False)
    assert [t for _, t, _ in cc.container_volumes(kitless)] == ["/var/cache/isaacd/warp", "/var/cache/isaacd/cuda"]


def test_a_container_of_a_kitless_image_keeps_the_cuda_jit_cache_and_the_jobs_own_setting_wins(tmp_path):
    """The CUDA driver's JIT cache (~/.nv/ComputeCache by default) is gone with each container: a kit-less image's
    trainer is pointed at the job's directory by CUDA_CACHE_PATH (Kit images get it as ComputeCache above)."""
    kitless = cc.cache_dirs(tmp_path / "j", in_container=True, kit=False)
    assert cc.trainer_env(kitless, {}) == {"WARP_CACHE_PATH": "/var/cache/isaacd/warp",
                                           "CUDA_CACHE_PATH": "/var/cache/isaacd/cuda"}
    assert cc.trainer_env(kitless, {"CUDA_CACHE_PATH": "/scratch/cuda"}) == {"WARP_CACHE_PATH": "/var/cache/isaacd/warp"}
    assert "cuda" not in [d.name for d in cc.cache_dirs(tmp_path / "j", in_container=False, kit=False)]


def test_the_jobs_own_warp_cache_path_wins(tmp_path):
    dirs = cc.cache_dirs(tmp_path, in_container=False, kit=False)
    assert cc.trainer_env(dirs, {"WARP_CACHE_PATH": "/scratch/warp"}) == {}


def test_prepare_creates_the_dirs_and_names_one_it_cannot_write(tmp_path):
    dirs = cc.cache_dirs(tmp_path / "caches" / "j", in_container=True, kit=True)
    assert cc.prepare(dirs) is None
    assert all(d.host.is_dir() for d in dirs)


def test_prepare_names_a_cache_path_that_is_a_file(tmp_path):
    (tmp_path / "j").write_text("not a directory")
    problem = cc.prepare(cc.cache_dirs(tmp_path / "j", in_container=False, kit=False))
    assert problem is not None and "warp compile cache" in problem and str(tmp_path / "j" / "warp") in problem


def test_size_counts_the_files_under_a_cache(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "x.bin").write_bytes(b"1" * 1000)
    (tmp_path / "a" / "b" / "y.bin").write_bytes(b"2" * 24)
    assert cc.size_bytes(tmp_path / "a") == 1024
    assert cc.size_bytes(tmp_path / "missing") == 0
