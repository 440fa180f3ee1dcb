"""Generated job units and the supervisor unit: contents, and validation by the real tools.

- `quadlet -dryrun` (Podman 5.4's generator, in the testbed rootfs via chroot) must accept every
  generated `.container` with nothing on stderr: one unknown key makes it drop the whole unit.
- `systemd-analyze verify` (host systemd 252, and systemd 257 in the chroot) must print nothing on
  stderr for every generated unit: it warns, exit status 0, on unknown keys and bad values.
- GPU passthrough cannot run here (no GPU, and no Podman on the GPU machine): the CDI device
  options are checked as text, in all three renderings.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from isaacd.config.schema import parse_config
from isaacd.runtimes.base import LaunchSpec, RuntimeFailure
from isaacd.runtimes.container_spec import (
    FIELDS,
    ContainerSpec,
    cdi_devices,
    container_command,
    container_device_arg,
    parse_port,
)
from isaacd.os_seam.oscalls import RunAs
from isaacd.runtimes.quadlet import render_quadlet, render_service
from isaacd.runtimes.unit_syntax import sd_quote, sd_split
from isaacd.service.units import AGENT_UNIT_NAME, UNIT_NAME, install_units, render_agent_unit, render_supervisor_unit

sys.path.insert(0, str(Path(__file__).parent / "testbed"))
import tb as testbed  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

WEIRD = ["plain", "with space", "100%", "$HOME", "${X}", 'dq"uote', "sq'uote", "back\\slash", "semi;colon",
         "tab\there", "%n%t", "a=b", "--flag=va lue", "", "ünïcödé"]


def job_from(toml: str):
    return parse_config(toml, "test", Path("/")).jobs[0]


def spec_for(job, trainer_args=None, attempt=3, token="tok123") -> ContainerSpec:
    ls = LaunchSpec(job=job, argv=[], trainer_args=trainer_args if trainer_args is not None else ["--x", "1"],
                    env={"HOST_SECRET": "nope", "NOTIFY_SOCKET": "/run/systemd/notify"}, cwd=Path("/"),
                    log_path=Path("/tmp/x.log"))
    return ContainerSpec.from_launch(ls, token, attempt)


JOBS = {
    "builtin_rootfs": """
[[jobs]]
name = "cp"
runtime = "systemd"
log_root = "/data/isaacd/cp"
command = ["/opt/venv/bin/isaacd-train"]
[jobs.container]
image = "/:O"
shm_size = "1g"
""",
    "rsl_rl_gpus": """
[[jobs]]
name = "anymal.rough_v2"
runtime = "systemd"
workflow = "rsl_rl"
task = "Isaac-Velocity-Rough-Anymal-C-v0"
device = "cuda:2"
gpus = [2, 3]
log_root = "/data/isaacd/anymal"
environment = { WANDB_MODE = "offline", "WEIRD" = "a b %n $X \\"q\\"" }
[jobs.container]
image = "nvcr.io/nvidia/isaac-lab:2.3.2"
shm_size = "16g"
ports = ["6006", "8888:8888", "127.0.0.1:9000:9000/udp", "[::1]:7000:7000"]
volumes = ["/data/cache/kit:/isaac-sim/kit/cache", "/data/cache/ov:/root/.cache/ov:ro"]
environment = { ACCEPT_EULA = "Y", OMNI_SERVER = "x" }
user = "1000:1000"
""",
    "uuid_mig_all": """
[[jobs]]
name = "mig"
runtime = "podman"
device = "cuda"
gpus = ["GPU-6f3a1c2e-0b1d-4e5f-8a9b-0c1d2e3f4a5b", "MIG-1c2d3e4f-aaaa-bbbb-cccc-1234567890ab", "0:1", "nvidia.com/gpu=all"]
log_root = "/data/mig"
""",
}


# ---- contents ---------------------------------------------------------------------------------
def test_cdi_device_names_from_gpus():
    assert cdi_devices(job_from(JOBS["builtin_rootfs"])) == []  # cpu, no gpus: no GPU at all
    assert cdi_devices(job_from(JOBS["rsl_rl_gpus"])) == ["nvidia.com/gpu=2", "nvidia.com/gpu=3"]
    assert cdi_devices(job_from(JOBS["uuid_mig_all"])) == [
        "nvidia.com/gpu=GPU-6f3a1c2e-0b1d-4e5f-8a9b-0c1d2e3f4a5b",
        "nvidia.com/gpu=MIG-1c2d3e4f-aaaa-bbbb-cccc-1234567890ab",
        "nvidia.com/gpu=0:1",
        "nvidia.com/gpu=all",
    ]
    cuda_no_gpus = job_from('[[jobs]]\nname = "a"\ndevice = "cuda:0"\n')
    assert cdi_devices(cuda_no_gpus) == ["nvidia.com/gpu=0"]  # the GPU the job claims, not every GPU
    assert cdi_devices(job_from('[[jobs]]\nname = "a"\ndevice = "cuda"\n')) == ["nvidia.com/gpu=0"]
    assert cdi_devices(job_from('[[jobs]]\nname = "a"\ngpus = "all"\n')) == ["nvidia.com/gpu=all"]
    unchecked = job_from('[[jobs]]\nname = "a"\n').model_copy(update={"gpus": ["-0"]})  # config refuses it too
    with pytest.raises(RuntimeFailure, match="cannot start with '-'"):
        cdi_devices(unchecked)


def test_cdi_devices_in_every_rendering():
    cs = spec_for(job_from(JOBS["rsl_rl_gpus"]))
    q = render_quadlet(cs)
    assert "AddDevice=nvidia.com/gpu=2\nAddDevice=nvidia.com/gpu=3\n" in q
    assert "AddDevice=-" not in q  # "-" would make Quadlet treat it as an optional path and drop it
    s = render_service(cs)
    assert "--device nvidia.com/gpu=2 --device nvidia.com/gpu=3" in s
    body = cs.libpod_create_body()
    assert body["devices"] == [{"path": "nvidia.com/gpu=2"}, {"path": "nvidia.com/gpu=3"}]
    assert "--privileged" not in s and "Privileged" not in q and "privileged" not in body


def test_one_field_table_drives_all_three_renderings():
    """Every property of the container is one row of FIELDS, and each row shows up in the Quadlet
    file, in the fallback unit's `podman run` and in the libpod API body: a field cannot be added to
    one backend and forgotten in another."""
    meta = {"job", "attempt", "token", "description", "extra"}
    props = {f for f in ContainerSpec.__dataclass_fields__ if f not in meta}
    assert props <= {f.name for f in FIELDS}, props - {f.name for f in FIELDS}
    for name, cs in _all_specs():
        q, svc, body = render_quadlet(cs), render_service(cs), cs.libpod_create_body()
        argv = sd_split(next(ln for ln in svc.splitlines() if ln.startswith("ExecStart=")).split("=", 1)[1]
                        .replace("%%", "%").replace("$$", "$"))
        for f in FIELDS:
            for item in f.value(cs):
                assert f"\n{f.quadlet}={f.quadlet_text(item)}\n" in q, (name, f.name)
                words = f.cli(item)
                assert any(argv[i:i + len(words)] == words for i in range(len(argv))), (name, f.name, words)
            if f.value(cs) and f.api is not None:
                for k, v in f.api(f.value(cs)).items():
                    assert body[k] == v, (name, f.name, k)
        # never privileged, whatever the job says: no such row, no such flag
        for text in (q, svc, json.dumps(body)):
            for bad in ("privileged", "Privileged", "--cap-add", "AddCapability", "--security-opt", "SecurityLabelDisable"):
                assert bad not in text, (name, bad)


def test_device_index_inside_the_container():
    # CDI passes host GPUs 2 and 3 as cuda:0 and cuda:1 inside
    assert container_device_arg(job_from(JOBS["rsl_rl_gpus"])) == "cuda:0"
    one = job_from('[[jobs]]\nname = "a"\nruntime = "podman"\nworkflow = "rsl_rl"\ndevice = "cuda:2"\ngpus = [2]\n'
                   '[jobs.container]\nimage = "nvcr.io/nvidia/isaac-lab:2.3.2"\n')
    cmd = container_command(one, ["--device", "cuda:2", "--headless"])
    # Isaac Lab's launcher runs isaacd's shim (bind-mounted), which runs the unmodified train script
    assert cmd == ["/workspace/isaaclab/isaaclab.sh", "-p", "/opt/isaacd/isaacd_shim.py",
                   "/workspace/isaaclab/scripts/reinforcement_learning/rsl_rl/train.py", "--device", "cuda:0", "--headless"]
    assert container_device_arg(job_from('[[jobs]]\nname = "a"\ndevice = "cuda:1"\ngpus = [0, 1]\n')) == "cuda:1"
    assert container_device_arg(job_from('[[jobs]]\nname = "a"\ndevice = "cpu"\n')) == "cpu"
    # no gpus: CDI passes the device's GPU alone, which is cuda:0 inside
    assert container_device_arg(job_from('[[jobs]]\nname = "a"\ndevice = "cuda:2"\n')) == "cuda:0"


def test_multi_gpu_jobs_run_torchrun_in_the_container():
    j = job_from('[[jobs]]\nname = "a"\nruntime = "podman"\ndevice = "cuda:0"\ngpus = [2, 3]\n')
    cmd = container_command(j, ["--device", "cuda:2"])
    assert cmd == ["python", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                   "/opt/isaacd/isaacd_shim.py", "-m", "isaacd_trainer", "--device", "cuda:0", "--distributed"]
    cs = spec_for(j)
    assert "CUDA_VISIBLE_DEVICES" not in cs.env  # CDI already numbers the job's GPUs from 0
    assert cs.devices == ["nvidia.com/gpu=2", "nvidia.com/gpu=3"]
    r = job_from('[[jobs]]\nname = "a"\nruntime = "podman"\nworkflow = "rsl_rl"\ndevice = "cuda:0"\ngpus = [0, 1]\n'
                 '[jobs.container]\nimage = "nvcr.io/nvidia/isaac-lab:2.3.2"\n')
    assert container_command(r, ["--headless"])[:7] == ["/workspace/isaaclab/isaaclab.sh", "-p", "-m",
                                                       "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                                                       "/opt/isaacd/isaacd_shim.py"]


def test_commands_per_workflow():
    builtin = job_from('[[jobs]]\nname = "a"\nruntime = "podman"\n')
    assert container_command(builtin, ["--task", "T"]) == ["python", "/opt/isaacd/isaacd_shim.py", "-m",
                                                           "isaacd_trainer", "--task", "T"]
    no_shim = job_from('[[jobs]]\nname = "a"\nruntime = "podman"\nshim = false\nisaaclab_version = "3.0"\n')
    assert container_command(no_shim, ["--x"]) == ["python", "-m", "isaacd_trainer.isaaclab30", "--rl_library", "rsl_rl", "--x"]
    override = job_from('[[jobs]]\nname = "a"\nruntime = "podman"\ncommand = ["python", "-m", "my.train"]\n')
    assert container_command(override, ["--x"]) == ["python", "-m", "my.train", "--x"]


def test_ports_are_loopback_only():
    assert parse_port("6006", "j") == "127.0.0.1:6006:6006"
    assert parse_port("8080:80", "j") == "127.0.0.1:8080:80"
    assert parse_port("localhost:8080:80/udp", "j") == "127.0.0.1:8080:80/udp"
    assert parse_port("[::1]:7000:7000", "j") == "[::1]:7000:7000"
    for bad in ("0.0.0.0:8888:8888", "10.0.0.5:80:80", "[::]:80:80"):
        with pytest.raises(RuntimeFailure, match="127.0.0.1 only"):
            parse_port(bad, "j")
    with pytest.raises(RuntimeFailure):
        parse_port("a:b:c:d", "j")
    cs = spec_for(job_from(JOBS["rsl_rl_gpus"]))
    assert cs.ports == ["127.0.0.1:6006:6006", "127.0.0.1:8888:8888", "127.0.0.1:9000:9000/udp", "[::1]:7000:7000"]
    assert {p["host_ip"] for p in cs.libpod_create_body()["portmappings"]} == {"127.0.0.1", "::1"}


def test_environment_isaac_sim_defaults_and_no_host_env():
    cs = spec_for(job_from(JOBS["rsl_rl_gpus"]))
    env = cs.env
    assert env["ACCEPT_EULA"] == "Y" and env["PRIVACY_CONSENT"] == "Y" and env["HEADLESS"] == "1"
    assert env["OMNI_SERVER"] == "x" and env["WANDB_MODE"] == "offline"
    assert "HOST_SECRET" not in env and "NOTIFY_SOCKET" not in env and "PATH" not in env
    os.environ["NOTIFY_SOCKET"] = "/run/systemd/notify"
    try:
        job = job_from('[[jobs]]\nname = "a"\nenvironment = { NOTIFY_SOCKET = "/x", WATCHDOG_USEC = "1" }\n')
        assert "NOTIFY_SOCKET" not in spec_for(job).env and "WATCHDOG_USEC" not in spec_for(job).env
    finally:
        del os.environ["NOTIFY_SOCKET"]


def test_log_root_same_path_and_isaaclab_logs():
    cs = spec_for(job_from(JOBS["rsl_rl_gpus"]))
    assert ("/data/isaacd/anymal", "/data/isaacd/anymal", "") in cs.volumes
    assert ("/data/isaacd/anymal", "/workspace/isaaclab/logs", "") in cs.volumes
    assert cs.workdir == "/workspace/isaaclab"
    b = spec_for(job_from(JOBS["builtin_rootfs"]))
    # a raw `command` gets no shim; its ./logs is the log root too, as for Isaac Lab's scripts
    assert b.volumes == [("/data/isaacd/cp", "/data/isaacd/cp", ""), ("/data/isaacd/cp", "/workspace/isaacd/logs", "")]
    assert b.workdir == "/workspace/isaacd"
    assert b.rootfs == "/:O" and b.image is None


def test_shim_and_its_side_channel_are_mounted():
    job = job_from(JOBS["rsl_rl_gpus"])
    ls = LaunchSpec(job=job, argv=[], trainer_args=["--x"], env={"ISAACD_SHIM_EVENTS": "/var/lib/isaacd/shim/a/attempt-3.jsonl"},
                    cwd=Path("/"), log_path=Path("/tmp/x.log"))
    cs = ContainerSpec.from_launch(ls, "tok", 3)
    shim = next(v for v in cs.volumes if v[1] == "/opt/isaacd/isaacd_shim.py")
    assert shim[2] == "ro" and Path(shim[0]).name == "shim.py"
    assert ("/var/lib/isaacd/shim/a", "/var/lib/isaacd/shim/a", "") in cs.volumes
    assert cs.env["ISAACD_SHIM_EVENTS"] == "/var/lib/isaacd/shim/a/attempt-3.jsonl"
    assert "-v /var/lib/isaacd/shim/a:/var/lib/isaacd/shim/a" in " ".join(cs.podman_run_options())


def test_labels_restart_policy_and_limits():
    cs = spec_for(job_from(JOBS["rsl_rl_gpus"]), attempt=7, token="abc")
    assert cs.labels == {"isaacd.job": "anymal.rough_v2", "isaacd.attempt": "7", "isaacd.token": "abc"}
    for text in (render_quadlet(cs), render_service(cs)):
        assert "Restart=no\n" in text and "# isaacd-launch: abc\n" in text
        assert "Before=isaaclab-supervisor.service" in text
        assert "Restart=always" not in text and "Restart=on-failure" not in text
    assert any(u.startswith("memlock=") for u in cs.ulimits)
    assert "Ulimit=memlock=" in render_quadlet(cs) and "--ulimit memlock=" in render_service(cs)
    assert "ShmSize=16g" in render_quadlet(cs) and "--shm-size 16g" in render_service(cs)
    assert cs.libpod_create_body()["shm_size"] == 16 * 2**30


def test_fallback_service_has_quadlets_shape():
    s = render_service(spec_for(job_from(JOBS["builtin_rootfs"])), podman="/usr/bin/podman")
    for line in ("Type=notify", "NotifyAccess=all", "KillMode=mixed", "Delegate=yes", "SuccessExitStatus=143",
                 "ExecStop=/usr/bin/podman rm -v -f -i --cidfile=%t/%N.cid",
                 "ExecStopPost=-/usr/bin/podman rm -v -f -i --cidfile=%t/%N.cid",
                 "Environment=PODMAN_SYSTEMD_UNIT=%n", "SyslogIdentifier=%N"):
        assert line + "\n" in s, line
    start = next(ln for ln in s.splitlines() if ln.startswith("ExecStart="))
    assert start.startswith("ExecStart=/usr/bin/podman run --name isaaclab-job-cp --cidfile=%t/%N.cid --replace "
                            "--rm --cgroups=split --sdnotify=conmon -d ")
    assert start.endswith("--rootfs /:O --x 1")


def test_sd_quote_shapes():
    assert sd_quote("plain") == "plain"
    assert sd_quote("100%") == '"100%%"'
    assert sd_quote("$HOME") == '"$$HOME"'
    assert sd_quote("") == '""'
    assert sd_quote('a "b"') == '"a \\"b\\""'


# ---- validation by the real tools ---------------------------------------------------------
ROOTFS = testbed.LOWER


@pytest.fixture(scope="module")
def chroot_tools():
    if os.geteuid() != 0:
        pytest.skip("chroot into the testbed rootfs needs root")
    why = testbed.unavailable_reason()
    if why:
        pytest.skip(why)
    try:
        testbed.ensure_rootfs()
    except testbed.TestbedUnavailable as exc:
        pytest.skip(str(exc))
    q = ROOTFS / "usr/libexec/podman/quadlet"
    if not q.exists():
        pytest.skip(f"{q} missing from the testbed rootfs")
    work = ROOTFS / "tmp" / f"isaacd-qcheck-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    yield work
    shutil.rmtree(work, ignore_errors=True)


def spare_spec_for(job, token="0123456789abcdef0123456789abcdef") -> ContainerSpec:
    """A warm spare's container (spare.py's LaunchSpec.spare): its own name, no ports, its dirs at the same path."""
    ls = LaunchSpec(job=job, argv=[], trainer_args=[], cwd=Path("/"), log_path=Path("/tmp/x.log"), token=token,
                    env={"ISAACD_SPARE_CONTROL": "/var/lib/isaacd/spare/j/control-x.fifo", "HOST_SECRET": "nope",
                         "ISAACD_SPARE_PRELOAD": "isaacd_trainer.cli,hydra"},
                    spare=True, container_argv=("/opt/venv/bin/python", "/opt/shim.py", "--isaacd-spare"),
                    same_path_mounts=(Path("/var/lib/isaacd/spare/j"), Path("/var/lib/isaacd/shim/j")))
    return ContainerSpec.from_launch(ls, token, 4)


def _all_specs() -> list[tuple[str, ContainerSpec]]:
    out = []
    for name, toml in JOBS.items():
        out.append((name, spec_for(job_from(toml))))
    out.append(("spare", spare_spec_for(job_from(JOBS["rsl_rl_gpus"]))))
    # issue 32: a job of alice's runs as her uid:gid whatever its container.user says (Quadlet User=, a number)
    owned = LaunchSpec(job=job_from(JOBS["rsl_rl_gpus"]), argv=[], trainer_args=["--x"], env={}, cwd=Path("/"),
                       log_path=Path("/tmp/x.log"), run_as=RunAs(1234, 1235, (1235, 2000), "alice", "/home/alice"))
    out.append(("owner", ContainerSpec.from_launch(owned, "tok", 1)))  # second to last
    out.append(("weird_args", spec_for(job_from(JOBS["builtin_rootfs"]), trainer_args=WEIRD)))  # the last one
    return out


def test_a_spares_unit_is_its_own():
    """runtime = "systemd" spare (spare.py): a unit of its own named after its container, its file next to the job's,
    no published ports, its dirs mounted at the same paths, the launch token in the header for `find`."""
    from isaacd.runtimes.quadlet import launch_token_of, spare_unit_name, unit_name

    cs = spare_spec_for(job_from(JOBS["rsl_rl_gpus"]))
    assert cs.name == "isaaclab-job-anymal.rough_v2-spare-0123456789ab"
    assert spare_unit_name("anymal.rough_v2", cs.token) == cs.name + ".service" != unit_name("anymal.rough_v2")
    for text in (render_quadlet(cs), render_service(cs)):
        assert "warm spare" in text.splitlines()[0] and "PublishPort" not in text and "--publish" not in text
        assert "/var/lib/isaacd/spare/j:/var/lib/isaacd/spare/j" in text and "--isaacd-spare" in text
        assert "HOST_SECRET" not in text and "ISAACD_SPARE_CONTROL" in text
    p = Path("/tmp") / f"isaacd-spare-{os.getpid()}.service"
    p.write_text(render_service(cs))
    try:
        assert launch_token_of(p) == cs.token
    finally:
        p.unlink()


@pytest.mark.systemd
def test_quadlet_dryrun_and_verify_every_generated_container(chroot_tools):
    qdir, outdir = chroot_tools / "q", chroot_tools / "out"
    qdir.mkdir()
    outdir.mkdir()
    specs = _all_specs()
    for i, (name, cs) in enumerate(specs):
        cs.name = f"isaaclab-job-{i}"
        (qdir / f"isaaclab-job-{i}.container").write_text(render_quadlet(cs))
    inside = "/" + str(qdir.relative_to(ROOTFS))
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "QUADLET_UNIT_DIRS": inside}
    r = subprocess.run(["chroot", str(ROOTFS), "/usr/libexec/podman/quadlet", "-dryrun", "-no-kmsg-log"],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0 and _quadlet_complaints(r.stderr) == [], r.stderr
    for i in range(len(specs)):
        assert f"---isaaclab-job-{i}.service---" in r.stdout
    r = subprocess.run(["chroot", str(ROOTFS), "/usr/libexec/podman/quadlet", "-no-kmsg-log",
                        "/" + str(outdir.relative_to(ROOTFS))], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    units = sorted(outdir.glob("isaaclab-job-*.service"))
    assert len(units) == len(specs)
    for u in units:
        _verify_both(u)
    # what Quadlet made of the weird arguments: exactly our words, systemd-quoted
    weird = (outdir / f"isaaclab-job-{len(specs) - 1}.service").read_text()
    assert '"100%%" "$$HOME" "$${X}"' in weird
    owned = (outdir / f"isaaclab-job-{len(specs) - 2}.service").read_text()
    assert "--user 1234:1235" in owned and "1000:1000" not in owned  # Quadlet's User= as podman's --user


@pytest.mark.systemd
def test_systemd_analyze_verify_every_fallback_service(chroot_tools):
    for i, (name, cs) in enumerate(_all_specs()):
        cs.name = f"isaaclab-job-fb{i}"
        p = chroot_tools / f"isaaclab-job-fb{i}.service"
        p.write_text(render_service(cs, podman="/usr/bin/podman"))
        _verify_both(p)


def _verify_isaacd_unit(name: str, render, tmp_path: Path, chroot_tools: Path) -> None:  # noqa: ANN001
    """systemd-analyze verify of one of isaacd's own units: on the host (252) with this venv's isaacd, and in the
    rootfs (257), where /bin/true stands in for the isaacd binary. Nothing on stderr."""
    unit = tmp_path / name
    unit.write_text(render(bin_path=str(REPO / ".venv/bin/isaacd")))
    r = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    p = chroot_tools / name
    p.write_text(render(bin_path="/bin/true"))
    r = subprocess.run(["chroot", str(ROOTFS), "systemd-analyze", "verify", "/" + str(p.relative_to(ROOTFS))],
                       capture_output=True, text=True, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    assert r.returncode == 0 and r.stderr == "", r.stderr


@pytest.mark.systemd
def test_supervisor_unit_verifies_clean(tmp_path, chroot_tools):
    _verify_isaacd_unit(UNIT_NAME, render_supervisor_unit, tmp_path, chroot_tools)


def _quadlet_complaints(stderr: str) -> list[str]:
    """stderr of `quadlet -dryrun` minus its one informational line per file it reads."""
    return [ln for ln in stderr.splitlines() if ln.strip() and "Loading source unit file" not in ln]


@pytest.mark.systemd
def test_quadlet_check_catches_a_bad_key(chroot_tools):
    """Negative control for the check above: one unknown key is an error (and drops the unit)."""
    qdir = chroot_tools / "bad"
    qdir.mkdir()
    text = render_quadlet(spec_for(job_from(JOBS["builtin_rootfs"]))).replace("ShmSize=", "ShmSise=")
    (qdir / "isaaclab-job-bad.container").write_text(text)
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "QUADLET_UNIT_DIRS": "/" + str(qdir.relative_to(ROOTFS))}
    r = subprocess.run(["chroot", str(ROOTFS), "/usr/libexec/podman/quadlet", "-dryrun", "-no-kmsg-log"],
                       capture_output=True, text=True, env=env)
    assert r.returncode != 0 and any("ShmSise" in ln for ln in _quadlet_complaints(r.stderr)), r.stderr


def _verify_both(path: Path) -> None:
    """systemd-analyze verify on the host (252) and in the rootfs (257): no output on stderr."""
    if shutil.which("systemd-analyze") and Path("/usr/bin/podman").exists():
        r = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True)
        assert r.returncode == 0 and r.stderr == "", f"host verify {path.name}: {r.stderr}"
    inside = "/" + str(path.relative_to(ROOTFS))
    r = subprocess.run(["chroot", str(ROOTFS), "systemd-analyze", "verify", inside], capture_output=True, text=True,
                       env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    assert r.returncode == 0 and r.stderr == "", f"chroot verify {path.name}: {r.stderr}"


# ---- the supervisor unit --------------------------------------------------------------------
def test_units_dir_matches_the_template():
    assert (REPO / "units" / UNIT_NAME).read_text() == render_supervisor_unit()
    assert (REPO / "units" / AGENT_UNIT_NAME).read_text() == render_agent_unit()


def test_install_units_agent_installs_the_node_unit_only(tmp_path, capsys):
    class Args:
        prefix = str(tmp_path)
        bin = "/opt/isaacd/bin/isaacd"
        config = None
        agent = True

    assert install_units(Args()) == 0
    unit = (tmp_path / "etc/systemd/system" / AGENT_UNIT_NAME).read_text()
    assert "ExecStart=/opt/isaacd/bin/isaacd agent --config /etc/isaacd/isaacd.toml --listen 0.0.0.0:9836" in unit
    assert not (tmp_path / "etc/systemd/system" / UNIT_NAME).exists()  # a node runs no supervisor
    assert (tmp_path / "etc/isaacd/isaacd.toml").exists()
    assert "systemctl enable --now isaacd-agent" in capsys.readouterr().out


@pytest.mark.systemd
def test_agent_unit_verifies_clean(tmp_path, chroot_tools):
    _verify_isaacd_unit(AGENT_UNIT_NAME, render_agent_unit, tmp_path, chroot_tools)


def test_supervisor_unit_contents():
    u = render_supervisor_unit("/opt/isaacd/bin/isaacd")
    for line in ("Type=notify", "NotifyAccess=main", "ExecStart=/opt/isaacd/bin/isaacd run --config /etc/isaacd/isaacd.toml",
                 "Restart=on-failure", "RestartSec=5s", "WatchdogSec=30s", "KillMode=mixed",
                 "StartLimitIntervalSec=600", "StartLimitBurst=5", "WantedBy=multi-user.target"):
        assert line + "\n" in u, line
    # no mount-namespace or device-policy hardening: those break Podman and GPU access
    for bad in ("ProtectSystem=", "PrivateTmp=", "PrivateDevices=", "DevicePolicy=", "ProtectHome=",
                "NoNewPrivileges=", "KillMode=control-group"):
        assert "\n" + bad not in u, bad


def test_install_units_into_a_prefix(tmp_path, capsys):
    class Args:
        prefix = str(tmp_path)
        bin = "/opt/isaacd/bin/isaacd"
        config = None

    assert install_units(Args()) == 0
    unit = tmp_path / "etc/systemd/system" / UNIT_NAME
    assert "ExecStart=/opt/isaacd/bin/isaacd run --config /etc/isaacd/isaacd.toml" in unit.read_text()
    cfg = tmp_path / "etc/isaacd/isaacd.toml"
    assert cfg.exists() and (tmp_path / "etc/containers/systemd").is_dir()
    parse_config(cfg.read_text(), str(cfg), tmp_path)  # the example config is valid
    cfg.write_text("# mine\n")
    assert install_units(Args()) == 0
    assert cfg.read_text() == "# mine\n"  # never overwritten
    assert "systemctl enable --now isaaclab-supervisor" in capsys.readouterr().out


def test_install_units_cli(tmp_path):
    r = subprocess.run([str(REPO / ".venv/bin/isaacd"), "install-units", "--prefix", str(tmp_path), "--bin",
                        "/usr/local/bin/isaacd"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "etc/systemd/system" / UNIT_NAME).read_text() == render_supervisor_unit()
    json.dumps(r.stdout)
