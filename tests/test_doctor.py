"""`isaacd doctor` on this host (no GPU, no NVIDIA driver, Podman 4.3, systemd not PID 1): the GPU
checks must fail with a fix (or skip when no job needs a GPU), the rest must describe the host."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest

from isaacd.cli import doctor
from isaacd.config.schema import parse_config

REPO = Path(__file__).resolve().parents[1]


def cfg_of(tmp_path: Path, jobs: str, extra: str = ""):
    return parse_config(f'[supervisor]\nstate_dir = "{tmp_path}/state"\n[gpu]\nsource = "none"\n{extra}\n{jobs}',
                        "test", tmp_path)


CPU_JOB = '[[jobs]]\nname = "cpu"\nlog_root = "logs"\n'
GPU_JOB = """
[[jobs]]
name = "gpu"
runtime = "systemd"
device = "cuda:0"
gpus = [0, "GPU-11111111-2222-3333-4444-555555555555"]
log_root = "logs"
[jobs.container]
image = "nvcr.io/nvidia/isaac-lab:2.3.2"
"""


def by_name(checks):
    return {c.name: c for c in checks}


def test_cpu_only_config_skips_gpu_checks(tmp_path):
    c = by_name(doctor.collect(cfg_of(tmp_path, CPU_JOB)))
    assert c["nvidia_driver"].status == "skip" and c["cdi_spec"].status == "skip"
    assert c["nvml"].status == "skip"  # no GPU job and [gpu] source = "none"
    assert c["disk:cpu"].status in ("pass", "warn") and "GiB free" in c["disk:cpu"].detail
    # nothing about a CPU-only config can fail, whatever the host; the GPU and container checks have
    # nothing to check; the workflow resolves; what the host decides (podman, shm, disks, listeners) at
    # most warns, with a fix
    assert set(c) == {"nvidia_driver", "nvml", "cdi_spec", "podman", "quadlet", "systemd", "memlock", "shm",
                      "disk:cpu", "disk:state", "container_ports", "listeners", "workflow:cpu", "task:cpu"}
    assert {n: c[n].status for n in ("cdi_spec", "memlock", "container_ports", "workflow:cpu", "task:cpu")} == {
        "cdi_spec": "skip", "memlock": "skip", "container_ports": "skip", "workflow:cpu": "pass", "task:cpu": "pass"}
    for chk in c.values():
        assert chk.status != "fail" and not chk.detail.startswith("check crashed"), chk
        if chk.status == "warn":
            assert chk.fix, chk


def test_gpu_job_without_a_driver_fails_with_fixes(tmp_path, monkeypatch):
    monkeypatch.setattr(doctor, "CDI_DIRS", (tmp_path / "no-cdi",))
    checks = doctor.collect(cfg_of(tmp_path, GPU_JOB))
    c = by_name(checks)
    if doctor.driver_version() is None:  # this machine: no NVIDIA driver
        assert c["nvidia_driver"].status == "fail" and "nvidia-smi" in c["nvidia_driver"].fix
        assert c["nvml"].status == "fail" and "libnvidia-ml" in c["nvml"].fix
    assert c["cdi_spec"].status == "fail" and "nvidia-ctk cdi generate" in c["cdi_spec"].fix
    assert doctor.run_doctor(cfg_of(tmp_path, GPU_JOB), as_json=False) == 1


def test_driver_too_old_for_the_image(tmp_path, monkeypatch):
    monkeypatch.setattr(doctor, "driver_version", lambda: (550, 127, 5))
    c = doctor.check_driver(cfg_of(tmp_path, GPU_JOB))
    assert c.status == "fail" and "580.65.06" in c.detail and "Isaac Lab 2.3" in c.detail
    monkeypatch.setattr(doctor, "driver_version", lambda: (580, 95, 5))
    assert doctor.check_driver(cfg_of(tmp_path, GPU_JOB)).status == "pass"
    old = GPU_JOB.replace("isaac-lab:2.3.2", "isaac-lab:2.1.0")
    monkeypatch.setattr(doctor, "driver_version", lambda: (550, 127, 5))
    assert doctor.check_driver(cfg_of(tmp_path, old)).status == "pass"


CDI_YAML = """---
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: GPU-11111111-2222-3333-4444-555555555555
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: all
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
containerEdits:
  env:
  - NVIDIA_VISIBLE_DEVICES=void
"""


def test_cdi_spec_lists_every_configured_gpu(tmp_path, monkeypatch):
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    (cdi / "nvidia.yaml").write_text(CDI_YAML)
    monkeypatch.setattr(doctor, "CDI_DIRS", (cdi,))
    names, files = doctor.cdi_devices_on_host()
    assert names == ["nvidia.com/gpu=0", "nvidia.com/gpu=GPU-11111111-2222-3333-4444-555555555555",
                     "nvidia.com/gpu=all"]
    assert doctor.check_cdi(cfg_of(tmp_path, GPU_JOB)).status == "pass"
    c = doctor.check_cdi(cfg_of(tmp_path, GPU_JOB.replace("gpus = [0,", "gpus = [3,")))
    assert c.status == "fail" and "nvidia.com/gpu=3" in c.detail


def test_wildcard_listener_is_reported(tmp_path):
    wild = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    local = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        wild.bind(("0.0.0.0", 0))
        wild.listen()
        local.bind(("127.0.0.1", 0))
        local.listen()
        ports = {w["port"]: w for w in doctor.wildcard_listeners()}
        assert wild.getsockname()[1] in ports and "python" in ports[wild.getsockname()[1]]["process"]
        assert local.getsockname()[1] not in ports
        c = doctor.check_listeners(cfg_of(tmp_path, CPU_JOB))
        assert c.status == "warn" and str(wild.getsockname()[1]) in c.detail
    finally:
        wild.close()
        local.close()


def test_published_ports_must_be_loopback(tmp_path):
    bad = GPU_JOB + 'ports = ["0.0.0.0:8888:8888"]\n'
    assert doctor.check_ports(cfg_of(tmp_path, bad)).status == "fail"
    good = GPU_JOB + 'ports = ["8888", "127.0.0.1:6006:6006"]\n'
    assert doctor.check_ports(cfg_of(tmp_path, good)).status == "pass"


def test_disk_space_thresholds(tmp_path, monkeypatch):
    monkeypatch.setattr(doctor, "FREE_FAIL", 2**62)
    c = by_name(doctor.check_disk(cfg_of(tmp_path, CPU_JOB)))
    assert c["disk:cpu"].status == "fail" and "checkpoints will fail" in c["disk:cpu"].detail


def test_podman_and_quadlet_versions(tmp_path, monkeypatch):
    monkeypatch.setattr(doctor, "podman_version", lambda *a: (4, 3, 1))
    monkeypatch.setattr(doctor, "podman_binary", lambda: "/usr/bin/podman")
    c = doctor.check_podman(cfg_of(tmp_path, GPU_JOB))
    assert c.status == "warn" and "no Quadlet" in c.detail and "4.4" in c.fix
    assert doctor.check_quadlet(cfg_of(tmp_path, GPU_JOB)).status == "skip"
    monkeypatch.setattr(doctor, "podman_version", lambda *a: (5, 4, 2))
    assert doctor.check_podman(cfg_of(tmp_path, GPU_JOB)).status == "pass"
    monkeypatch.setattr(doctor, "podman_version", lambda *a: None)
    c = doctor.check_podman(cfg_of(tmp_path, GPU_JOB))
    assert c.status == "fail" and "apt-get install podman" in c.fix


def test_cli_json_and_exit_status(tmp_path):
    cfg = tmp_path / "isaacd.toml"
    cfg.write_text(f'[supervisor]\nstate_dir = "{tmp_path}/s"\n[gpu]\nsource = "none"\n' + GPU_JOB)
    r = subprocess.run([str(REPO / ".venv/bin/isaacd"), "doctor", "--json", "-c", str(cfg)], capture_output=True,
                       text=True, timeout=120)
    out = json.loads(r.stdout)
    assert r.returncode == (0 if out["ok"] else 1)
    assert {"nvidia_driver", "nvml", "cdi_spec", "podman", "quadlet", "listeners"} <= {c["name"] for c in out["checks"]}
    if doctor.driver_version() is None:
        assert r.returncode == 1 and not out["ok"]
    r = subprocess.run([str(REPO / ".venv/bin/isaacd"), "doctor", "-c", str(cfg)], capture_output=True, text=True,
                       timeout=120)
    assert "fix:" in r.stdout and ("NOT OK" in r.stdout or "OK:" in r.stdout)


@pytest.mark.parametrize("text,want", [
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 23 2025\n", (580, 95, 5)),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.133.20  Release Build\n", (570, 133, 20)),
])
def test_driver_version_parsing(monkeypatch, text, want, tmp_path):
    f = tmp_path / "version"
    f.write_text(text)
    real = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: text if str(self) == "/proc/driver/nvidia/version"
                        else real(self, *a, **k))
    assert doctor.driver_version() == want


def test_a_task_the_trainer_does_not_register_fails_with_the_closest_id(tmp_path):
    """Read from the built-in trainer's registry, without launching it (workflows/registry.py)."""
    c = by_name(doctor.collect(cfg_of(tmp_path, CPU_JOB + 'task = "Isaacd-Cartpol-v0"\n')))
    assert c["task:cpu"].status == "fail" and "gymnasium.error.NameNotFound" in c["task:cpu"].detail
    assert c["task:cpu"].fix == 'set task = "Isaacd-Cartpole-v0" in the [[jobs]] table of cpu'
