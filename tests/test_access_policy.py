"""Who may do what on the control socket (issue 32, access/policy.py) and what another user's answer hides
(access/redact.py): pure, one test per rule. The real socket, real users: tests/test_access_e2e.py."""

from __future__ import annotations

import pytest

from isaacd.access.policy import Caller, admin_refusal, caller_for, job_refusal, may_see, read_refusal, \
    sees_secrets, submit_refusal
from isaacd.access.redact import HIDDEN, credentials, redact, secret_values
from isaacd.config.users import User


def user(name: str, uid: int, *groups: str) -> Caller:
    u = User(uid, uid, name, f"/home/{name}", (name, *groups), (uid,))
    return Caller(uid, name, False, u)


ALICE, BOB = user("alice", 1001), user("bob", 1002)
ADMIN = Caller(1003, "carol", True, User(1003, 1003, "carol", "/home/carol", ("carol", "isaacd-admin"), (1003,)))
ROOT = Caller(0, "root", True, User(0, 0, "root", "/root", ("root",), (0,)))
COMMANDS = ("stop", "start", "restart", "reset", "cancel", "backup-takeover", "logs")


@pytest.mark.parametrize("command", COMMANDS)
def test_the_owner_may_act_on_their_job(command: str) -> None:
    assert job_refusal(ALICE, command, "g1", "alice", "root", "isaacd-admin") is None


@pytest.mark.parametrize("command", COMMANDS)
def test_an_admin_and_root_may_act_on_anyones_job(command: str) -> None:
    for who in (ADMIN, ROOT):
        assert job_refusal(who, command, "g1", "alice", "root", "isaacd-admin") is None


def test_another_user_is_refused_in_one_line_naming_the_owner_and_who_may() -> None:
    assert job_refusal(BOB, "stop", "g1", "alice", "root", "isaacd-admin") == \
        "not stopped: g1 is alice's job; only alice or an admin (group isaacd-admin) may stop it"
    assert job_refusal(BOB, "cancel", "g1", "alice", "root", None) == \
        "not cancelled: g1 is alice's job; only alice or root may cancel it"
    assert job_refusal(BOB, "logs", "g1", "alice", "root", "adm") == \
        "not shown: g1 is alice's job; only alice or an admin (group adm) may read its logs"


def test_a_job_without_owner_is_the_supervisors_users() -> None:
    assert job_refusal(ALICE, "restart", "host", None, "root", "adm") == \
        "not restarted: host is root's job; only an admin (group adm) may restart it"
    # a supervisor a user runs for themselves: their jobs without `owner` are theirs
    assert job_refusal(ALICE, "restart", "host", None, "alice", None) is None


def test_an_unknown_uid_owns_nothing_even_by_a_matching_name() -> None:
    ghost = Caller(4242, "uid 4242", False)
    assert job_refusal(ghost, "stop", "g1", "uid 4242", "root", None) is not None


def test_reload_and_cordons_are_for_admins_only() -> None:
    assert admin_refusal(ROOT, "reload", "adm") is None and admin_refusal(ADMIN, "uncordon", "adm") is None
    assert admin_refusal(ALICE, "reload", "isaacd-admin") == ("not reloaded: only an admin (root or a member of "
                                                               "group isaacd-admin) may reload the config; you are "
                                                               "alice (uid 1001)")
    assert admin_refusal(BOB, "cordon", None) == "not cordoned: only an admin (root) may cordon a node; you are " \
                                                 "bob (uid 1002)"


def test_status_all_shows_every_job_to_everyone() -> None:
    assert may_see(BOB, "alice", "root", "all") and may_see(BOB, None, "root", "all")


def test_status_own_shows_a_user_only_their_jobs_and_an_admin_all() -> None:
    assert may_see(ALICE, "alice", "root", "own") and not may_see(BOB, "alice", "root", "own")
    assert not may_see(BOB, None, "root", "own") and may_see(ADMIN, "alice", "root", "own")
    assert read_refusal(BOB, "g1", "alice", "root", "own", "adm") == (
        'not shown: g1 is alice\'s job; with [access] status = "own" only alice or an admin (group adm) may read '
        "its events")
    assert read_refusal(BOB, "g1", "alice", "root", "all", "adm") is None


def test_secrets_are_the_owners_and_the_admins() -> None:
    assert sees_secrets(ALICE, "alice", "root") and sees_secrets(ADMIN, "alice", "root")
    assert not sees_secrets(BOB, "alice", "root")


def test_a_user_submits_only_for_themselves_an_admin_for_anyone() -> None:
    assert submit_refusal(BOB, None, "adm") is None and submit_refusal(BOB, "bob", "adm") is None
    assert submit_refusal(ADMIN, "alice", "adm") is None and submit_refusal(ROOT, "alice", None) is None
    assert submit_refusal(BOB, "alice", "adm") == ("jobs[0].owner: only an admin (root or a member of group adm) may "
                                                   "submit a job for another user, and you are bob (uid 1002); "
                                                   "remove owner (the job is then bob's)")
    assert "is no user on this host" in (submit_refusal(Caller(4242, "uid 4242", False), None, None) or "")


def test_the_caller_comes_from_the_uid_root_and_the_supervisors_user_are_admins() -> None:
    assert caller_for(0, None, 0).admin and caller_for(0, None, 0).name == "root"
    ghost = caller_for(2**31 - 7, None, 0)  # no passwd entry
    assert ghost == Caller(2**31 - 7, f"uid {2**31 - 7}", False)
    assert caller_for(2**31 - 7, None, 2**31 - 7).admin  # `isaacd run` by a user: it is theirs


def test_redact_hides_every_secret_in_every_string_and_keeps_the_rest() -> None:
    answer = {"jobs": [{"state_reason": "exited 1: token=hunter2-abc seen", "argv": ["--key", "hunter2-abc"],
                        "iteration": 3, "hunter2-abc": "k"}]}
    out = redact(answer, {"hunter2-abc", "hunter2"})
    assert out == {"jobs": [{"state_reason": f"exited 1: token={HIDDEN} seen", "argv": ["--key", HIDDEN],
                             "iteration": 3, HIDDEN: "k"}]}
    assert answer["jobs"][0]["argv"][1] == "hunter2-abc"  # a copy: the published status is not touched


def test_short_values_are_no_secrets_and_credentials_are_found_by_name() -> None:
    assert secret_values(["1", "cuda", "true", "sk-123456"]) == {"sk-123456"}
    assert credentials({"AWS_SECRET_ACCESS_KEY": "abcdefgh", "AWS_SESSION_TOKEN": "zzzzzzzz", "HOME": "/root/x",
                        "PATH": "/usr/bin:/bin"}) == {"abcdefgh", "zzzzzzzz"}


def test_without_socket_group_the_group_a_0660_socket_was_shared_with_keeps_doing_everything() -> None:
    import pwd

    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user nobody on this host")
    assert not caller_for(nobody.pw_uid, None, 0).admin
    assert caller_for(nobody.pw_uid, None, 0, admin_gid=nobody.pw_gid).admin
