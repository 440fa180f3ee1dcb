"""Which trainer outputs are errors no restart can fix (daemon/attempt/config_fault.py), on the texts upstream really prints.

The tails below were captured from the real Isaac Lab 3.0.0 (kit-less, `.venv-isaaclab3/bin/python -m isaaclab train
--rl_library rsl_rl ...` on this CPU machine), trimmed to their last lines; the code that prints each is cited in
config_fault.py.
"""

from __future__ import annotations

from isaacd.attempt.config_fault import find_config_fault, named_in_config

UNKNOWN_TASK = """\
  File "/x/site-packages/gymnasium/envs/registration.py", line 366, in _check_name_exists
    raise error.NameNotFound(
gymnasium.error.NameNotFound: Environment `Isaac-Cartpol-Direct` doesn't exist. Did you mean: `Isaac-Cartpole-Direct`?
"""
DEPRECATED = """\
  File "/x/site-packages/gymnasium/envs/registration.py", line 407, in _check_version_exists
    raise error.DeprecatedEnv(message)
gymnasium.error.DeprecatedEnv: Environment version `v0` for environment `Isaac-Cartpole-Direct` doesn't exist. \
It provides the default version `Isaac-Cartpole-Direct`.
"""
HYDRA = """\
[INFO]: Parsing configuration from: isaaclab_tasks.core.cartpole.agents.rsl_rl_ppo_cfg:CartpoleDirectPPORunnerCfg
Error parsing override 'True'
missing EQUAL at '<EOF>'
See https://hydra.cc/docs/1.2/advanced/override_grammar/basic for details

Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.
"""
ARGPARSE = """\
                   [--max_visible_envs MAX_VISIBLE_ENVS]
__main__.py: error: argument --num_envs: invalid int value: 'abc'
"""
CALLBACK = """\
    raise ValueError(msg)
ValueError: Could not resolve the input string 'nosuchpkg.register' into callable object. The format of input \
should be 'module:attribute_name'.
Received the error:
 No module named 'nosuchpkg'.
"""


def named(**over) -> dict[str, list[str]]:  # noqa: ANN003
    fields = {"task": "Isaac-Cartpol-Direct", "agent": None, "extra_args": [], "spare_preload": [],
              "environment": {}, "train_script": None, **over}
    return named_in_config(**fields)


def fault(text: str, code: int | None = 1, **over):  # noqa: ANN003, ANN201
    return find_config_fault(text.splitlines(), code, named(**over))


def test_gymnasium_name_not_found_is_an_unknown_task_naming_key_task_and_quoting_gymnasium():
    f = fault(UNKNOWN_TASK)
    assert (f.kind, f.key) == ("unknown_task", "task")
    assert f.line.startswith("gymnasium.error.NameNotFound: Environment `Isaac-Cartpol-Direct` doesn't exist.")
    assert "Did you mean: `Isaac-Cartpole-Direct`?" in f.line
    assert "set `task` in the [[jobs]] table of cp" in f.fix("cp")


def test_gymnasium_deprecated_env_for_a_v0_name_is_an_unknown_task():
    assert fault(DEPRECATED).kind == "unknown_task"


def test_hydra_parse_error_quotes_hydras_reason_and_names_extra_args_when_they_hold_it():
    f = fault(HYDRA, extra_args=["True"])
    assert (f.kind, f.key, f.subject) == ("hydra_override", "extra_args", "True")
    assert f.line == "Error parsing override 'True': missing EQUAL at '<EOF>'"
    assert "remove `True` in `extra_args`" in f.fix("cp")


def test_hydra_error_on_an_override_isaacd_passed_itself_names_the_contract_not_extra_args():
    f = fault("Could not override 'agent.device'.\nTo append to your config use +agent.device=cpu\n")
    assert (f.kind, f.key) == ("hydra_override", "isaaclab_version")


def test_argparse_error_counts_only_with_argparses_exit_code_2():
    f = fault(ARGPARSE, code=2, extra_args=["--num_envs", "abc"])
    assert (f.kind, f.key, f.subject) == ("argparse", "extra_args", "--num_envs")
    assert fault(ARGPARSE, code=1) is None


def test_unresolvable_external_callback_is_a_missing_module_named_in_extra_args():
    f = fault(CALLBACK, extra_args=["--external_callback", "nosuchpkg.register"])
    assert (f.kind, f.key, f.subject) == ("missing_module", "extra_args", "nosuchpkg.register")


def test_module_not_found_that_no_config_key_names_points_at_the_launcher():
    f = fault("ModuleNotFoundError: No module named 'rsl_rl'\n")
    assert (f.kind, f.key) == ("missing_module", "launcher")
    assert "install `rsl_rl` into the job's Python" in f.fix("cp")


def test_missing_file_counts_only_when_the_config_names_it():
    text = "FileNotFoundError: [Errno 2] No such file or directory: '/data/terrain.usd'\n"
    f = fault(text, extra_args=["env.scene.terrain.usd_path=/data/terrain.usd"])
    assert (f.kind, f.key) == ("missing_file", "extra_args")
    assert fault(text) is None  # a file that went away by itself (a moved checkpoint) may be back: restarts


def test_a_later_exception_of_another_kind_decides():
    """A ModuleNotFoundError logged and survived, then a crash of another kind: that crash, restarted as before."""
    text = "ModuleNotFoundError: No module named 'wandb'\n[INFO] training...\nRuntimeError: CUDA error: an illegal " \
           "memory access was encountered\n"
    assert fault(text) is None


def test_an_ordinary_crash_is_no_config_fault():
    assert fault("Traceback (most recent call last):\nKeyError: 'class_name'\n\nSet the environment variable "
                 "HYDRA_FULL_ERROR=1 for a complete stack trace.\n") is None


# ---- issue 37: CUDA asked of a torch or host without it; a program its user cannot execute --------------------
def test_torch_without_cuda_is_a_device_error_naming_key_device():
    f = fault("    raise AssertionError(\"Torch not compiled with CUDA enabled\")\n"
              "AssertionError: Torch not compiled with CUDA enabled\n")
    assert (f.kind, f.key) == ("no_cuda", "device") and "Python whose torch has CUDA" in f.fix("cp")


def test_no_cuda_gpus_with_cuda_visible_devices_set_by_the_job_names_that_variable():
    f = fault("RuntimeError: No CUDA GPUs are available\n", environment={"CUDA_VISIBLE_DEVICES": ""})
    assert (f.kind, f.key) == ("no_cuda", "environment.CUDA_VISIBLE_DEVICES")  # it names no GPU: the cause
    assert "remove or correct `environment.CUDA_VISIBLE_DEVICES`" in f.fix("cp")
    assert fault("RuntimeError: No CUDA GPUs are available\n").key == "device"


def test_a_rank_past_the_gpus_it_sees_is_a_device_error():
    f = fault("torch.AcceleratorError: CUDA error: invalid device ordinal\n")
    assert (f.kind, f.key) == ("no_cuda", "device") and "gpus" in f.fix("cp")


def test_bash_bad_interpreter_permission_denied_is_a_program_its_user_cannot_execute():
    # bash 5.2's words, reproduced here: a wrapper running a script whose #! interpreter is not executable
    f = fault("./run.sh: /opt/venv/bin/train: /root/.pyenv/versions/3.11.7/bin/python3.11: bad interpreter: "
              "Permission denied\n", code=126)
    assert (f.kind, f.key, f.subject) == ("not_executable", "launcher", "/root/.pyenv/versions/3.11.7/bin/python3.11")


def test_a_shells_cannot_execute_counts_only_with_the_shells_exit_code():
    line = "./run.sh: line 2: /opt/venv/bin/train: cannot execute: required file not found\n"
    assert fault(line, code=127).kind == "missing_program"
    assert fault(line, code=1) is None  # code 1: something else printed it and went on
