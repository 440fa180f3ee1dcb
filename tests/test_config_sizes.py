"""Sizes as a config says them (config/sizes.py) and one line per wrong value (config/errors.py), issue 37. No
processes but one `isaacd check-config`."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers import BIN

from isaacd.config.schema import ConfigError, parse_config
from isaacd.config.sizes import gib, podman_bytes, size_bytes, written

GiB = 2**30


@pytest.mark.parametrize("text, n", [
    ("12GiB", 12 * GiB), ("12Gi", 12 * GiB), ("12gib", 12 * GiB), ("12 GiB", 12 * GiB), ("1.5GiB", 3 * GiB // 2),
    ("80GB", 80 * 10**9), ("80gb", 80 * 10**9), ("0.5TB", 5 * 10**11), ("512MiB", 512 * 2**20), ("512MB", 512 * 10**6),
    ("1TiB", 2**40), ("64KiB", 64 * 1024), ("100B", 100), ("0.1GB", 10**8),
])
def test_decimal_units_are_powers_of_ten_binary_units_powers_of_two(text, n):
    assert size_bytes(text) == n


@pytest.mark.parametrize("text, words", [
    ("16g", '"16g" is ambiguous: write "16GiB" (2^30 bytes each) or "16GB" (10^9)'),
    ("512M", '"512M" is ambiguous: write "512MiB" (2^20 bytes each) or "512MB" (10^6)'),
    ("12", '"12" has no unit: write a size such as "12GiB"'),
    ("12 pints", '"12 pints": unknown unit "pints"; write one of KiB, MiB, GiB, TiB'),
    ("lots", '"lots" is not a size: write a number and a unit, such as "12GiB"'),
    ("-1GiB", "is not a size"),
])
def test_a_size_that_could_be_misread_is_refused_with_both_readings(text, words):
    with pytest.raises(ValueError) as info:
        size_bytes(text)
    assert words in str(info.value)


def test_what_a_size_is_shown_as():
    assert written("200GB") == '"200GB" (186.3 GiB)' and written("80GiB") == '"80GiB"'
    assert written("1.5GiB") == '"1.5GiB"' and written("2048MiB") == '"2048MiB" (2 GiB)'
    assert gib(80 * 10**9) == "74.5 GiB" and gib(81559 * 2**20) == "79.6 GiB"  # an H100's 80 GB, NVML's total
    assert podman_bytes("8g") == 8 * GiB == podman_bytes("8GB")  # shm_size: Podman's own reading, unchanged


def job_error(body: str, head: str = "") -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(f'{head}[[jobs]]\nname = "x"\n{body}\n', "jobs.d/x.toml", Path("/"))
    return str(info.value)


KEY = 'jobs.d/x.toml: jobs[0] (name = "x")'


@pytest.mark.parametrize("body, line", [
    ('gpus = "1"', '.gpus: "1" is a string; write a whole number such as gpus = 1'),
    ("gpus = 1.5", '.gpus: 1.5 is a decimal number; write a list, "all" or a whole number such as gpus = 1'),
    ('gpus = "al"', '.gpus: "al" is a string; write a list, "all" or a whole number such as gpus = "all"'),
    ("gpus = [0, 1.5]", ".gpus[1]: 1.5 is a decimal number; write a whole number or a string such as 1"),
    ("gpu_memory = 12", '.gpu_memory: 12 is a number without a unit; write a size such as "12GiB" (2^30 bytes each) '
                        'or "12GB" (10^9)'),
    ('gpu_memory = "16g"', '.gpu_memory: "16g" is ambiguous: write "16GiB" (2^30 bytes each) or "16GB" (10^9)'),
    ('spare = "yes"', '.spare: "yes" is a string; write true, false, "auto", "booted", "imports" or "off" such as '
                      'spare = "auto"'),
    ('num_envs = "256"', '.num_envs: "256" is a string; write a whole number such as num_envs = 256'),
    ("max_iterations = 3.0", ".max_iterations: 3.0 is a decimal number; write a whole number such as max_iterations = 3"),
    ('extra_args = "--x"', '.extra_args: "--x" is a string; write a list such as extra_args = ["--x"]'),
    ("environment = {A = 1}", '.environment.A: 1 is a whole number; write a string such as A = "1"'),
    ("log_root = 5", '.log_root: 5 is a whole number; write a path (a string) such as log_root = "logs"'),
    ("device = 0", '.device: 0 is a whole number; write a string such as device = "cpu"'),
    ("restart = 5", ".restart: 5 is a whole number; write a table: a [jobs.restart] section, its keys on the lines "
                    "below it"),
    ("gpus = 0", ".gpus: Input should be greater than or equal to 1"),  # the right type, a value out of range
    ('[jobs.ray]\nmemory = "32g"', '.ray.memory: "32g" is ambiguous: write "32GiB" (2^30 bytes each) or "32GB" (10^9)'),
])
def test_one_line_per_wrong_value_naming_the_key_the_value_and_an_example(body, line):
    assert job_error(body) == KEY + line


def test_each_mistake_is_its_own_line_and_the_host_sections_read_the_same():
    got = job_error('gpus = "1"\nnum_envs = "many"\nspare = 3', '[queue]\nmin_run_seconds = "5"\n'
                                                                '[access.defaults]\ngpu_memory = "80g"\n').splitlines()
    assert got == ['jobs.d/x.toml: queue.min_run_seconds: "5" is a string; write a number such as min_run_seconds = 5.0',
                   'jobs.d/x.toml: access.defaults.gpu_memory: "80g" is ambiguous: write "80GiB" (2^30 bytes each) or '
                   '"80GB" (10^9)',
                   KEY + '.num_envs: "many" is a string; write a whole number such as num_envs = 256',
                   KEY + '.gpus: "1" is a string; write a whole number such as gpus = 1',
                   KEY + '.spare: 3 is a whole number; write true, false, "auto", "booted", "imports" or "off" such as '
                         'spare = "auto"']


@pytest.mark.parametrize("body, fix", [
    ('gpus = 2\ndevice = "cpu"', 'set device = "cuda" to train on the GPUs, or drop gpus'),
    ('nproc_per_node = 2\ndevice = "cpu"', "or remove nproc_per_node (one rank, on the CPU)"),
    ('gpus = [0, 1]\ndevice = "cpu"', "or name one GPU (one rank, on the CPU)"),
])
def test_several_ranks_on_the_cpu_are_refused_with_the_fix(body, fix):
    msg = job_error(body)
    assert msg.startswith(KEY + ': device = "cpu" with ') and "train under torchrun --distributed, which runs on " \
        "GPUs only" in msg and fix in msg


def test_one_rank_on_the_cpu_and_a_raw_command_with_ranks_are_accepted():
    for body in ('gpus = 1\ndevice = "cpu"', 'gpu_memory = "8GiB"\ndevice = "cpu"', 'gpus = [0, 1]',
                 'nproc_per_node = 2\ndevice = "cpu"\ncommand = ["my-trainer"]'):
        parse_config(f'[[jobs]]\nname = "x"\n{body}\n', "x.toml", Path("/"))


def test_check_config_prints_one_line_per_mistake(tmp_path):
    path = tmp_path / "host.toml"
    path.write_text('[[jobs]]\nname = "a"\ngpus = "1"\ngpu_memory = 12\n')
    res = subprocess.run([str(BIN / "isaacd"), "check-config", str(path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert res.stderr.splitlines() == [
        f'{path}: jobs[0] (name = "a").gpus: "1" is a string; write a whole number such as gpus = 1',
        f'{path}: jobs[0] (name = "a").gpu_memory: 12 is a number without a unit; write a size such as "12GiB" '
        '(2^30 bytes each) or "12GB" (10^9)'], res.stderr
