"""`[jobs.eval]` (daemon/config/eval.py, issue 41): what a valid section gives, each refusal as the one line a person
reads (naming the key and the fix), and a reload that changes the section."""

from __future__ import annotations

from pathlib import Path

import pytest

from isaacd.config.reload_diff import changed_keys
from isaacd.config.schema import Config, ConfigError, parse_config


def job(eval_lines: str, job_lines: str = "") -> str:
    return f'[[jobs]]\nname = "a"\n{job_lines}\n[jobs.eval]\n{eval_lines}\n'


def parse(text: str) -> Config:
    return parse_config(text, "isaacd.toml", Path("/tmp"))


def refusal(text: str) -> str:
    with pytest.raises(ConfigError) as exc:
        parse(text)
    lines = str(exc.value).splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_a_cpu_job_evaluates_every_checkpoint_on_the_cpu_with_the_designs_defaults():
    cfg = parse(job("")).jobs[0].eval
    assert cfg is not None
    assert (cfg.every, cfg.episodes, cfg.envs, cfg.seed, cfg.video, cfg.video_length, cfg.deadline_seconds,
            cfg.retries) == (1, 100, 100, 42, False, 200, 600.0, 3)
    assert not cfg.on_gpu and cfg.where() == "cpu" and cfg.every_text == "1"
    assert parse('[[jobs]]\nname = "a"\n').jobs[0].eval is None


def test_a_gpu_job_evaluates_on_its_gpu_by_gpu_memory_or_on_the_cpu_when_it_says_so():
    on_gpu = parse(job('every = "best"\ngpu_memory = "4GiB"\nnum_envs = 20', 'gpu_memory = "12GiB"')).jobs[0].eval
    assert on_gpu.on_gpu and on_gpu.gpu_memory_bytes == 4 * 2**30 and on_gpu.where(0) == "gpu 0 (4 GiB)"
    assert on_gpu.every_text == "best" and on_gpu.envs == 20 and on_gpu.per_env == 5
    on_cpu = parse(job('device = "cpu"', 'device = "cuda:0"')).jobs[0].eval
    assert not on_cpu.on_gpu and on_cpu.where() == "cpu"


def test_a_gpu_job_naming_neither_gpu_memory_nor_the_cpu_is_refused_saying_both_fixes():
    line = refusal(job("every = 5", 'device = "cuda"'))
    assert line.startswith('isaacd.toml: jobs[0] (name = "a"): [jobs.eval] on a GPU job (device = "cuda") needs '
                           'gpu_memory')
    assert 'device = "cpu"' in line
    assert "[jobs.eval] on a GPU job" in refusal(job("", 'gpu_memory = "12GiB"'))  # a placed job trains on cuda


@pytest.mark.parametrize("runtime, why", [
    ("systemd", "a systemd unit runs one trainer per job"),
    ("ray", "cannot place an evaluation beside the trainer on a Ray node"),
])
def test_a_runtime_that_cannot_run_an_evaluation_yet_is_refused_with_the_reason(runtime, why):
    ray = '[ray]\naddress = "auto"\n' if runtime == "ray" else ""
    line = refusal(ray + job("", f'runtime = "{runtime}"'))
    assert f'[jobs.eval] with runtime = "{runtime}"' in line and why in line and 'runtime = "process"' in line


def test_podman_is_refused_until_an_evaluation_container_is_built():
    line = refusal(job("", 'runtime = "podman"'))
    assert '[jobs.eval] with runtime = "podman"' in line and "third container" in line


def test_a_job_without_the_shim_is_refused():
    assert "shim = false" in refusal(job("", "shim = false"))


@pytest.mark.parametrize("lines, says", [
    ("every = 0", "eval.every: Input should be greater than or equal to 1"),
    ('every = "5"', 'eval.every: "5" is a string; write a whole number such as every = 5'),
    ('every = "bset"', 'eval.every: "bset" is a string; write a whole number or "best"'),
    ("episodes = 0", "eval.episodes: Input should be greater than or equal to 1"),
    ("num_envs = 200", "eval: num_envs = 200 is above episodes = 100"),
    ("gpu_memory = 4", 'eval.gpu_memory: 4 is a number without a unit; write a size such as "4GiB"'),
    ('gpu_memory = "4g"', 'eval.gpu_memory: "4g" is ambiguous: write "4GiB"'),
    ('gpu_memory = "0GiB"', "eval.gpu_memory: must be more than 0"),
    ('device = "cuda:1"', 'eval.device: device = "cuda:1" is not a place to evaluate; write "cpu" or "cuda": an '
                          'evaluation runs on the job\'s own GPU'),
    ('device = "gpu"', 'eval.device: device = "gpu" is not a place to evaluate; write "cpu" or "cuda"'),
    ('device = "cuda"', 'eval: device = "cuda" needs gpu_memory'),
    ('device = "cpu"\ngpu_memory = "4GiB"', 'eval: device = "cpu" with gpu_memory'),
    ("deadline_seconds = 0", "eval.deadline_seconds: Input should be greater than 0"),
    ("deadline_seconds = inf", "eval.deadline_seconds: must be a number of seconds"),
    ("retries = 0", "eval.retries: Input should be greater than or equal to 1"),
    ("video = 1", "eval.video: 1 is a whole number; write true or false"),
    ("episode = 10", "eval.episode: unknown key; did you mean `episodes`?"),
])
def test_each_bad_value_is_one_line_naming_the_key(lines, says):
    line = refusal(job(lines))
    assert line.startswith('isaacd.toml: jobs[0] (name = "a").eval')
    assert says in line, line


def test_a_cpu_job_asking_for_gpu_memory_is_told_it_has_no_gpu():
    assert "the job has no GPU to evaluate on" in refusal(job('gpu_memory = "4GiB"'))


def test_a_reload_names_the_eval_keys_it_changed():
    old = parse(job("every = 5")).jobs[0]
    assert changed_keys(old, parse(job("every = 10\nvideo = true")).jobs[0]) == ["eval.every", "eval.video"]
    assert changed_keys(parse('[[jobs]]\nname = "a"\n').jobs[0], old) == ["eval"]
    assert changed_keys(old, parse('[[jobs]]\nname = "a"\n').jobs[0]) == ["eval"]


@pytest.mark.parametrize("workflow", ["rl_games", "skrl"])
def test_a_library_whose_checkpoints_cannot_be_evaluated_yet_is_refused(workflow):
    """Their jobs launch without the shim: an "evaluation" would train a new run (H2, issue 41)."""
    line = refusal(job("", f'workflow = "{workflow}"\ntask = "Isaac-Cartpole-Direct"'))
    assert f'workflow = "{workflow}"' in line and "not built yet" in line and "remove [jobs.eval]" in line


def test_a_multi_rank_job_is_refused():
    line = refusal(job('device = "cpu"', 'device = "cuda"\ngpus = [0, 1]'))
    assert "2 ranks" in line and "one process" in line
