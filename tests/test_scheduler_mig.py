"""MIG instances as places of the host's queue (issue 42, daemon/scheduling/room.py): one scenario each, named after
what a user of the host would notice; then the places a GPU snapshot gives, the saved placement, and what a job placed
on an instance is told (the launch's own environment and container devices, not the scheduler's answer).
No process runs here: tests/test_queue_mig_e2e.py runs two trainers on two instances through `isaacd run`."""

from __future__ import annotations

from pathlib import Path

import pytest

from isaacd.attempt.planner import LaunchPlan, LaunchPlanner
from isaacd.attempt.setting import JobSetting
from isaacd.config.schema import parse_config
from isaacd.gpu import GpuSampler, ManualClock, ScriptedSource
from isaacd.gpu.scripted import mig_memory
from isaacd.history.store import JobHistory
from isaacd.jobs.model import JobModel, JobState, LaunchIntent
from isaacd.runtimes.container_spec import ContainerSpec
from isaacd.scheduling.room import Gpu, PinnedJob, Room, pinned_places, places
from isaacd.scheduling.scheduler import GiB, Limits, QueueEntry, Request, schedule
from job_fakes import FakeClock

H100 = 80 * GiB


def mig(key: str, gib: float, used: float = 0, unusable: str | None = None, of_gib: float = 80) -> Gpu:
    """An instance of `gib` GiB on a GPU of `of_gib` GiB (an 80 GB H100 by default)."""
    return Gpu(key, int(gib * GiB), int(used * GiB), unusable, parent=int(key.split(":")[0]),
               parent_total_bytes=int(of_gib * GiB))


def mig_host() -> list[Gpu]:
    """GPU 0 in MIG mode: two 1g.10gb, one 2g.20gb, one 3g.40gb instance (as NVML reports them: a little under)."""
    return [mig("0:0", 9.75), mig("0:1", 9.75), mig("0:2", 19.5), mig("0:3", 39.5)]


def wants(name: str, mem_gib: float | None = 8, gpus: int = 1, priority: int = 0, order: float = 0.0,
          **kw) -> QueueEntry:  # noqa: ANN003
    mem = None if mem_gib is None else int(mem_gib * GiB)
    return QueueEntry(name, Request(gpus, mem), priority, order, waiting=True, **kw)


def holds(name: str, gpus: tuple, mem_gib: float | None = 8, priority: int = 0, since: float = 0.0,
          **kw) -> QueueEntry:  # noqa: ANN003
    mem = None if mem_gib is None else int(mem_gib * GiB)
    return QueueEntry(name, Request(len(gpus), mem), priority, 0.0, placement=gpus, placed_at=since, **kw)


def placed(s) -> dict[str, tuple]:  # noqa: ANN001
    return {p.job: p.gpus for p in s.placements}


# ---- the rules ---------------------------------------------------------------------------------------------------
def test_a_gpu_memory_job_goes_to_the_smallest_instance_that_holds_it():
    s = schedule([wants("cartpole", 8, order=1), wants("g1", 15, order=2), wants("camera", 30, order=3)],
                 mig_host(), now=0)
    assert placed(s) == {"cartpole": ("0:0",), "g1": ("0:2",), "camera": ("0:3",)}


def test_a_job_larger_than_every_instance_never_starts_and_says_what_the_largest_is():
    s = schedule([wants("big", 50)], mig_host(), now=0)
    assert placed(s) == {}
    why = s.waiting[0].reason
    assert "it can never start here" in why and "MIG 0:3 with 39.5 GiB" in why, why


def test_never_two_jobs_on_one_instance_even_when_both_would_fit_its_memory():
    host = [mig("0:0", 19.5)]
    s = schedule([wants("a", 4, order=1), wants("b", 4, order=2)], host, now=0)
    assert placed(s) == {"a": ("0:0",)}
    assert [w.job for w in s.waiting] == ["b"]
    # and a job already there, which asked for 4 of its 19.5 GiB, still holds it whole
    s = schedule([holds("a", ("0:0",), 4), wants("b", 4)], host, now=0)
    assert placed(s) == {} and s.waiting[0].reason.startswith("needs 4 GiB on 1 GPU; 0 with room")


def test_a_whole_gpu_job_on_a_host_of_mig_gpus_waits_saying_how_to_run():
    s = schedule([wants("whole", None)], mig_host(), now=0)
    assert placed(s) == {}
    why = s.waiting[0].reason
    assert why.startswith("needs 1 GPU (a whole GPU); a GPU in MIG mode is never placed on whole"), why
    assert "ask gpu_memory (at most 39.5 GiB, MIG 0:3)" in why and "nvidia-smi -i 0 -mig 0" in why


def test_a_gang_of_several_ranks_never_goes_on_instances():
    s = schedule([wants("gang", 8, gpus=2)], mig_host(), now=0)
    assert placed(s) == {}
    why = s.waiting[0].reason
    assert "several ranks run only on GPUs not in MIG mode" in why and "CUDA shows a process one MIG device" in why
    # beside a GPU not in MIG mode a gang of one GPU's worth still needs two such GPUs
    s = schedule([wants("gang", 8, gpus=2)], mig_host() + [Gpu(1, H100, 0), Gpu(2, H100, 0)], now=0)
    assert placed(s) == {"gang": (1, 2)}


def test_a_mixed_host_places_by_best_fit_over_instances_and_shared_gpus_alike():
    host = mig_host() + [Gpu(1, H100, 0)]
    jobs = [holds("big", (1,), 70), wants("small", 8, order=1), wants("mid", 9.9, order=2),
            wants("tight", 9.5, order=3), wants("whole", None, order=4), wants("wide", 45, order=5)]
    s = schedule(jobs, host, now=0)
    # small: GPU 1 has 10 GiB left (2 after it), a 9.75 GiB instance 1.75: the instance; mid: too big for that size,
    # GPU 1's 10 GiB is tighter (0.1 left) than the 19.5 GiB instance; tight: the other 9.75 GiB instance (0.25);
    # the whole-GPU job: no GPU not in MIG mode is free; wide: nothing has 45 GiB now
    assert placed(s) == {"small": ("0:0",), "mid": (1,), "tight": ("0:1",)}
    assert {w.job for w in s.waiting} == {"whole", "wide"}
    # an int GPU and "p:j" instances together: in the room's order, and never compared with each other
    assert list(Room.of(host, jobs, []).gpus) == ["0:0", "0:1", "0:2", "0:3", 1]


def test_a_higher_priority_preempts_the_job_on_an_instance_and_takes_it_whole():
    jobs = [holds("low", ("0:0",), 4, since=0), wants("urgent", 8, priority=10)]
    s = schedule(jobs, [mig("0:0", 9.75)], now=1000, limits=Limits(min_run_seconds=300))
    assert [(p.victim, p.by) for p in s.preemptions] == [("low", "urgent")]
    assert "preempting low" in s.waiting[0].reason
    # while low saves, nobody else takes the instance it leaves
    stopping = [holds("low", ("0:0",), 4, since=0, preempting=True), wants("urgent", 8, priority=10),
                wants("other", 2, order=5)]
    s = schedule(stopping, [mig("0:0", 9.75)], now=1001)
    assert placed(s) == {} and "waiting for low to save and stop" in s.waiting[0].reason


def test_a_blocked_job_is_reserved_an_instance_by_its_holders_estimate():
    jobs = [holds("long", ("0:0",), 8, ends_at=5000.0, preemptible=False), wants("next", 8, order=1)]
    s = schedule(jobs, [mig("0:0", 9.75)], now=1000)
    assert s.reservation is not None and (s.reservation.gpus, s.reservation.at) == (("0:0",), 5000.0)
    assert "reserved: MIG 0:0 once long ends" in s.waiting[0].reason


def test_a_pinned_job_on_an_instance_keeps_the_queue_off_it():
    pins = [PinnedJob("mine", pinned_places(["0:1"], [0]))]
    s = schedule([wants("a", 8)], [mig("0:1", 9.75), mig("0:2", 19.5)], now=0, pinned=pins)
    assert placed(s) == {"a": ("0:2",)}


def test_memory_others_use_on_an_instance_is_not_given_away():
    s = schedule([wants("a", 8)], [mig("0:0", 9.75, used=3)], now=0)
    assert placed(s) == {}


def test_a_hot_or_unhealthy_instance_takes_no_new_job():
    s = schedule([wants("a", 8)], [mig("0:0", 9.75, unusable="XID 79"), mig("0:1", 9.75)], now=0)
    assert placed(s) == {"a": ("0:1",)}


# ---- quotas: a job on an instance holds the instance whole ---------------------------------------------------------
def seven_slices() -> list[Gpu]:
    """An 80 GB H100 in MIG mode as seven 1g.10gb instances (9.75 GiB each, as NVML reports them)."""
    return [mig(f"0:{j}", 9.75) for j in range(7)]


def test_a_job_on_an_instance_counts_the_instances_share_of_its_gpu_against_a_gpus_quota():
    from isaacd.scheduling.quota import Quota, Quotas

    # four half-GiB jobs: each holds a 1g.10gb instance whole, 9.75/80 = 0.12 of the H100 (not 0.5/9.75 = 0.05 of
    # the instance, which let all four past a quarter of a GPU)
    jobs = [wants(f"a{k}", 0.5, order=k, owner="alice") for k in range(4)]
    s = schedule(jobs, seven_slices(), now=0, quotas=Quotas(users={"alice": Quota(gpus=0.25)}))
    assert placed(s) == {"a0": ("0:0",), "a1": ("0:1",)}
    assert [(w.job, w.reason) for w in s.waiting][0] == (
        "a2", "alice's quota: 0.24 of 0.25 GPUs in use (this job needs 0.12); it starts when enough of them is free")
    # the same count for the jobs already placed, at the next pass
    held = [holds("a0", ("0:0",), 0.5, owner="alice"), holds("a1", ("0:1",), 0.5, owner="alice"),
            wants("a2", 0.5, order=2, owner="alice")]
    s = schedule(held, seven_slices(), now=0, quotas=Quotas(users={"alice": Quota(gpus=0.25)}))
    assert placed(s) == {} and s.waiting[0].reason.startswith("alice's quota: 0.24 of 0.25 GPUs in use")


def test_a_job_on_an_instance_counts_the_instances_memory_against_a_gpu_memory_quota():
    from isaacd.scheduling.quota import Quota, Quotas

    quotas = Quotas(users={"alice": Quota(gpu_memory_bytes=16 * GiB)})
    jobs = [wants("a0", 2, order=0, owner="alice"), wants("a1", 2, order=1, owner="alice"),
            wants("bob", 2, order=2, owner="bob")]
    s = schedule(jobs, seven_slices(), now=0, quotas=quotas)
    # 2 GiB asked, 9.75 GiB held: a second instance would take alice to 19.5 GiB of her 16; bob's job starts past hers
    assert placed(s) == {"a0": ("0:0",), "bob": ("0:1",)}
    assert s.waiting[0].reason == ("alice's quota: 9.75 of 16 GiB of GPU memory in use (this job needs 9.75 GiB); it "
                                   "starts when enough of it is free")


def test_on_a_mixed_host_a_gpu_memory_job_on_the_shared_gpu_still_counts_its_ask():
    from isaacd.scheduling.quota import Quota, Quotas

    # GPU 1 (not in MIG mode) is the best fit for 12 GiB: asked / its memory, as before MIG
    s = schedule([wants("a", 12, owner="alice"), wants("b", 12, order=1, owner="alice")],
                 seven_slices() + [Gpu(1, H100, 0)], now=0, quotas=Quotas(users={"alice": Quota(gpus=0.15)}))
    assert placed(s) == {"a": (1,)}
    assert s.waiting[0].reason.startswith("alice's quota: 0.15 of 0.15 GPUs in use (this job needs 0.15)")


H200 = 143771 * 2**20  # as NVML reports an H200's memory (140.4 GiB)


def h200_mixed_host(others_use_gib: float = 100) -> list[Gpu]:
    """GPU 0 an H200 in MIG mode (a 1g.18gb and a 3g.71gb: an eighth and half of its memory), GPU 1 an H200 not in MIG
    mode that another team uses `others_use_gib` of."""
    return [Gpu("0:0", H200 // 8, 0, parent=0, parent_total_bytes=H200),
            Gpu("0:1", H200 // 2, 0, parent=0, parent_total_bytes=H200), Gpu(1, H200, int(others_use_gib * GiB))]


@pytest.mark.parametrize("quota, needs", [
    (dict(gpus=0.1), "alice's quota: 0 of 0.1 GPUs in use (this job needs 0.12)"),
    (dict(gpu_memory_bytes=12 * GiB), "alice's quota: 0 of 12 GiB of GPU memory in use (this job needs 17.55 GiB)"),
])
def test_best_fit_within_the_quota_puts_a_job_on_a_shared_gpu_when_the_tightest_instance_is_past_it(quota, needs):
    from isaacd.scheduling.quota import Quota, Quotas

    # 8 GiB: the 1g.18gb (17.55 GiB, 0.125 of the H200, held whole) is the tightest fit, past alice's quota; beside
    # the other team on GPU 1 the same job holds 8 / 140.4 = 0.06 GPU and 8 GiB, within it: it starts there
    jobs = [wants("a1", 8, order=1, owner="alice"), wants("bob", 8, order=2, owner="bob"),
            wants("a2", 8, order=3, owner="alice")]
    s = schedule(jobs, h200_mixed_host(), now=0, quotas=Quotas(users={"alice": Quota(**quota)}))
    # bob has no quota: he gets the instance alice's job left; alice's second job would take her past her quota
    # wherever it went, so it waits for it, as before
    assert placed(s) == {"a1": (1,), "bob": ("0:0",)}
    assert [p.reason for p in s.placements][0] == f"fits; within its owner's quota (not on MIG 0:0: {needs})"
    assert [w.job for w in s.waiting] == ["a2"] and s.waiting[0].reason.startswith("alice's quota: ")
    # without a quota the same job takes the tightest fit, the instance, as any job does
    assert placed(schedule(jobs[:1], h200_mixed_host(), now=0)) == {"a1": ("0:0",)}


def test_best_fit_within_the_quota_keeps_the_backfill_rules_of_a_job_behind_a_blocked_one():
    from isaacd.scheduling.quota import Quota, Quotas

    # a whole-GPU job is blocked, reserved GPU 1 (the only GPU not in MIG mode) once `other` ends there; alice's 8 GiB
    # job behind it fits her quota only on GPU 1, inside that reservation: not preemptible and without an estimate,
    # it may not start there (without her quota it starts on the instance, beside the reservation)
    quotas = Quotas(users={"alice": Quota(gpus=0.1)})
    jobs = [holds("other", (1,), 30, ends_at=600.0), wants("big", None, order=0),
            wants("a1", 8, order=1, owner="alice", preemptible=False)]
    assert placed(schedule(jobs, h200_mixed_host(0), now=0)) == {"a1": ("0:0",)}
    s = schedule(jobs, h200_mixed_host(0), now=0, quotas=quotas)
    assert placed(s) == {} and s.reservation is not None and s.reservation.gpus == (1,)
    assert [w.job for w in s.waiting] == ["big", "a1"]
    assert s.waiting[1].reason.endswith("no estimate of its run time (no earlier run of its task, library and "
                                        "num_envs here)")
    # preemptible, it starts ahead on GPU 1 and says both why it is there and that it gives it back
    jobs[2] = wants("a1", 8, order=1, owner="alice", preemptible=True)
    s = schedule(jobs, h200_mixed_host(0), now=0, quotas=quotas)
    assert placed(s) == {"a1": (1,)} and s.placements[0].backfill
    assert s.placements[0].reason == ("ahead of big (blocked), preemptible: gives the GPUs back when it could run; "
                                      "within its owner's quota (not on MIG 0:0: alice's quota: 0 of 0.1 GPUs in use "
                                      "(this job needs 0.12))")


# ---- the places of a GPU snapshot --------------------------------------------------------------------------------
def sampler(events: list | None = None, gpu1: bool = True) -> GpuSampler:
    """A scripted mixed host: GPU 0 an H100 in MIG mode (1g.10gb x2, 3g.40gb), GPU 1 an H100 not in MIG mode (`gpu1`
    False: GPU 0 alone)."""
    clock = ManualClock(1_700_000_000.0)
    script = {"gpus": [{"index": 0, "model": "NVIDIA H100 80GB HBM3"}] +
                      [{"index": 1, "model": "NVIDIA H100 80GB HBM3"}] * gpu1 + [
                       {"index": 0, "mig": True, "parent": 0, "model": "NVIDIA H100 80GB HBM3 MIG 1g.10gb"},
                       {"index": 1, "mig": True, "parent": 0, "model": "NVIDIA H100 80GB HBM3 MIG 1g.10gb"},
                       {"index": 2, "mig": True, "parent": 0, "model": "NVIDIA H100 80GB HBM3 MIG 3g.40gb"}],
              "defaults": {"memory_total_bytes": 81559 * 2**20},
              "events": events or []}
    s = GpuSampler(ScriptedSource(script, clock=clock), clock=clock)
    s.poll_fast()
    return s


def test_a_gpu_in_mig_mode_is_not_a_place_its_instances_are_with_their_own_memory():
    got = places(sampler().snapshot(), hot_celsius=85)
    assert [(g.index, g.parent) for g in got] == [("0:0", 0), ("0:1", 0), ("0:2", 0), (1, None)]
    total = 81559 * 2**20
    assert [g.total_bytes for g in got] == [total // 8, total // 8, total // 2, total]


def test_an_instance_is_as_hot_and_as_unhealthy_as_its_gpu():
    snap = sampler([{"t": 0, "gpu": 0, "temperature_celsius": 90}]).snapshot()
    assert {g.index: g.unusable for g in places(snap, hot_celsius=85)} == {
        "0:0": "hot (90 °C, [queue] hot_celsius = 85)", "0:1": "hot (90 °C, [queue] hot_celsius = 85)",
        "0:2": "hot (90 °C, [queue] hot_celsius = 85)", 1: None}


def test_the_scripted_mig_device_reads_as_nvml_reads_one():
    events = [{"t": 0, "gpu": "0:1", "memory_used_bytes": 3 * GiB, "processes": [{"pid": 4242, "used_bytes": 3 * GiB}]},
              {"t": 0, "gpu": "0:2", "memory_used_bytes": 5 * GiB}]
    snap = sampler(events).snapshot()
    inst, parent = snap.samples["0:1"], snap.samples["0"]
    assert snap.gpus["0:1"].uuid.startswith("MIG-") and snap.gpus["0:1"].is_mig
    # the instance's own memory (nvmlDeviceGetMemoryInfo on the MIG handle), nothing NVML has only on the parent
    assert inst.memory_total_bytes == 81559 * 2**20 // 8 and inst.memory_used_bytes == 3 * GiB
    assert inst.utilization_gpu_ratio is None and inst.temperature_celsius is None and inst.power_watts is None
    assert [(p.gpu, p.pid) for p in inst.processes] == [("0:1", 4242)]
    # the MIG-mode GPU: processes per MIG device only; its memory used the aggregate of its instances
    assert parent.processes is None and parent.temperature_celsius is not None
    assert parent.memory_used_bytes == snap.samples["0:0"].memory_used_bytes + 3 * GiB + 5 * GiB
    assert mig_memory("NVIDIA H200 MIG 7g.141gb", 143771 * 2**20) == 143771 * 2**20  # all 8 slices


# ---- isaacd submit: what can never fit a host with MIG is refused with the queue's own reason ---------------------
def submit_to(tmp_path: Path, snap, text: str) -> str:  # noqa: ANN001
    from isaacd.scheduling.submit import submit_job
    from test_queue_config import Sup, host

    tmp_path.mkdir(exist_ok=True)
    return submit_job(Sup(host(tmp_path), snap), f'[[jobs]]\nname = "a"\n{text}\n', "/home/alice/a.toml")


def queue_says(gpus: list[Gpu], request: Request) -> str:
    """What the queue would answer the job if it were queued (its reason, less the cancel a refused job has no use
    for)."""
    (w,) = schedule([QueueEntry("a", request, 0, 0.0, waiting=True)], gpus, now=0).waiting
    return w.reason.removesuffix("; or `isaacd cancel` it")


@pytest.mark.parametrize("gpu1, text, field, asks", [
    (True, "gpus = 2", "gpus", Request(2, None)),  # a gang: one GPU here is not in MIG mode
    (True, 'gpus = 2\ngpu_memory = "8GiB"', "gpus", Request(2, 8 * GiB)),  # a gang never on instances
    (False, "gpus = 1", "gpus", Request(1, None)),  # a whole GPU where every GPU is in MIG mode
    (False, 'gpu_memory = "50GiB"', "gpu_memory", Request(1, 50 * GiB)),  # more than the 3g.40gb, the largest place
])
def test_submit_refuses_what_can_never_fit_a_host_with_mig_with_the_queues_reason(tmp_path, gpu1, text, field, asks):
    snap = sampler(gpu1=gpu1).snapshot()
    with pytest.raises(ValueError) as info:
        submit_to(tmp_path, snap, text)
    said = str(info.value)
    assert said.startswith(f'not submitted: /home/alice/a.toml: jobs[0] (name = "a").{field}: needs '), said
    assert said.endswith(queue_says(places(snap, 85), asks)), said  # word for word what it would wait saying
    assert "isaacd cancel" not in said  # there is nothing to cancel
    assert list((tmp_path / "jobs.d").iterdir()) == []


def test_submit_takes_what_fits_a_host_with_mig_and_a_layout_still_being_made(tmp_path):
    only_mig = sampler(gpu1=False).snapshot()
    assert "queued #1" in submit_to(tmp_path / "a", only_mig, 'gpu_memory = "30GiB"')  # the 3g.40gb holds it
    assert "queued #1" in submit_to(tmp_path / "b", sampler().snapshot(), "gpus = 1")  # GPU 1, not in MIG mode
    # GPU 0 in MIG mode with no instance yet (they appear at isaacd's restart): nothing refused, the job waits
    clock = ManualClock(1_700_000_000.0)
    bare = GpuSampler(ScriptedSource({"gpus": [{"index": 0, "mig_mode": True}, {"index": 1}]}, clock=clock),
                      clock=clock)
    bare.poll_fast()
    assert "queued #1" in submit_to(tmp_path / "c", bare.snapshot(), "gpus = 2")


# ---- the saved placement -------------------------------------------------------------------------------------------
def test_a_placement_on_an_instance_is_saved_and_read_back_and_old_documents_load_unchanged():
    m = JobModel(state=JobState.RUNNING, placement=("0:1",))
    assert JobModel.from_json(m.to_json()).placement == ("0:1",)
    old = JobModel(state=JobState.RUNNING, placement=(0, 3)).to_json()
    assert JobModel.from_json(old).placement == (0, 3)
    with pytest.raises(ValueError):
        JobModel.from_json({**old, "placement": ["GPU-1234"]})


# ---- what the job is told: the launch's own spec ---------------------------------------------------------------
def job_of(tmp_path: Path, runtime: str):
    container = '\n[jobs.container]\nimage = "/:O"' if runtime == "podman" else ""
    toml = (f'[supervisor]\nstate_dir = "{tmp_path}/state"\n[[jobs]]\nname = "cp"\nlog_root = "logs"\n'
            f'runtime = "{runtime}"\ncommand = ["sleep", "9"]\nspare = false\ngpu_memory = "8GiB"\n{container}\n')
    return parse_config(toml, "t.toml", tmp_path).jobs[0]


def launch(tmp_path: Path, runtime: str, place: tuple) -> tuple:
    snap = sampler().snapshot()
    setting = JobSetting.of(job_of(tmp_path, runtime), lambda: snap)
    setting.place(place)
    plan = LaunchPlanner(setting, runtime, tmp_path / "state", FakeClock(), lambda *a, **k: None,
                         lambda program: None, lambda: None).plan(LaunchIntent(), JobHistory("cp"), None)
    assert isinstance(plan, LaunchPlan)
    return plan, snap


def test_a_process_job_on_an_instance_gets_its_mig_uuid_as_cuda_visible_devices(tmp_path):
    plan, snap = launch(tmp_path, "process", ("0:2",))
    assert plan.spec.env["CUDA_VISIBLE_DEVICES"] == snap.gpus["0:2"].uuid
    assert plan.spec.env["CUDA_VISIBLE_DEVICES"].startswith("MIG-")
    assert plan.spec.job.device == "cuda:0"  # the one CUDA device it sees
    # on a GPU not in MIG mode nothing changes: cuda:<its GPU>, no CUDA_VISIBLE_DEVICES of isaacd's
    plan, _ = launch(tmp_path, "process", (1,))
    assert plan.spec.job.device == "cuda:1" and "CUDA_VISIBLE_DEVICES" not in plan.spec.job.environment


def test_a_podman_job_on_an_instance_gets_its_cdi_device(tmp_path):
    plan, _ = launch(tmp_path, "podman", ("0:2",))
    cs = ContainerSpec.from_launch(plan.spec, "tok", 1)
    assert cs.devices == ["nvidia.com/gpu=0:2"]
    words = cs.podman_run_options()
    assert words[words.index("--device") + 1] == "nvidia.com/gpu=0:2"
    assert "CUDA_VISIBLE_DEVICES" not in cs.env  # CDI gives the container that instance alone


# ---- /metrics ------------------------------------------------------------------------------------------------------
def test_metrics_show_each_instance_as_its_own_place_held_whole_and_no_row_for_its_gpu():
    from isaacd.status.types import JobStatus, QueueStatus, Status
    from test_metrics_queue import by, scrape

    status = Status(jobs=(JobStatus("cartpole", state="running", owner="alice",
                                    queue=QueueStatus(memory_bytes=4 * GiB, placement=("0:2",))),))
    got = scrape(status, sampler([{"t": 0, "gpu": "0:2", "memory_used_bytes": 3 * GiB}]))
    total = 81559 * 2**20
    alloc, idle = by(got["isaacd_gpu_memory_allocated_bytes"], "gpu"), by(got["isaacd_gpu_memory_idle_bytes"], "gpu")
    # the 3g.40gb instance is held whole by a job that asked 4 GiB of it: none of it is idle
    assert alloc == {"0:0": 0, "0:1": 0, "0:2": total // 2, "1": 0}
    assert idle["0:2"] == 0 and idle["0:0"] == total // 8 - snapshot_used(got, "0:0")
    # its GPU: joined through isaacd_gpu_info's parent_gpu, as every MIG device's series
    info = {dict(k)["gpu"]: dict(k)["parent_gpu"] for k in got["isaacd_gpu_info"] if dict(k)["mig"] == "true"}
    assert info == {"0:0": "0", "0:1": "0", "0:2": "0"}
    # as quotas count it: the instance it holds whole, not the 4 GiB it asked: the 3g.40gb's share of its H100 (half
    # its memory) and the instance's memory
    assert by(got["isaacd_user_gpu_memory_allocated_bytes"], "user") == {"alice": total // 2}
    assert by(got["isaacd_user_gpus"], "user") == {"alice": pytest.approx(0.5)}


def snapshot_used(got: dict, gpu: str) -> float:
    return next(v for k, v in got["isaacd_gpu_memory_used_bytes"].items() if dict(k)["gpu"] == gpu)


def test_an_evaluation_beside_a_job_on_an_instance_runs_on_that_instance(tmp_path):
    from isaacd.attempt.eval_launch import first_gpu

    snap = sampler().snapshot()
    setting = JobSetting.of(job_of(tmp_path, "process"), lambda: snap)
    setting.place(("0:1",))
    assert first_gpu(setting.cfg) == snap.gpus["0:1"].uuid  # CUDA_VISIBLE_DEVICES of the evaluation (issue 41)
    setting.place((1,))
    assert first_gpu(setting.cfg) == "1"


def test_a_gpu_in_mig_mode_with_no_instance_yet_is_no_place_from_nvml_or_the_script():
    import pynvml
    from test_gpu_nvml import FakeNvml

    from isaacd.gpu.nvml import NvmlSource

    class NoInstanceYet(FakeNvml):  # GPU 0 in MIG mode, no GPU instance created on it
        def nvmlDeviceGetMigDeviceHandleByIndex(self, h, j):  # noqa: ANN001, ANN202
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)

    listed = NvmlSource(NoInstanceYet(2, mig=True), register_xid=False).open()
    assert [(g.key, g.mig_mode) for g in listed] == [("0", True), ("1", False)]
    clock = ManualClock(1_700_000_000.0)
    s = GpuSampler(ScriptedSource({"gpus": [{"index": 0, "mig_mode": True}, {"index": 1}]}, clock=clock), clock=clock)
    s.poll_fast()
    assert [g.index for g in places(s.snapshot(), hot_celsius=85)] == [1]  # CUDA would see no device on GPU 0
    # a GPU with MIG devices is in MIG mode, as NVML says
    assert sampler().snapshot().gpus["0"].mig_mode and not sampler().snapshot().gpus["1"].mig_mode
    # and a job that waits there says why, not "no GPU"
    from isaacd.config.queue import QueueConfig
    from isaacd.scheduling.hook import HostQueue
    from test_queue_config import waiting_signals

    only = GpuSampler(ScriptedSource({"gpus": [{"index": 0, "mig_mode": True}]}, clock=clock), clock=clock)
    only.poll_fast()
    q = HostQueue(QueueConfig(), only.snapshot)
    assert q.tick(10.0, [waiting_signals()]) == []
    assert q.waiting["w"].reason.startswith("no place on this host: GPU 0 in MIG mode with no MIG instance")


def test_no_launch_on_an_instance_whose_uuid_the_inventory_has_not_listed_yet(tmp_path):
    from isaacd.jobs.messages import LaunchRefused

    inventory: list = [None]  # NVML not read yet
    setting = JobSetting.of(job_of(tmp_path, "process"), lambda: inventory[0])
    setting.place(("0:2",))
    plan = LaunchPlanner(setting, "process", tmp_path / "state", FakeClock(), lambda *a, **k: None,
                         lambda program: None, lambda: None).plan(LaunchIntent(), JobHistory("cp"), None)
    assert isinstance(plan, LaunchRefused) and plan.settle is None  # retried after a backoff,
    assert not plan.crash_loop  # and never the job's end for a crash loop: the trainer is not to blame
    assert "MIG instance 0:2: its UUID is not known yet" in plan.reason
    # once the inventory lists it, the next tick's place() names it and the launch goes ahead
    inventory[0] = sampler().snapshot()
    setting.place(("0:2",))
    assert setting.cfg.environment["CUDA_VISIBLE_DEVICES"] == inventory[0].gpus["0:2"].uuid
