"""PBT's exploit in the job core (issue 40): `ResumeFrom` in the job machine (pure, edge by edge), the copy of the
source's newest complete checkpoint (attempt/from_job.py, real files), and the timeline that starts at the copy
(attempt/setting.lineage), so a crash before the member's first save resumes the copy again, never nothing."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest
from backup_fakes import fake_checkpoint
from test_job_machine import Job, crash, persisted_before

from isaacd.attempt.from_job import copy_from_job
from isaacd.attempt.setting import lineage
from isaacd.history.store import Attempt, JobHistory
from isaacd.jobs import machine
from isaacd.jobs.effects import Launch, Persist
from isaacd.jobs.messages import LaunchRefused, Progressed, ResumeFrom, Settle, Tick
from isaacd.jobs.model import FromJob, JobModel, JobState, Origin
from isaacd.observations.checkpoints import choose_resume
from isaacd.os_seam.oscalls import RunAs

S = JobState
EXPLOIT = ResumeFrom(Origin.SWEEP, "sweep pop: exploit of lr-t003", "pop-t003", ("/logs/pop-t003/run2",))


# ---- the machine --------------------------------------------------------------------------------------------
def test_stopped_to_pending_on_resume_from_saves_a_fresh_launch_from_the_source():
    j = Job(S.STOPPED, final=True, rollbacks=1).send(EXPLOIT)
    assert j.m.state == S.PENDING and j.m.launch.fresh and not j.m.final and j.m.rollbacks == 0
    assert j.m.launch.from_job == FromJob("pop-t003", ("/logs/pop-t003/run2",))
    assert j.events("resume_from_job")[0]["source"] == "pop-t003" and not isinstance(j.reply, machine.Refused)
    j.send(Tick())
    launch = next(e for e in j.effects if isinstance(e, Launch))
    assert launch.intent.from_job.source == "pop-t003" and persisted_before(j.effects, Launch)


@pytest.mark.parametrize("busy", [S.PENDING, S.QUEUED, S.STOPPING, S.BACKING_OFF])
def test_resume_from_while_another_stop_or_launch_is_under_way_is_refused_and_changes_nothing(busy):
    j = Job(busy)
    before = j.m
    j.send(EXPLOIT)
    assert isinstance(j.reply, machine.Refused) and "ask again" in j.reply and j.m == before and j.effects == []


def test_a_training_member_saves_then_goes_again_at_once_from_the_copy_and_no_crash_loop_is_counted():
    from isaacd.jobs.effects import Signal
    from isaacd.jobs.model import Then

    j = Job().running().send(EXPLOIT)
    assert j.m.state == S.STOPPING and j.m.stop.then == Then.RESTART and j.m.stop.from_job.source == "pop-t003"
    assert persisted_before(j.effects, Signal)  # saved before the trainer is asked to save and stop
    assert JobModel.from_json(j.m.to_json()).stop.from_job == j.m.stop.from_job  # a new supervisor finishes it
    j.send(crash())  # (the trainer's exit after its save)
    assert j.m.state == S.BACKING_OFF and j.m.backoff_until == j.now and j.m.restart_times == ()
    assert j.m.launch.fresh and j.m.launch.from_job.source == "pop-t003"
    j.send(Tick())
    launch = next(e for e in j.effects if isinstance(e, Launch))
    assert j.m.state == S.STARTING and launch.intent.from_job.source == "pop-t003"


def test_resume_from_with_a_backup_target_is_refused():
    d = machine.decide(JobModel(state=S.STOPPED), EXPLOIT, machine.Context("job", 0.0, Job().policy, 10.0, backup=True))
    assert isinstance(d.reply, machine.Refused) and "[jobs.backup]" in d.reply and d.effects == ()


def test_no_copy_to_resume_from_puts_the_member_back_at_rest_not_into_a_retry_of_its_own_checkpoint():
    j = Job(S.STOPPED).send(EXPLOIT).send(Tick())
    j.send(LaunchRefused("not resumed from pop-t003: no complete checkpoint", settle=Settle.STOPPED))
    assert j.m.state == S.STOPPED and j.m.final and Persist in map(type, j.effects)


def test_a_crash_after_the_exploits_launch_resumes_normally_on_its_new_timeline():
    j = Job(S.STOPPED).send(EXPLOIT).send(Tick()).send(Progressed(41)).send(crash())
    assert j.m.state == S.BACKING_OFF and j.m.launch.from_job is None and not j.m.launch.fresh


def test_the_intent_is_saved_and_read_back():
    m = Job(S.STOPPED).send(EXPLOIT).m
    back = JobModel.from_json(m.to_json())
    assert back.launch.from_job == FromJob("pop-t003", ("/logs/pop-t003/run2",)) and back.launch.fresh
    assert JobModel.from_json({"state": "pending", "launch": {"reason": "x"}}).launch.from_job is None


# ---- the copy -----------------------------------------------------------------------------------------------
@pytest.fixture
def logs(tmp_path: Path) -> Path:
    (tmp_path / "member" / "exp").mkdir(parents=True)
    return tmp_path


def test_the_sources_newest_complete_checkpoint_is_copied_into_a_folder_of_the_members_own(logs):
    fake_checkpoint(logs / "src" / "run1" / "model_30.pt", 30)
    fake_checkpoint(logs / "src" / "run2" / "model_40.pt", 40, pad=4096)
    (logs / "src" / "run2" / "model_45.pt").write_bytes(b"PK\x03\x04 torn: being written")  # never this one
    fj = FromJob("pop-t003", (str(logs / "src" / "run2"), str(logs / "src" / "run1")))
    got = copy_from_job(fj, logs / "member" / "exp", None, 1_765_000_000.0)
    assert not isinstance(got, str), got
    assert got.iteration == 40 and got.path.name == "model_40.pt"
    assert got.path.parent.parent == logs / "member" / "exp"
    assert got.path.parent.name.endswith("_pbt-from-pop-t003-at-40")
    assert got.path.read_bytes() == (logs / "src" / "run2" / "model_40.pt").read_bytes()
    assert [p.name for p in got.path.parent.iterdir()] == ["model_40.pt"]  # no temp file left


def test_a_replayed_launch_takes_the_copy_it_made_again(logs):
    fake_checkpoint(logs / "src" / "run1" / "model_40.pt", 40)
    fj = FromJob("pop-t003", (str(logs / "src" / "run1"),))
    first = copy_from_job(fj, logs / "member" / "exp", None, 1_765_000_000.0)
    again = copy_from_job(fj, logs / "member" / "exp", None, 1_765_000_100.0)
    assert not isinstance(first, str) and not isinstance(again, str) and again.path == first.path
    assert len(list((logs / "member" / "exp").iterdir())) == 1


def test_a_source_without_a_complete_checkpoint_says_so(logs):
    (logs / "src" / "run1").mkdir(parents=True)
    (logs / "src" / "run1" / "model_5.pt").write_bytes(b"not a zip")
    got = copy_from_job(FromJob("pop-t003", (str(logs / "src" / "run1"),)), logs / "member" / "exp", None, 0.0)
    assert isinstance(got, str) and "pop-t003 has no complete checkpoint to copy" in got


@pytest.mark.skipif(os.geteuid() != 0, reason="ownership: root copies for the owner")
def test_a_link_or_a_file_not_the_owners_is_never_copied_and_the_copy_is_the_owners(logs):
    nobody = pwd.getpwnam("nobody")
    owner = RunAs(nobody.pw_uid, nobody.pw_gid, (nobody.pw_gid,), "nobody")
    secret = logs / "secret.pt"
    fake_checkpoint(secret, 40)  # root's file: a link the owner planted to it is not followed
    (logs / "src" / "run1").mkdir(parents=True)
    (logs / "src" / "run1" / "model_40.pt").symlink_to(secret)
    os.chown(logs / "member" / "exp", owner.uid, owner.gid)
    fj = FromJob("pop-t003", (str(logs / "src" / "run1"),))
    got = copy_from_job(fj, logs / "member" / "exp", owner, 0.0)
    assert isinstance(got, str) and "cannot copy" in got and list((logs / "member" / "exp").glob("*/*.pt")) == []
    (logs / "src" / "run1" / "model_40.pt").unlink()
    fake_checkpoint(logs / "src" / "run1" / "model_40.pt", 40)  # root's, not the owner's
    got = copy_from_job(fj, logs / "member" / "exp", owner, 0.0)
    assert isinstance(got, str) and "not nobody's" in got
    os.chown(logs / "src" / "run1" / "model_40.pt", owner.uid, owner.gid)
    got = copy_from_job(fj, logs / "member" / "exp", owner, 0.0)
    assert not isinstance(got, str), got
    assert got.path.stat().st_uid == owner.uid and got.path.parent.stat().st_uid == owner.uid


# ---- the timeline ---------------------------------------------------------------------------------------------
def test_a_crash_before_the_members_first_save_resumes_the_copy_again(logs):
    own = logs / "member" / "exp" / "run_own"
    fake_checkpoint(own / "model_60.pt", 60)  # the member's own, further along: not its weights any more
    copy = logs / "member" / "exp" / "2026-12-06_08-00-00_pbt-from-pop-t003-at-40" / "model_40.pt"
    fake_checkpoint(copy, 40)
    new_run = logs / "member" / "exp" / "run_after"
    new_run.mkdir()
    h = JobHistory(name="member", attempts=[
        Attempt(number=1, started_at=0.0, reason="launch", run_dir=str(own)),
        Attempt(number=2, started_at=1.0, reason="exploit", run_dir=str(new_run), fresh=True,
                resume_from={"path": str(copy), "iteration": 40})])
    assert choose_resume(lineage(h)).path == copy  # nothing saved in the new run yet: the copy, not model_60
    fake_checkpoint(new_run / "model_45.pt", 45)
    assert choose_resume(lineage(h)).path == new_run / "model_45.pt"


# ---- the launch ---------------------------------------------------------------------------------------------
def test_the_exploits_launch_resumes_the_copy_with_its_new_values_set_after_that_load_and_carried_by_a_go(tmp_path):
    from test_attempt_planner import JOB, World

    from isaacd.attempt.planner import LaunchPlan
    from isaacd.attempt.spare import go_message
    from isaacd.jobs.model import LaunchIntent
    from isaacd_trainer.shim_protocol import ALGORITHM_SET_ENV, GO_ENV

    job = JOB + 'extra_args = ["agent.algorithm.learning_rate=0.00025", "agent.algorithm.entropy_coef=0.004"]\n'
    w = World(tmp_path, job)
    fake_checkpoint(w.run_dir / "model_8.pt", 8)  # the member's own, before its exploit
    w.ran()
    src = tmp_path / "logs" / "rsl_rl" / "cp-src" / "run"
    fake_checkpoint(src / "model_40.pt", 40)
    plan = w.plan(LaunchIntent("exploit", Origin.SWEEP, fresh=True, from_job=FromJob("pop-t003", (str(src),))))
    assert isinstance(plan, LaunchPlan), plan
    copy = Path(plan.attempt.resume_from["path"])
    assert plan.attempt.fresh and plan.attempt.resume_from["iteration"] == 40
    assert copy.parent.parent == w.run_dir.parent and copy.parent.name.endswith("_pbt-from-pop-t003-at-40")
    assert ("checkpoint_copied", {"source": "pop-t003", "path": str(copy), "iteration": 40}) in w.said
    from isaacd.workflows import regex_literal
    # the built-in trainer (2.x's flags) resumes the copy, not the member's own model_8
    assert regex_literal(copy.parent.name) in plan.args and regex_literal("model_40.pt") in plan.args
    import json
    spec = json.loads(plan.spec.env[ALGORITHM_SET_ENV])
    assert spec == {"checkpoint": f"{copy.parent.name}/model_40.pt",
                    "values": {"learning_rate": 0.00025, "entropy_coef": 0.004}}
    # a booted spare taking this attempt over gets them with its go (it was spawned without)
    go = go_message(["train.py"], tmp_path, False, plan.spec.env)
    assert go[GO_ENV][ALGORITHM_SET_ENV] == plan.spec.env[ALGORITHM_SET_ENV]
    # an ordinary resume of the member's own checkpoint sets nothing again (an exact resume)
    w.record.history.attempts[0].run_dir = str(w.run_dir)
    plain = w.plan(LaunchIntent("crash", Origin.CRASH))
    assert isinstance(plain, LaunchPlan) and ALGORITHM_SET_ENV not in plain.spec.env


def test_no_complete_checkpoint_of_the_source_puts_the_member_back_at_rest(tmp_path):
    from test_attempt_planner import World

    from isaacd.jobs.model import LaunchIntent

    w = World(tmp_path)
    (tmp_path / "logs" / "rsl_rl" / "cp").mkdir(parents=True)
    plan = w.plan(LaunchIntent("exploit", Origin.SWEEP, fresh=True,
                               from_job=FromJob("pop-t003", (str(tmp_path / "nothing"),))))
    assert isinstance(plan, LaunchRefused) and plan.settle == Settle.STOPPED and "pop-t003" in plan.reason
