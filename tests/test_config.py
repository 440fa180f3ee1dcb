"""Config validation: every bad input names the file, the key path and the fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from isaacd.config.schema import ConfigError, load_config, parse_config

REPO = Path(__file__).resolve().parents[1]
ISAACD = str(Path(sys.executable).parent / "isaacd")

GOOD_JOB = '[[jobs]]\nname = "a"\n'

BAD = [
    # (toml text, key path expected in the message, words expected in the message)
    ('[supervisor]\nbogus = 1\n', "supervisor.bogus", "unknown key; allowed keys here: admin_group, control_socket"),
    ('[supervisr]\n', "supervisr",
     "unknown key; did you mean `supervisor`?; allowed keys here: access, gpu, jobs, metrics, notify, queue, ray, supervisor"),
    ('[[jobs]]\nname = "a"\nmax_iteration = 50\n', 'jobs[0] (name = "a").max_iteration',
     "unknown key; did you mean `max_iterations`?; allowed keys here: "),
    # a whole word of one key wins over difflib's nearest: `socket_mode` is closer by ratio
    ('[supervisor]\nsocket = "/run/x.sock"\n', "supervisor.socket", "unknown key; did you mean `control_socket`?"),
    ('[supervisor]\nsocket_mode = "0666"\n', "supervisor.socket_mode", "other"),
    ('[supervisor]\nlog_level = "loud"\n', "supervisor.log_level", "'debug', 'info', 'warning' or 'error'"),
    ('[metrics]\nlisten = "9835"\n', "metrics.listen", "host:port"),
    ('[gpu]\nsource = "scripted"\n', "gpu", "script ="),
    ('[gpu]\nsample_interval = 0\n', "gpu.sample_interval", "greater than 0"),
    ('[[jobs]]\nname = "a"\nnum_envs = "many"\n', 'jobs[0] (name = "a").num_envs',
     '"many" is a string; write a whole number such as num_envs = 256'),
    ('[[jobs]]\nname = "a"\nnum_envs = 0\n', 'jobs[0] (name = "a").num_envs', "greater than 0"),
    ('[[jobs]]\nname = "a"\nmax_iterations = 1.5\n', 'jobs[0] (name = "a").max_iterations',
     "1.5 is a decimal number; write a whole number"),
    ('[[jobs]]\nname = "Bad Name"\n', 'jobs[0] (name = "Bad Name").name', "a-z"),
    ('[[jobs]]\nname = "a"\ndevice = "gpu0"\n', 'jobs[0] (name = "a").device', '"cpu", "cuda" or "cuda:N"'),
    ('[[jobs]]\nname = "a"\nruntime = "docker"\n', 'jobs[0] (name = "a").runtime', "'process', 'podman', 'systemd' or 'ray'"),
    ('[[jobs]]\nname = "a"\nextra_args = ["--resume"]\n', 'jobs[0] (name = "a").extra_args', "set by isaacd"),
    ('[[jobs]]\nname = "a"\n[jobs.restart]\nmax_restart = 3\n', 'jobs[0] (name = "a").restart.max_restart',
     "did you mean `max_restarts`?; allowed keys here: backoff_factor"),
    ('[[jobs]]\nname = "a"\n[jobs.restart]\nbackoff_initial = 10.0\nbackoff_max = 1.0\n',
     'jobs[0] (name = "a").restart', "backoff_max must be >= backoff_initial"),
    ('[[jobs]]\nname = "a"\n[jobs.watchdogs.nope]\nx = 1\n', 'jobs[0] (name = "a").watchdogs.nope',
     "allowed keys here: divergence, duty_cycle"),
    ('[[jobs]]\nname = "a"\n[jobs.watchdogs.no_progress]\ntimeout = -1.0\n',
     'jobs[0] (name = "a").watchdogs.no_progress.timeout', "greater than 0"),
    ('[[jobs]]\nname = "a"\n[jobs.watchdogs.no_progress]\nfor = "5m"\n',
     'jobs[0] (name = "a").watchdogs.no_progress.for', '"5m" is a string; write a number'),
    ('[[jobs]]\nname = "a"\n[jobs.watchdogs.gpu_temperature]\naction = "rollback"\n',
     'jobs[0] (name = "a").watchdogs.gpu_temperature', "log, power-cap, stop"),
    ('[[jobs]]\nname = "a"\n[jobs.watchdogs.gpu_temperature]\nresume_celsius = 90.0\n',
     'jobs[0] (name = "a").watchdogs.gpu_temperature', "resume_celsius < threshold_celsius"),
    ('[[jobs]]\nname = "a"\n[jobs.oom]\nstepdown = 0.5\n', 'jobs[0] (name = "a").oom.stepdown',
     "allowed keys here: min_num_envs, step_down"),
    ('[[jobs]]\nname = "a"\n[jobs.oom]\nstep_down = 2.0\nmin_num_envs = 64\n', 'jobs[0] (name = "a").oom.step_down',
     "must be between 0 and 1"),
    ('[[jobs]]\nname = "a"\n[jobs.oom]\nstep_down = 0.5\n', 'jobs[0] (name = "a").oom',
     "step_down needs min_num_envs"),
    ('[[jobs]]\nname = "a"\n[jobs.oom]\nmin_num_envs = 64\n', 'jobs[0] (name = "a").oom', "add step_down"),
    ('[[jobs]]\nname = "a"\nnum_envs = 256\n[jobs.oom]\nstep_down = 0.5\nmin_num_envs = 512\n', 'jobs[0] (name = "a")',
     "oom.min_num_envs = 512 is above num_envs = 256"),
    ('[[jobs]]\nname = "a"\nextra_args = ["--num_envs", "64"]\n[jobs.oom]\nstep_down = 0.5\nmin_num_envs = 8\n',
     'jobs[0] (name = "a")', "set the job's num_envs key instead"),
    ('[[jobs]]\nname = "a"\n[[jobs]]\nname = "a"\n', "", 'duplicate job name "a"'),
    ('[[jobs]\nname = "a"\n', "", "not valid TOML"),
]


@pytest.mark.parametrize("text,key,words", BAD, ids=[b[1] or b[2] for b in BAD])
def test_bad_config_names_file_key_and_fix(tmp_path, text, key, words):
    path = tmp_path / "host.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: ")
    if key:
        assert f"{path}: {key}: " in msg, msg
    assert words in msg, msg


def test_check_config_cli_prints_every_problem_and_exits_2(tmp_path):
    path = tmp_path / "host.toml"
    path.write_text('[supervisor]\nbogus = 1\n[[jobs]]\nname = "a"\nnum_envs = -3\n')
    res = subprocess.run([ISAACD, "check-config", str(path)], capture_output=True, text=True)
    assert res.returncode == 2
    assert f"{path}: supervisor.bogus: unknown key" in res.stderr
    assert f'{path}: jobs[0] (name = "a").num_envs: Input should be greater than 0' in res.stderr


def test_check_config_cli_names_the_key_a_typo_meant(tmp_path):
    path = tmp_path / "host.toml"
    path.write_text('[[jobs]]\nname = "a"\nmax_iteration = 50\n')
    res = subprocess.run([ISAACD, "check-config", str(path)], capture_output=True, text=True)
    assert res.returncode == 2
    assert res.stderr.startswith(f'{path}: jobs[0] (name = "a").max_iteration: unknown key; did you mean '
                                 f'`max_iterations`?; allowed keys here: '), res.stderr


def test_oom_step_down_parses():
    cfg = parse_config('[[jobs]]\nname = "a"\nnum_envs = 1024\n[jobs.oom]\nstep_down = 0.5\nmin_num_envs = 256\n',
                       "host.toml", Path("/"))
    assert (cfg.jobs[0].oom.step_down, cfg.jobs[0].oom.min_num_envs) == (0.5, 256)
    assert parse_config(GOOD_JOB, "host.toml", Path("/")).jobs[0].oom.step_down is None  # off by default


def test_shipped_example_config_is_valid():
    res = subprocess.run([ISAACD, "check-config", str(REPO / "etc" / "isaacd.toml")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "1 job(s): cartpole" in res.stdout


def test_relative_paths_resolve_against_the_config_file(tmp_path):
    (tmp_path / "etc").mkdir()
    path = tmp_path / "etc" / "c.toml"
    path.write_text('[supervisor]\nstate_dir = "../var"\n[[jobs]]\nname = "a"\nlog_root = "/abs/logs"\n')
    cfg = load_config(path)
    assert cfg.supervisor.state_dir == tmp_path / "var"
    assert str(cfg.jobs[0].log_root) == "/abs/logs"


def test_watchdog_for_key_maps_to_hold():
    cfg = parse_config(GOOD_JOB + '[jobs.watchdogs.gpu_temperature]\nfor = 12.5\n', "x.toml", Path("/"))
    assert cfg.jobs[0].watchdogs.gpu_temperature.hold == 12.5


toml_scalars = st.one_of(st.integers(-10**6, 10**6), st.floats(allow_nan=False), st.text(max_size=8),
                         st.booleans(), st.lists(st.integers(), max_size=3))
keys = st.sampled_from(["name", "num_envs", "runtime", "device", "max_iterations", "seed", "bogus", "gpus",
                        "save_interval", "extra_args", "log_root", "stop_timeout"])


def _toml_value(v):  # noqa: ANN001, ANN202
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(v, float):
        return repr(v) if v == v and v not in (float("inf"), float("-inf")) else "0.0"
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return str(v)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.dictionaries(keys, toml_scalars, max_size=6), max_size=3), st.text(max_size=40))
def test_parser_never_crashes_on_arbitrary_input(jobs, junk):
    """Any input yields a Config or a ConfigError, never another exception."""
    text = "".join("[[jobs]]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in j.items()) for j in jobs)
    for candidate in (text, junk, text + junk):
        try:
            parse_config(candidate, "fuzz.toml", Path("/tmp"))
        except ConfigError as exc:
            assert str(exc).startswith("fuzz.toml: ")


def test_embedded_default_is_valid_and_uses_loopback(tmp_path):
    from isaacd.config.schema import load_embedded_default

    cfg = load_embedded_default(tmp_path)
    assert cfg.metrics.listen.startswith("127.0.0.1:")
    assert cfg.supervisor.socket_mode == "0600"
    assert cfg.jobs and cfg.jobs[0].workflow == "builtin" and cfg.jobs[0].device == "cpu"
    assert cfg.supervisor.state_dir == tmp_path / "var" / "state"


MULTI_GPU_BAD = [
    ('[[jobs]]\nname = "a"\ngpus = [0]\n[[jobs]]\nname = "b"\ngpus = [1, 0]\n',
     'jobs[0] (name = "a").gpus = [0] and jobs[1] (name = "b").gpus = [1, 0] both use GPU 0; give each job its own'),
    ('[[jobs]]\nname = "a"\ngpus = "all"\n[[jobs]]\nname = "b"\ngpus = [3]\n',
     'jobs[0] (name = "a").gpus = "all" and jobs[1] (name = "b").gpus = [3] both use GPU 3'),
    ('[[jobs]]\nname = "a"\ngpus = [0, 0]\n', "lists a GPU twice"),
    ('[[jobs]]\nname = "a"\ngpus = [-1]\n', "negative"),
    ('[[jobs]]\nname = "a"\ngpus = ["first"]\n', "is not a GPU"),
    ('[[jobs]]\nname = "a"\ngpus = "some"\n', "gpus"),
    ('[[jobs]]\nname = "a"\nnproc_per_node = 0\n', "nproc_per_node"),
]


@pytest.mark.parametrize("text,words", MULTI_GPU_BAD)
def test_gpu_claims_are_validated(tmp_path, text, words):
    path = tmp_path / "host.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert words in str(info.value)


def test_shared_gpus_and_multi_rank_launch(tmp_path, monkeypatch):
    from isaacd.runtimes.trainer_command import process_argv, trainer_args, trainer_env

    text = ('[[jobs]]\nname = "a"\ngpus = [0, 1]\ndevice = "cuda"\nshare_gpus = true\n'
            '[[jobs]]\nname = "b"\ngpus = ["GPU-8f1c2d3e-0000-1111-2222-333344445555", 1]\nshare_gpus = true\n'
            '[[jobs]]\nname = "c"\ngpus = [2]\ndevice = "cuda:2"\n')
    cfg = parse_config(text, "x.toml", tmp_path)
    a, b, c = cfg.jobs
    assert a.ranks == 2 and b.ranks == 2 and c.ranks == 1
    argv = process_argv(a, trainer_args(a, None))
    assert argv[1:5] == ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    # torchrun starts the launcher shim on every rank, which runs the trainer module in the same process
    assert argv[5].endswith("shim.py") and argv[6:8] == ["-m", "isaacd_trainer"] and argv[-1] == "--distributed"
    assert trainer_env(a)["CUDA_VISIBLE_DEVICES"] == "0,1"
    # a multi-rank job's own GPUs win over what the supervisor inherited
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,6")
    assert trainer_env(a)["CUDA_VISIBLE_DEVICES"] == "0,1"
    # a single-GPU job keeps its device name and sees every GPU: isaacd sets no CUDA_VISIBLE_DEVICES
    # (checked with the variable unset, and set: then the supervisor's value passes through untouched)
    assert "torch.distributed.run" not in process_argv(c, trainer_args(c, None))
    assert trainer_env(c)["CUDA_VISIBLE_DEVICES"] == "5,6"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert "CUDA_VISIBLE_DEVICES" not in trainer_env(c)


SAME_GPU = [
    # every spelling of "GPU 0" collides with every other (neither job sets share_gpus)
    ('device = "cuda:0"', 'device = "cuda:0"', "0"),
    ('device = "cuda"', 'device = "cuda:0"', "0"),
    ('device = "cuda"', "gpus = [0]", "0"),
    ('device = "cuda:1"', 'gpus = [1, 2]\ndevice = "cuda:1"', "1"),
    ('gpus = ["nvidia.com/gpu=0"]', 'device = "cuda:0"', "0"),
    ('gpus = ["0:1"]', "gpus = [0]", "0:1"),
    ('gpus = ["GPU-8F1C2D3E-0000-1111-2222-333344445555"]', 'gpus = ["GPU-8f1c2d3e-0000-1111-2222-333344445555"]',
     "GPU-8f1c2d3e-0000-1111-2222-333344445555"),
    ('gpus = "all"', 'device = "cuda:3"', "3"),
    ('gpus = ["nvidia.com/gpu=all"]', "gpus = [2]", "2"),
    ("nproc_per_node = 2\ndevice = \"cuda\"", 'device = "cuda:1"', "1"),
    ('device = "cuda:0"\nshare_gpus = true', 'device = "cuda:0"', "0"),  # one sharer is not enough
]


@pytest.mark.parametrize("a,b,gpu", SAME_GPU)
def test_two_jobs_on_one_gpu_are_rejected_whatever_the_spelling(tmp_path, a, b, gpu):
    path = tmp_path / "host.toml"
    path.write_text(f'[[jobs]]\nname = "a"\n{a}\n[[jobs]]\nname = "b"\n{b}\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: ") and 'jobs[0] (name = "a").' in msg and 'jobs[1] (name = "b").' in msg
    assert f"both use GPU {gpu};" in msg and "share_gpus = true on both" in msg


def test_two_cuda0_jobs_are_rejected_naming_file_jobs_keys_and_fix(tmp_path):
    path = tmp_path / "host.toml"
    path.write_text('[[jobs]]\nname = "a"\ndevice = "cuda:0"\n[[jobs]]\nname = "b"\ndevice = "cuda:0"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == (
        f'{path}: jobs[0] (name = "a").device = "cuda:0" and jobs[1] (name = "b").device = "cuda:0" both use GPU 0; '
        'give each job its own GPUs (gpus = [...] or device = "cuda:N"), or set share_gpus = true on both jobs')


DIFFERENT_GPUS = [
    ('device = "cuda:0"', 'device = "cuda:1"'),
    ('device = "cuda"', "gpus = [1]"),
    ('gpus = ["0:1"]', 'gpus = ["0:2"]'),
    ('device = "cpu"', 'gpus = "all"'),
    ('device = "cuda:0"\nshare_gpus = true', 'device = "cuda"\nshare_gpus = true'),
    # an index and a UUID cannot be compared without the host's inventory (the launch check can)
    ("gpus = [0]", 'gpus = ["GPU-8f1c2d3e-0000-1111-2222-333344445555"]'),
]


@pytest.mark.parametrize("a,b", DIFFERENT_GPUS)
def test_jobs_on_different_gpus_or_sharing_pass(tmp_path, a, b):
    cfg = parse_config(f'[[jobs]]\nname = "a"\n{a}\n[[jobs]]\nname = "b"\n{b}\n', "x.toml", tmp_path)
    assert len(cfg.jobs) == 2


def test_process_job_device_outside_its_gpus_is_rejected(tmp_path):
    with pytest.raises(ConfigError, match=r'jobs\[0\] \(name = "a"\): device = "cuda:1" is not one of gpus = \[0\]'):
        parse_config('[[jobs]]\nname = "a"\ngpus = [0]\ndevice = "cuda:1"\n', "x.toml", tmp_path)
    # containers count cuda:N inside the container, among the GPUs CDI passes: not checked
    parse_config('[[jobs]]\nname = "a"\nruntime = "podman"\ngpus = [0]\ndevice = "cuda:1"\n'
                 '[jobs.container]\nimage = "x"\n', "x.toml", tmp_path)


def test_shipped_example_names_every_runtime_and_workflow_and_both_install_forms():
    """etc/isaacd.toml is where a new user reads what a job can be: every value the config accepts, from the model."""
    import re
    import typing

    from isaacd.config.schema import JobConfig

    text = (REPO / "etc" / "isaacd.toml").read_text()
    for key in ("runtime", "workflow"):
        line = re.search(rf"^{key} = .*(?:\n#\s{{20,}}.*)*", text, re.M).group(0)  # the key's line and its comment
        for value in typing.get_args(JobConfig.model_fields[key].annotation):
            assert re.search(rf"\b{value}\b", line), f"{key} comment lacks {value}: {line}"
    assert re.search(r'^# launcher = \["/', text, re.M) and "isaaclab_dir =" in text  # pip/uv and checkout forms


def test_a_whole_number_written_as_inf_or_nan_is_one_line_not_a_crash(tmp_path):
    # hypothesis found it (CI of 2026-12-06): num_envs = "INF" crashed the wrong-type line (int(inf))
    for bad in ("INF", "nan", "-inf"):
        with pytest.raises(ConfigError) as exc:
            parse_config(f'[[jobs]]\nname = "cp"\nnum_envs = "{bad}"\n', "t.toml", tmp_path)
        assert "num_envs" in str(exc.value) and len(str(exc.value).splitlines()) == 1, str(exc.value)
