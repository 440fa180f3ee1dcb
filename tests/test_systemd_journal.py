"""How a unit's invocation ended, read from PID 1's journal messages (runtimes/systemd_ctl.ended_last): pure.

systemd collects a cleanly ended unit at once, so the journal is all the systemd runtime has to tell a clean exit
from a crash, an OOM kill or an operator's `systemctl stop` (tests/test_systemd_testbed.py proves it on real
systemd; these pin the fold). Message IDs and fields as systemd 257 logs them (sd-messages.h).
"""

from __future__ import annotations

import json
import signal

from isaacd.runtimes.systemd_ctl import (CLD_EXITED, CLD_KILLED, MSG_FAILED, MSG_OOM, MSG_PROCESS_EXIT, MSG_STOPPED,
                                         MSG_STOPPING, MSG_SUCCESS, ended_last)


def msg(inv: str, mid: str, **fields: str) -> str:
    return json.dumps({"INVOCATION_ID": inv, "MESSAGE_ID": mid, "_PID": "1", **fields})


def test_a_clean_end_is_exit_0_even_without_the_process_exit_message() -> None:
    end = ended_last([msg("a", MSG_SUCCESS)])
    assert end is not None and (end.invocation, end.kind, end.status, end.result) == ("a", CLD_EXITED, 0, "success")


def test_a_failed_end_keeps_exit_status_signal_name_and_oom() -> None:
    lines = [msg("a", MSG_OOM), msg("a", MSG_PROCESS_EXIT, EXIT_CODE="killed", EXIT_STATUS="KILL"),
             msg("a", MSG_FAILED, UNIT_RESULT="oom-kill")]
    end = ended_last(lines)
    assert end is not None
    assert (end.kind, end.status, end.result, end.oom, end.stop_job) == (CLD_KILLED, signal.SIGKILL, "oom-kill",
                                                                        True, False)


def test_a_stop_job_is_seen_and_a_start_job_is_not() -> None:
    stopped = ended_last([msg("a", MSG_STOPPING, JOB_TYPE="stop"), msg("a", MSG_STOPPED, JOB_TYPE="stop"),
                          msg("a", MSG_PROCESS_EXIT, EXIT_CODE="exited", EXIT_STATUS="143"), msg("a", MSG_SUCCESS)])
    started = ended_last([msg("a", MSG_STOPPED, JOB_TYPE="start"), msg("a", MSG_SUCCESS)])
    assert stopped is not None and stopped.stop_job and stopped.status == 143
    assert started is not None and not started.stop_job


def test_the_last_ended_invocation_wins_and_the_excluded_one_or_a_running_one_never_does() -> None:
    lines = [msg("old", MSG_PROCESS_EXIT, EXIT_CODE="exited", EXIT_STATUS="1"), msg("old", MSG_FAILED),
             msg("new", MSG_PROCESS_EXIT, EXIT_CODE="exited", EXIT_STATUS="2"), msg("new", MSG_FAILED,
                                                                                      UNIT_RESULT="exit-code"),
             msg("running", MSG_PROCESS_EXIT, EXIT_CODE="exited", EXIT_STATUS="3"), "not json"]
    last = ended_last(lines)
    assert last is not None and (last.invocation, last.status, last.result) == ("new", 2, "exit-code")
    before = ended_last(lines, exclude="new")
    assert before is not None and (before.invocation, before.status, before.result) == ("old", 1, "failed")
    assert ended_last(lines[4:]) is None
