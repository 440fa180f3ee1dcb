"""The queue's config side (issue 31): what a job asks for, the drop-in job files, `isaacd submit`/`cancel` on the
supervisor side, the config a placed job launches with, and the tick hook's view of the GPUs. No processes."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from isaacd.config.placed import placed_config
from isaacd.config.schema import ConfigError, JobConfig, load_config, parse_config
from isaacd.gpu.assign import cdi_devices, container_device, job_gpus
from isaacd.gpu.snapshot import GpuSnapshot
from isaacd.gpu.types import DriverInfo, GpuInfo, GpuSample
from isaacd.runtimes.trainer_command import trainer_env
from isaacd.scheduling.hook import HostQueue
from isaacd.scheduling.submit import cancel_job, submit_job
from isaacd.config.queue import QueueConfig
from isaacd.jobs.queue_entry import QueueEntry, Request
from isaacd.status.signals import JobSignals
from isaacd.status.types import JobStatus, QueueStatus, Status

GiB = 2**30


def job(**kw: Any) -> JobConfig:
    return parse_config("[[jobs]]\n" + "\n".join(f"{k} = {json.dumps(v)}" for k, v in {"name": "j", **kw}.items()),
                        "host.toml", Path("/")).jobs[0]


# ---- what a job asks for ----------------------------------------------------------------------------------------
def test_a_job_that_asks_for_gpus_is_placed_by_isaacd_and_trains_on_cuda():
    j = job(gpu_memory="12GiB")
    assert j.placed_by_isaacd and j.device == "cuda" and j.gpu_memory_bytes == 12 * GiB and j.ranks == 1
    assert job_gpus(j).refs == ()  # no GPU until the queue places it: nothing to conflict with
    two = job(gpus=2)
    assert two.placed_by_isaacd and two.ranks == 2 and two.gpu_memory_bytes is None
    assert not job(gpus=[0]).placed_by_isaacd and job(gpus=[0]).device == "cpu"  # a list still pins, as before


@pytest.mark.parametrize("keys, words", [
    ({"gpu_memory": "12GiB", "gpus": [0]}, "gpu_memory asks isaacd to place the job, gpus = [...] pins it"),
    ({"gpu_memory": "12GiB", "device": "cuda:1"}, 'isaacd picks the GPUs of a placed job; use device = "cuda"'),
    ({"gpus": 2, "nproc_per_node": 4}, "a placed job runs one rank per GPU; remove nproc_per_node"),
    ({"gpu_memory": "12GiB", "share_gpus": True}, "a placed job shares a GPU by its gpu_memory"),
    ({"gpu_memory": "a lot"}, '"a lot" is not a size: write a number and a unit, such as "12GiB"'),
    ({"gpus": 0}, "greater than or equal to 1"),
])
def test_a_wrong_request_names_the_key_and_the_fix(keys, words):
    with pytest.raises(ConfigError) as info:
        job(**keys)
    assert words in str(info.value) and str(info.value).startswith("host.toml: jobs[0]")


def test_ray_keeps_its_own_scheduler():
    text = '[ray]\naddress = "auto"\n[[jobs]]\nname = "r"\nruntime = "ray"\ngpu_memory = "8GiB"\n'
    with pytest.raises(ConfigError, match="Ray places the job"):
        parse_config(text, "host.toml", Path("/"))


# ---- the config a placed job launches with: its GPUs named as Isaac Lab expects ----------------------------------
def test_one_rank_trains_on_cuda_of_its_gpu_and_a_container_sees_it_as_cuda_0():
    p = placed_config(job(gpu_memory="12GiB", runtime="podman"), (3,))
    assert (p.gpus, p.device) == ([3], "cuda:3")
    assert cdi_devices(p) == ["nvidia.com/gpu=3"] and container_device(p) == "cuda:0"


def test_a_gang_of_two_ranks_gets_cuda_visible_devices_and_torchrun_ranks():
    p = placed_config(job(gpus=2), (5, 6))
    assert (p.gpus, p.device, p.ranks) == ([5, 6], "cuda", 2)
    assert trainer_env(p)["CUDA_VISIBLE_DEVICES"] == "5,6"


def test_a_cpu_trainer_stays_on_the_cpu_and_an_unplaced_job_is_as_written():
    assert placed_config(job(gpu_memory="1GiB", device="cpu"), (2,)).device == "cpu"
    written = job(gpu_memory="1GiB")
    assert placed_config(written, ()) is written


# ---- drop-in job files -------------------------------------------------------------------------------------------
def host(tmp_path: Path, jobs: str = "") -> Path:
    cfg = tmp_path / "isaacd.toml"
    cfg.write_text(f'[supervisor]\nstate_dir = "state"\njobs_dir = "jobs.d"\n{jobs}')
    (tmp_path / "jobs.d").mkdir(exist_ok=True)
    return cfg


def test_drop_ins_join_the_host_jobs_with_paths_relative_to_their_directory(tmp_path):
    cfg = host(tmp_path, '[[jobs]]\nname = "pinned"\n')
    (tmp_path / "jobs.d" / "a.toml").write_text('[[jobs]]\nname = "a"\ngpu_memory = "8GiB"\nlog_root = "runs"\n')
    (tmp_path / "jobs.d" / ".a.toml.tmp.1").write_text("half a fi")  # a submit in flight: never read
    c = load_config(cfg)
    assert [j.name for j in c.jobs] == ["pinned", "a"]
    assert c.jobs[1].log_root == tmp_path / "jobs.d" / "runs" and c.supervisor.jobs_dir == tmp_path / "jobs.d"


@pytest.mark.parametrize("text, words", [
    ('[[jobs]]\nname = "b"\ngpu_memory = "8 pints"\n', 'b.toml: jobs[0] (name = "b").gpu_memory: "8 pints": unknown unit "pints"'),
    ('[[jobs]]\nname = "b"\n[[jobs]]\nname = "c"\n', "b.toml: jobs: a job file holds exactly one [[jobs]] table (found 2)"),
    ('[supervisor]\nstate_dir = "/"\n[[jobs]]\nname = "b"\n', "b.toml: supervisor: a job file holds one [[jobs]] table"),
    ('[[jobs]]\nname = "pinned"\n', 'b.toml: jobs[0].name: "pinned" is already a job of'),
    ("[[jobs]\n", "b.toml: not valid TOML"),
])
def test_a_bad_job_file_names_itself_the_key_and_the_fix(tmp_path, text, words):
    cfg = host(tmp_path, '[[jobs]]\nname = "pinned"\n')
    (tmp_path / "jobs.d" / "b.toml").write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(cfg)
    assert words in str(info.value)


# ---- isaacd submit / cancel, the supervisor's side --------------------------------------------------------------
class Sup:
    """What submit/cancel see of the supervisor: its config and a reload that reads the files as the real one does."""

    def __init__(self, path: Path, gpus: GpuSnapshot | None = None):
        self.config_path = str(path)
        self.config = load_config(path)
        self.reloads = 0
        self.gpu_snapshot = None if gpus is None else (lambda: gpus)

    def status(self) -> Status:  # the first queue pass after a submit: every placed job waits, first in line
        return Status(jobs=tuple(JobStatus(j.name, state="queued", state_reason="queued #1: needs it all",
                                           queue=QueueStatus(position=1)) for j in self.config.jobs))

    def reload(self) -> dict[str, Any]:
        self.reloads += 1
        try:
            self.config = load_config(self.config_path)
        except ConfigError as exc:
            return {"ok": False, "error": str(exc)}
        return {"ok": True}

    def job_names(self) -> list[str]:
        return [j.name for j in self.config.jobs]


def test_submit_writes_the_file_and_reloads_cancel_sets_it_aside(tmp_path):
    sup = Sup(host(tmp_path))
    reply = submit_job(sup, '[[jobs]]\nname = "a"\ngpu_memory = "8GiB"\n', "/home/alice/a.toml")
    assert reply.endswith("jobs.d/a.toml: queued #1: needs it all (`isaacd queue`, `isaacd status a`)"), reply
    assert sup.job_names() == ["a"]
    assert (tmp_path / "jobs.d" / "a.toml").read_text().startswith("[[jobs]]")
    with pytest.raises(ValueError, match="a is already submitted"):
        submit_job(sup, '[[jobs]]\nname = "a"\n', "/home/alice/a2.toml")
    assert "cancelled: it saves at its next iteration boundary" in cancel_job(sup, "a")
    assert sup.job_names() == [] and len(list((tmp_path / "jobs.d" / ".cancelled").iterdir())) == 1


def test_a_bad_submit_is_refused_before_anything_is_written(tmp_path):
    sup = Sup(host(tmp_path))
    with pytest.raises(ValueError) as info:
        submit_job(sup, '[[jobs]]\nname = "a"\ngpu_memory = "lots"\n', "/home/alice/a.toml")
    assert str(info.value).startswith('not submitted: /home/alice/a.toml: jobs[0] (name = "a").gpu_memory:')
    assert sup.reloads == 0 and list((tmp_path / "jobs.d").iterdir()) == []


def test_a_submit_the_whole_config_refuses_is_taken_back_out(tmp_path):
    sup = Sup(host(tmp_path, '[[jobs]]\nname = "p"\ngpus = [0]\n'))
    with pytest.raises(ValueError, match="not submitted .nothing changed.: .*both use GPU 0"):
        submit_job(sup, '[[jobs]]\nname = "q"\ngpus = [0]\n', "/home/bob/q.toml")
    assert not (tmp_path / "jobs.d" / "q.toml").exists() and sup.job_names() == ["p"]


def test_cancel_of_a_host_config_job_is_refused_with_the_way_to_stop_it(tmp_path):
    sup = Sup(host(tmp_path, '[[jobs]]\nname = "p"\n'))
    with pytest.raises(ValueError, match="p is not a submitted job .*`isaacd stop p` stops it"):
        cancel_job(sup, "p")


def test_submit_without_a_jobs_dir_says_which_key_to_add(tmp_path):
    (tmp_path / "isaacd.toml").write_text('[supervisor]\nstate_dir = "state"\n')
    with pytest.raises(ValueError, match=r"\[supervisor\] jobs_dir is not set"):
        submit_job(Sup(tmp_path / "isaacd.toml"), '[[jobs]]\nname = "a"\n', "a.toml")


# ---- the tick hook's view of the GPUs ----------------------------------------------------------------------------
def snapshot(temps: dict[int, float], unhealthy: dict[str, str] | None = None, mig: bool = False) -> GpuSnapshot:
    """`mig`: GPU 0 in MIG mode, with one instance that has no memory reading (tests/test_scheduler_mig.py has MIG
    places with theirs)."""
    gpus = {str(i): GpuInfo(i, f"GPU-{i}", "NVIDIA H200", f"0000:0{i}:00.0") for i in temps}
    if mig:
        gpus["0:1"] = GpuInfo(1, "MIG-1", "NVIDIA H200 MIG 1g.18gb", "0000:00:00.0", is_mig=True, parent_index=0)
    samples = {str(i): GpuSample(str(i), time.time(), temperature_celsius=t, memory_used_bytes=GiB,
                                 memory_total_bytes=140 * GiB) for i, t in temps.items()}
    return GpuSnapshot(time.time(), True, None, "scripted", DriverInfo(), MappingProxyType(gpus),
                       MappingProxyType(samples), MappingProxyType({}), {}, {}, MappingProxyType(unhealthy or {}),
                       {})


def waiting_signals(name: str = "w") -> JobSignals:
    entry = QueueEntry(name, Request(1, 10 * GiB), priority=0, submitted_at=1.0, preemptible=True, waiting=True)
    return JobSignals(name, job(name=name, gpu_memory="10GiB"), False, 0, None, None, None, None, queue=entry)


def test_the_hook_places_only_on_cool_healthy_whole_gpus_and_says_why_in_the_status():
    q = HostQueue(QueueConfig(hot_celsius=85), lambda: snapshot({0: 90, 1: 40, 2: 40}, {"1": "XID 79"}))
    gpus = {g.index: g.unusable for g in q.gpus(q.gpu_snapshot())}
    assert gpus == {0: "hot (90 °C, [queue] hot_celsius = 85)", 1: "XID 79", 2: None}
    # GPU 0 in MIG mode (issue 42) is no place: its instances are, once NVML has read their memory
    in_mig = q.gpus(snapshot({0: 40, 1: 40, 2: 40}, {"1": "XID 79"}, mig=True))
    assert {g.index: g.unusable for g in in_mig} == {1: "XID 79", 2: None}
    (placed,) = q.tick(10.0, [waiting_signals()])
    assert placed[0] == "w" and placed[1].gpus == (2,)
    q = HostQueue(QueueConfig(), lambda: snapshot({0: 90}))
    assert q.tick(10.0, [waiting_signals()]) == []
    row = q.job_status(JobStatus("w", state="queued", queue=QueueStatus(request="10 GiB on 1 GPU")))
    assert row.queue.position == 1 and row.state_reason.startswith("queued #1: needs 10 GiB on 1 GPU; 0 with room")
    assert "not placing on GPU 0: hot" in row.queue.reason


def test_on_a_host_with_users_the_job_files_directory_must_be_the_supervisors_alone(tmp_path):
    """Each job file is its submitter's (0600): a directory they can search would let them rewrite it after submit,
    past every check the submit made (issue 32)."""
    cfg = host(tmp_path)
    cfg.write_text(cfg.read_text().replace("[supervisor]\n", '[supervisor]\nsocket_group = "root"\n'))
    (tmp_path / "jobs.d").chmod(0o755)
    with pytest.raises(ConfigError, match=r"supervisor.jobs_dir: .*jobs.d is open to other users \(mode 0755\).*chmod 700"):
        load_config(cfg)
    (tmp_path / "jobs.d").chmod(0o700)
    assert load_config(cfg).supervisor.socket_group == "root"
    write_atomically_dir = tmp_path / "fresh" / "jobs.d"
    submit_into = write_atomically_dir / "a.toml"
    from isaacd.config.jobs_dir import write_atomically
    write_atomically(submit_into, "[[jobs]]\nname = \"a\"\n")
    assert write_atomically_dir.stat().st_mode & 0o777 == 0o700  # submit makes it root's alone


# ---- a request this host can never hold: refused at submit, naming what the host has ----------------------------
@pytest.mark.parametrize("text, words", [
    ('gpus = 4', 'jobs[0] (name = "a").gpus: asks 4 GPUs; this host has 2 (GPU 0, 1): lower gpus to 2 or fewer'),
    ('gpu_memory = "200GB"', 'jobs[0] (name = "a").gpu_memory: "200GB" (186.3 GiB) is more than any GPU here holds: '
                             'the largest is GPU 0 with 140 GiB (NVML\'s total); lower gpu_memory'),
    ('gpus = 2\ngpu_memory = "141GiB"', 'asks 2 GPUs with "141GiB" each; this host has 0 that large'),
])
def test_a_request_larger_than_the_host_is_refused_naming_what_it_has(tmp_path, text, words):
    sup = Sup(host(tmp_path), snapshot({0: 40, 1: 40}))  # two 140 GiB GPUs
    with pytest.raises(ValueError) as info:
        submit_job(sup, f'[[jobs]]\nname = "a"\n{text}\n', "/home/alice/a.toml")
    assert str(info.value).startswith('not submitted: /home/alice/a.toml: jobs[0] (name = "a").gpu')
    assert words in str(info.value), info.value
    assert sup.reloads == 0 and list((tmp_path / "jobs.d").iterdir()) == []


def test_what_fits_an_empty_host_is_submitted_and_unknown_gpus_refuse_nothing(tmp_path):
    sup = Sup(host(tmp_path), snapshot({0: 40, 1: 40}))
    assert "queued #1" in submit_job(sup, '[[jobs]]\nname = "a"\ngpus = 2\ngpu_memory = "140GiB"\n', "a.toml")
    sup = Sup(host(tmp_path))  # no GPU layer: the job waits, saying so, rather than being refused
    assert "queued #1" in submit_job(sup, '[[jobs]]\nname = "b"\ngpus = 64\n', "b.toml")


def test_submit_says_what_the_first_pass_made_of_the_job():
    from isaacd.scheduling.submit import _said

    def row(state: str, **q: Any) -> JobStatus:
        return JobStatus("a", state=state, state_reason=q.pop("why", None), queue=QueueStatus(**q) if q else None)

    assert _said(row("starting", placement=(1,))) == "placed on GPU 1, starting"
    assert _said(row("starting", placement=(2, 3))) == "placed on GPUs 2, 3, starting"
    assert _said(row("queued", position=2, reason="needs 12 GiB on 1 GPU", why="queued #2: needs 12 GiB on 1 GPU")) \
        == "queued #2: needs 12 GiB on 1 GPU"
    assert _said(row("queued", request="12 GiB on 1 GPU")) is None  # no pass yet: wait for one
    assert _said(row("pending")) is None  # not ticked yet (the reload shows it at once): wait for the first tick
    assert _said(row("stopped", why="autostart = false")) == "stopped (autostart = false)"  # no queue: its state


def test_the_queue_settings_in_force_are_the_reloaded_ones():
    """Issue 42: `[queue]` applied on reload, not only at a restart: once started, the hook reads the config in
    force (a reload replaces it), so a new hot_celsius takes the hot GPU back at the next pass."""
    from types import SimpleNamespace

    q = HostQueue(QueueConfig(hot_celsius=85), lambda: snapshot({0: 90}))
    assert q.tick(10.0, [waiting_signals()]) == []  # GPU 0 is too hot under the config it was built with
    running = SimpleNamespace(config=parse_config('[queue]\nhot_celsius = 95\n[[jobs]]\nname = "cp"\n', "t", Path(".")))
    q.start(running)
    (placed,) = q.tick(11.0, [waiting_signals()])
    assert placed[0] == "w" and placed[1].gpus == (0,)
    running.config = parse_config('[queue]\nhot_celsius = 80\n[[jobs]]\nname = "cp"\n', "t", Path("."))  # reloaded again
    assert q.gpus(q.gpu_snapshot())[0].unusable == "hot (90 °C, [queue] hot_celsius = 80)"
