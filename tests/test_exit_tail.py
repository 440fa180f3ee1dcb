"""The line that explains a trainer's exit (daemon/attempt/exit_tail.py, torchrun_report.py), on real output.

tests/exit_outputs/ holds what torch 2.13 (CPU build) really printed here (its README says the commands): torchrun's
report ends with a frame of `=`, which was once the reason line (`exited with code 1: ====…====`, issue 37).
"""

from __future__ import annotations

from pathlib import Path

from isaacd.attempt.config_fault import named_in_config
from isaacd.attempt.exit_tail import exit_with_log_tail, key_line
from isaacd.attempt.torchrun_report import find_report
from isaacd.runtimes.base import ExitStatus, Handle

OUTPUTS = Path(__file__).parent / "exit_outputs"


def exited(tmp_path: Path, text: str, code: int = 1, **named_over):  # noqa: ANN003, ANN201
    log = tmp_path / "job.log"
    log.write_text(text)
    named = named_in_config(**{"task": "Isaacd-Cartpole-v0", "agent": None, "extra_args": [], "spare_preload": [],
                               "environment": {}, "train_script": None, **named_over})
    return exit_with_log_tail(ExitStatus(code=code), Handle("process", "j", {"log_path": str(log), "log_offset": 0}),
                              named)


def real(name: str) -> str:
    return (OUTPUTS / name).read_text()


def test_torchrun_without_an_error_file_is_explained_by_the_ranks_own_error_not_its_frame(tmp_path):
    st = exited(tmp_path, real("torchrun_cpu_device_cuda_ranks.txt"))
    assert st.output_tail[-1].startswith("=====")  # what the reason line used to be
    assert st.key_line.startswith("RuntimeError: Cannot get CUDA generator without ATen_cuda library")
    assert st.describe().startswith("exited with code 1: RuntimeError: Cannot get CUDA generator")


def test_torchrun_ranks_asking_cuda_of_a_cpu_torch_are_an_error_no_restart_fixes_naming_device(tmp_path):
    fault = exited(tmp_path, real("torchrun_cpu_device_cuda_ranks.txt")).config_fault
    assert fault is not None and (fault.kind, fault.key) == ("no_cuda", "device")
    assert 'device = "cpu"' in fault.fix("j") and "gpus" in fault.fix("j")


def test_torchrun_with_an_error_file_gives_the_root_cause_ranks_exception(tmp_path):
    st = exited(tmp_path, real("torchrun_record_error_file.txt"))
    assert st.key_line == "rank 1: ValueError: rank 1 cannot go on: bad shape (3, 4)"
    assert st.config_fault is None  # a crash like any other: restarted


def test_torchrun_unknown_task_in_the_ranks_is_found_behind_torchruns_child_failed_error(tmp_path):
    fault = exited(tmp_path, real("torchrun_unknown_task.txt"), task="Isaac-Cartpol-v0").config_fault
    assert fault is not None and (fault.kind, fault.key) == ("unknown_task", "task")
    assert fault.line.startswith("gymnasium.error.NameNotFound: Environment `Isaac-Cartpol` doesn't exist.")


def test_one_process_asking_cuda_of_a_cpu_torch_is_a_device_error(tmp_path):
    st = exited(tmp_path, real("isaacd_train_device_cuda_cpu_torch.txt"))
    assert st.config_fault is not None and st.config_fault.kind == "no_cuda"
    assert st.key_line.startswith("RuntimeError: Cannot get CUDA generator")


def test_torchrun_report_whose_ranks_said_nothing_names_the_rank_and_its_exit_code():
    lines = real("torchrun_cpu_device_cuda_ranks.txt").splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("E1206"))  # torchrun's own lines only
    report = find_report(lines[start:])
    assert report is not None and (report.rank, report.exitcode) == ("0", 1)
    assert report.cause(lambda _: None) == ("rank 0 exited with code 1 (torchrun's root cause; the rank's output "
                                            "says no more)")


def test_torchrun_report_of_a_rank_killed_by_a_signal_names_the_signal():
    lines = ["torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "=" * 60, "train.py FAILED",
             "-" * 60, "Failures:", "  <NO_OTHER_FAILURES>", "-" * 60, "Root Cause (first observed failure):", "[0]:",
             "  rank      : 0 (local_rank: 0)", "  exitcode  : -9 (pid: 7344)  (SIGKILL)",
             "  error_file: <N/A>", "  traceback : Signal 9 (SIGKILL) received by PID 7344", "=" * 60]
    report = find_report(lines)
    assert report is not None and (report.exitcode, report.signal) == (-9, "SIGKILL")
    assert report.cause(lambda _: None).startswith("rank 0 was killed by SIGKILL")


def test_decoration_lines_are_never_the_reason_line():
    assert key_line(["training...", "iteration 3", "-" * 40, "=" * 40]) == "iteration 3"
    assert key_line(["OSError: [Errno 28] No space left on device", "Failures:", "<NO_OTHER_FAILURES>", "=" * 60]) \
        == "OSError: [Errno 28] No space left on device"


def test_a_plain_crash_keeps_its_last_exception_line(tmp_path):
    st = exited(tmp_path, "step 1\nTraceback (most recent call last):\n  File \"t.py\", line 1\n"
                          "KeyError: 'obs'\nSet the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n")
    assert st.key_line == "KeyError: 'obs'" and st.config_fault is None
