"""CUDA out of memory in the job state machine (issue 23), edge by edge, on a fake clock.

A start-up that ran out of GPU memory (before the attempt's first iteration) is retried once, then fails with one
line; with [jobs.oom] step_down it is relaunched with fewer environments down to the floor. After training ran it
is restarted like any crash, and a repeated one says what the GPU's memory did.
"""

from __future__ import annotations

from dataclasses import dataclass

from test_job_machine import Job, Policy, crash

from isaacd.jobs import machine, policy
from isaacd.jobs.effects import Launch
from isaacd.jobs.messages import CudaOom, Exited, Progressed, Restart, Start, Stop, Tick, WatchdogTrip
from isaacd.jobs.model import JobModel, JobState, Origin

S = JobState
GPU = "GPU 0 (NVIDIA H200) has 139.5 of 139.8 GiB in use: 120.0 GiB by pid 4242 (python3, not an isaacd job)"
TORCH = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of ..."


@dataclass(frozen=True)
class Oom:
    step_down: float | None = None
    min_num_envs: int | None = None


STEP = Oom(step_down=0.5, min_num_envs=256)


class OomJob(Job):
    def __init__(self, state: JobState = S.PENDING, oom: Oom = Oom(), num_envs: int = 1024,
                 policy_: Policy = Policy(max_restarts=10), **model):  # noqa: ANN003
        super().__init__(state, policy_, **model)
        self.oom, self.num_envs = oom, num_envs

    def context(self) -> machine.Context:
        return machine.Context("job", self.now, self.policy, 10.0, self.num_envs, self.oom)

    def launches(self) -> int:
        return len([e for e in self.effects if isinstance(e, Launch)])

    def in_use(self) -> int:
        return policy.num_envs_in_use(self.m.num_envs, self.m.num_envs_of, self.num_envs)

    def relaunch(self) -> "OomJob":
        """Wait out the backoff and tick: the next attempt starts."""
        self.at(self.m.backoff_seconds or 0.0).send(Tick())
        assert self.m.state == S.STARTING, self.m
        return self


def oom(kind: str = "torch", line: str = TORCH, trend: str | None = None, ran: float = 30.0,
        moved: bool = False) -> Exited:
    fix = "free the GPU memory other processes hold, lower num_envs"
    return Exited(f"exited with code 1: {line}", "cuda_oom", success=False, ran_seconds=ran, moved_forward=moved,
                  cuda_oom=CudaOom(kind, line, fix, gpu=GPU, trend=trend, facts={"gpus": [{"gpu": "0"}]}))


def starting(**kw) -> OomJob:  # noqa: ANN003
    return OomJob(**kw).send(Tick())


def oom_until_failed(j: OomJob) -> list[int]:
    """Every start-up runs out of GPU memory: the num_envs of each attempt, until the job fails."""
    sizes = []
    while j.m.state != S.FAILED:
        sizes.append(j.in_use())
        j.send(oom())
        if j.m.state == S.BACKING_OFF:
            j.relaunch()
    return sizes


# ---- start-up, default policy -----------------------------------------------------------------
def test_startup_oom_is_retried_once_in_case_a_neighbour_freed_memory():
    j = starting().send(oom())
    assert j.m.state == S.BACKING_OFF and j.m.startup_ooms == 1
    assert "CUDA out of memory at start-up with num_envs = 1024; trying once more" in j.m.reason
    assert dict(j.m.restarts_by_reason) == {"cuda_oom": 1} and dict(j.m.cuda_ooms) == {"startup": 1}
    assert j.events("cuda_oom") == [{"phase": "startup", "kind": "torch", "line": TORCH, "num_envs": 1024,
                                     "configured_num_envs": 1024, "gpu": GPU, "trend": None,
                                     "gpus": [{"gpu": "0"}]}]
    assert j.relaunch().in_use() == 1024  # the same size again


def test_startup_oom_twice_fails_with_one_line_naming_gpu_holder_num_envs_and_fix():
    j = starting().send(oom()).relaunch().send(oom())
    assert (j.m.state, j.m.final) == (S.FAILED, True)
    line = j.m.reason
    assert "\n" not in line and line.startswith("CUDA out of memory at start-up, twice with num_envs = 1024")
    assert GPU in line  # the GPU, its memory in use and by whom
    assert "Fix: free the GPU memory other processes hold, lower num_envs" in line
    assert "[jobs.oom] step_down = 0.5 and min_num_envs" in line and "`isaacd start job`" in line
    assert j.events("failed") == [{"reason": line}]
    assert dict(j.m.cuda_ooms) == {"startup": 2} and dict(j.m.restarts_by_reason) == {"cuda_oom": 1}


def test_startup_oom_failure_is_not_relaunched_by_time_passing():
    j = starting().send(oom()).relaunch().send(oom())
    j.at(3600).send(Tick())
    assert j.m.state == S.FAILED and j.launches() == 0


def test_startup_oom_without_gpu_figures_still_says_num_envs_and_fix():
    no_gpu = Exited("exited with code 1: x", "cuda_oom", False, ran_seconds=1.0,
                    cuda_oom=CudaOom("cuda", "torch.AcceleratorError: CUDA error: out of memory", "lower num_envs"))
    j = starting().send(no_gpu).relaunch().send(no_gpu)
    assert j.m.state == S.FAILED
    assert "num_envs = 1024" in j.m.reason and "GPU memory use not known" in j.m.reason
    assert "Fix: lower num_envs" in j.m.reason


def test_physx_buffer_overflow_failure_names_the_buffer_not_step_down():
    line = ("PhysX error: Patch buffer overflow detected, please increase its size to at least 262144 in the scene "
            "desc!")
    msg = Exited("exited with code 1: x", "cuda_oom", False, cuda_oom=CudaOom(
        "physx_buffer", line, "raise env.sim.physx.gpu_max_rigid_patch_count=<larger> (a Hydra override in "
                              "extra_args) or lower num_envs", gpu=GPU))
    j = starting().send(msg).relaunch().send(msg)
    assert j.m.state == S.FAILED and "env.sim.physx.gpu_max_rigid_patch_count" in j.m.reason
    assert "step_down" not in j.m.reason


# ---- start-up, step-down ------------------------------------------------------------------------
def test_startup_oom_steps_num_envs_down_and_relaunches():
    j = starting(oom=STEP).send(oom())
    assert j.m.state == S.BACKING_OFF and j.in_use() == 512
    assert j.events("num_envs_stepped_down")[0] | {"detail": ""} == {
        "from": 1024, "to": 512, "configured": 1024, "floor": 256, "detail": ""}
    assert "stepping down to 512" in j.m.reason and dict(j.m.restarts_by_reason) == {"cuda_oom": 1}
    assert j.relaunch().m.state == S.STARTING


def test_step_down_walks_to_the_floor_retries_there_once_then_fails():
    j = starting(oom=STEP)
    assert oom_until_failed(j) == [1024, 512, 256, 256]
    assert "twice with num_envs = 256 (stepped down from 1024 to the floor, [jobs.oom] min_num_envs)" in j.m.reason
    assert "or min_num_envs" in j.m.reason and "step_down = 0.5 and" not in j.m.reason


def test_step_down_is_bounded_by_the_floor_not_by_max_restarts():
    j = starting(oom=STEP, policy_=Policy(max_restarts=1))
    for _ in range(2):
        j.send(oom()).relaunch()
    assert j.in_use() == 256 and j.m.restart_times == ()  # the walk down is no crash loop


def test_step_down_stops_at_the_floor_not_below():
    j = starting(oom=Oom(step_down=0.5, min_num_envs=300), num_envs=1000)
    j.send(oom()).relaunch().send(oom())
    assert j.in_use() == 300  # 1000 -> 500 -> 300, never 250


def test_stepped_down_job_that_trains_keeps_its_num_envs_through_crashes():
    j = starting(oom=STEP).send(oom()).relaunch().send(Progressed(3)).send(crash())
    assert j.m.state == S.BACKING_OFF and j.in_use() == 512


def test_operator_restart_goes_back_to_the_configured_num_envs():
    j = starting(oom=STEP).send(oom()).relaunch().send(Progressed(3))
    j.send(Restart(Origin.OPERATOR, "operator restart (isaacd restart)"))
    assert j.events("num_envs_restored") == [{"from": 512, "to": 1024,
                                              "detail": "operator restart: back to the configured num_envs"}]
    j.send(Exited("exited with code 0", "exit_code", True))  # the stop it asked for
    assert j.in_use() == 1024


def test_operator_restart_of_a_failed_job_tries_the_configured_num_envs_again():
    j = starting(oom=STEP)
    oom_until_failed(j)
    j.send(Restart(Origin.OPERATOR, "operator restart")).send(Tick())
    assert j.m.state == S.STARTING and j.in_use() == 1024 and j.m.startup_ooms == 0


def test_operator_start_of_a_failed_job_keeps_the_stepped_num_envs_with_a_fresh_retry():
    j = starting(oom=STEP)
    oom_until_failed(j)
    j.send(Start(Origin.OPERATOR, "operator start")).send(Tick())
    assert j.m.state == S.STARTING and j.in_use() == 256
    j.send(oom())
    assert j.m.state == S.BACKING_OFF  # retried once again, not failed at once


def test_watchdog_restart_keeps_the_stepped_num_envs():
    j = starting(oom=STEP).send(oom()).relaunch().send(Progressed(3))
    j.send(WatchdogTrip("no_progress", "restart", "restart", "stuck", {}))
    assert j.events("num_envs_restored") == [] and j.in_use() == 512


def test_a_config_with_another_num_envs_voids_the_step_down():
    j = starting(oom=STEP).send(oom())
    j.num_envs = 2048  # a reload changed num_envs
    assert j.in_use() == 2048
    j.relaunch().send(oom())
    assert j.in_use() == 1024  # stepped from the new configured value


# ---- which class ------------------------------------------------------------------------------
def test_oom_after_the_first_iteration_is_the_training_class():
    j = starting(oom=STEP).send(Progressed(0)).send(oom())
    assert j.m.state == S.BACKING_OFF and j.in_use() == 1024  # no step-down: training ran with these envs
    assert j.events("cuda_oom")[0]["phase"] == "training" and dict(j.m.cuda_ooms) == {"training": 1}
    assert j.m.reason.startswith("CUDA out of memory after training ran, num_envs = 1024: exited with code 1")


def test_oom_while_starting_that_left_a_newer_checkpoint_is_the_training_class():
    j = starting().send(oom(moved=True))
    assert j.events("cuda_oom")[0]["phase"] == "training" and j.m.startup_ooms == 0


def test_training_oom_restarts_like_a_crash_from_the_newest_checkpoint():
    j = starting().send(Progressed(5)).send(oom(ran=3600.0, moved=True))
    crashed = starting().send(Progressed(5)).send(crash(ran=3600.0, moved=True))
    assert (j.m.state, j.m.launch.origin, j.m.backoff_seconds) == (
        crashed.m.state, crashed.m.launch.origin, crashed.m.backoff_seconds)
    assert j.m.launch.before_iteration is None  # resume from the newest checkpoint
    assert dict(j.m.restarts_by_reason) == {"cuda_oom": 1} and len(j.m.restart_times) == 1


def test_repeated_training_oom_says_the_memory_trend():
    trend = "GPU 0 memory in use went from 20.1 GiB to 139.7 GiB of 139.8 GiB over 41 min (peak 139.7 GiB)"
    j = starting().send(Progressed(0)).send(oom(trend=trend, moved=True))
    assert trend not in j.m.reason  # once may be a fluke
    j.relaunch().send(Progressed(40)).send(oom(trend=trend, moved=True))
    assert f"2 times in a row; {trend}" in j.m.reason and trend in j.m.last_restart_reason
    assert dict(j.m.cuda_ooms) == {"training": 2}


def test_repeated_training_oom_without_samples_says_so():
    j = starting().send(Progressed(0)).send(oom()).relaunch().send(Progressed(1)).send(oom())
    assert "2 times in a row; no GPU memory samples to show the trend" in j.m.reason


def test_another_crash_breaks_a_run_of_training_ooms():
    j = starting().send(Progressed(0)).send(oom()).relaunch().send(Progressed(1)).send(crash())
    assert j.m.training_ooms == 0
    j.relaunch().send(Progressed(2)).send(oom())
    assert "in a row" not in j.m.reason


def test_a_first_iteration_resets_the_startup_retry():
    j = starting().send(oom()).relaunch().send(Progressed(0)).send(crash()).relaunch().send(oom())
    assert j.m.state == S.BACKING_OFF  # a start-up that failed once after a good one is retried again


def test_training_oom_hits_the_restart_limit_like_any_crash():
    j = starting(policy_=Policy(max_restarts=2, window=1000.0))
    for _ in range(2):
        j.send(Progressed(0)).send(oom()).relaunch()
    j.send(Progressed(0)).send(oom())
    assert j.m.state == S.FAILED and "restart limit reached" in j.m.reason and "CUDA out of memory" in j.m.reason


def test_stop_in_flight_wins_over_an_oom_exit():
    j = starting().send(Stop(Origin.OPERATOR, "operator stop")).send(oom())
    assert j.m.state == S.STOPPED and j.events("cuda_oom") == []


# ---- persistence and policy -------------------------------------------------------------------
def test_model_round_trips_the_oom_fields():
    j = starting(oom=STEP).send(oom()).relaunch().send(Progressed(0)).send(oom())
    assert j.m.num_envs == 512 and j.m.cuda_ooms
    assert JobModel.from_json(j.m.to_json()) == j.m


def test_model_from_a_document_without_oom_fields_is_the_configured_num_envs():
    d = JobModel().to_json()
    for k in ("num_envs", "num_envs_of", "startup_ooms", "training_ooms", "cuda_ooms"):
        d.pop(k)
    assert JobModel.from_json(d) == JobModel()


def test_policy_next_num_envs():
    assert policy.next_num_envs(1024, STEP) == 512
    assert policy.next_num_envs(300, STEP) == 256
    assert policy.next_num_envs(256, STEP) is None
    assert policy.next_num_envs(1024, Oom()) is None
