"""A sweep's trial as a job file (issue 39, daemon/sweeps/trial_file.py): the file isaacd writes for a trial reads
back, through the drop-in reader and the job schema, as exactly the job the sweep means; the best trial's file is a
job a user can submit as it is."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from isaacd.config.jobs_dir import parse_drop_in
from isaacd.config.schema import JobConfig, check_job_table
from isaacd.sweeps.sampler import sample
from isaacd.sweeps.spec import load_sweep, parse_sweep, trial_job
from isaacd.sweeps.trial_file import best_job_file, toml_job_file, trial_header, trial_table

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "etc" / "sweep.example.toml"
FILE = Path("/etc/isaacd/jobs.d/t.toml")


def read_back(text: str) -> dict:
    return parse_drop_in(text, FILE).job


def test_a_tricky_job_table_reads_back_exactly_and_validates():
    table = {
        "name": "tricky-1",
        "task": 'Isaac-"Quoted"-\\back\\slash-v0',
        "workflow": "rsl_rl",
        "num_envs": 4096,
        "seed": -3,
        "stop_timeout": 12.5,
        "shim": False,
        "extra_args": ["agent.algorithm.learning_rate=1e-05", "agent.algorithm.gamma=0.1", 'env.name="a b"',
                       "agent.policy.actor_hidden_dims=[256, 128]", "line\nbreak\ttab", "ünïcødé ✓ 学習"],
        "gpu_memory": "6 GB",
        "log_root": "/srv/runs/it's here",
        "environment": {"WANDB_ARGS": "a=b=c", "PATH": "/opt/x:/usr/bin", "weird key.with dots": "v\"q",
                        "EMPTY": ""},
        "container": {"image": "nvcr.io/isaac-lab:2.3", "volumes": ["/data:/data:ro"],
                      "environment": {"HF_TOKEN": "x=y"}},
        "restart": {"max_restarts": 3},
        "watchdogs": {"divergence": {"enabled": True}},
    }
    text = toml_job_file(table, header="trial 7 of sweep cartpole-lr: agent.algorithm.learning_rate=0.00031")
    assert text.startswith("# trial 7 of sweep cartpole-lr: ")
    assert read_back(text) == table
    job = check_job_table(read_back(text), str(FILE))
    assert job.environment["WANDB_ARGS"] == "a=b=c"
    assert job.extra_args[0] == "agent.algorithm.learning_rate=1e-05"
    assert job.container.environment == {"HF_TOKEN": "x=y"}


def test_floats_keep_their_exact_value_including_inf_and_nan():
    table = {"a": 1e-05, "b": 0.1, "c": 1e16, "d": -0.0, "e": math.inf, "f": -math.inf, "g": 0.000312457,
             "h": 5e-324, "i": 1.7976931348623157e308, "j": 3.0}
    back = read_back(toml_job_file({**table, "n": math.nan}))
    assert math.isnan(back.pop("n"))
    assert back == table
    assert all(type(back[k]) is float for k in table)
    assert math.copysign(1, back["d"]) == -1


def test_lists_of_tables_are_inline_and_nested_tables_are_headers():
    table = {"name": "x", "rules": [{"k": 1, "deep": {"s": "v\\"}}, {}], "empty": {}, "deep": {"a": {"b": {"c": 1}}},
             "mixed": [[1, 2], ["a"], []]}
    text = toml_job_file(table)
    assert "[jobs.deep.a.b]" in text and "[jobs.empty]" in text
    assert read_back(text) == table


def test_a_header_cannot_break_out_of_its_comment():
    text = toml_job_file({"name": "x"}, header="one\ntwo\rthree\x00four\x1bfive")
    assert read_back(text) == {"name": "x"}
    assert text.splitlines()[:3] == ["# one", "# two", "# three four five"]


def test_what_toml_cannot_hold_is_refused_naming_the_key():
    with pytest.raises(TypeError, match="environment.X"):
        toml_job_file({"name": "x", "environment": {"X": None}})


_scalar = (st.text() | st.integers(-2**63, 2**63 - 1) | st.booleans()
           | st.floats(allow_nan=False).filter(lambda f: f == f))
_keys = st.text()  # "" too: a quoted key
_values = st.recursive(_scalar, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_keys, inner, max_size=3),
                       max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_keys, _values, max_size=6))
def test_any_table_of_strings_numbers_lists_and_tables_reads_back(table):
    text = toml_job_file(table)
    assert read_back(text.encode("utf-8").decode("utf-8")) == table


# ------------------------------------------------------------------------------------------------ trials

def _example():
    text = EXAMPLE.read_text(encoding="utf-8")
    return text, load_sweep(EXAMPLE)


def test_the_example_sweeps_trial_1_reads_back_as_trial_job_makes_it():
    text, spec = _example()
    values = sample(spec.space, spec.trials, spec.seed)[0]
    table = trial_table(text, EXAMPLE.parent, spec, 1, values)
    assert table["name"] == "cartpole-lr-t001" and table["autostart"] is False
    file = toml_job_file(table, header=trial_header(spec, 1, values))
    assert file.startswith("# trial 1 of sweep cartpole-lr: agent.algorithm.learning_rate=")
    back = read_back(file)
    assert back == table
    job = check_job_table(back, str(FILE))
    assert job == trial_job(spec, 1, values).model_copy(update={"autostart": False})
    assert job.num_envs == values["num_envs"] and job.seed == values["seed"]
    assert job.extra_args == [f"agent.algorithm.learning_rate={values['agent.algorithm.learning_rate']!r}",
                              f"agent.algorithm.entropy_coef={values['agent.algorithm.entropy_coef']!r}",
                              f"agent.algorithm.gamma={values['agent.algorithm.gamma']!r}"]


def test_every_trial_of_the_example_is_trial_job():
    text, spec = _example()
    for n, values in enumerate(sample(spec.space, spec.trials, spec.seed), 1):
        table = trial_table(text, EXAMPLE.parent, spec, n, values, autostart=True)
        assert JobConfig.model_validate(read_back(toml_job_file(table))) == trial_job(spec, n, values)


SWEEP = """
[sweep]
name = "lr"
trials = 4
[sweep.space]
"agent.algorithm.learning_rate" = { loguniform = [1e-5, 1e-2] }
"+agent.policy.note" = { choice = ["a \\"quoted\\" b", "back\\\\slash", "[256, 128]"] }
"agent.algorithm.clip" = { choice = [true, false] }
seed = { int = [0, 9] }
[job]
workflow = "rsl_rl"
max_iterations = 500
gpu_memory = "2 GB"
log_root = "runs"
isaaclab_dir = "../IsaacLab"
extra_args = ["env.episode_length_s=5.0"]
environment = { WANDB_ARGS = "k=v=w", "X.Y" = "1" }
[job.watchdogs.divergence]
enabled = true
[job.container]
image = "localhost/x:1"
"""


def test_a_trial_keeps_the_files_own_args_paths_and_tables():
    base = Path("/home/ana/sweeps")
    spec = parse_sweep(SWEEP, "/home/ana/sweeps/lr.toml", base)
    values = {"agent.algorithm.learning_rate": 1e-05, "+agent.policy.note": 'a "quoted" b',
              "agent.algorithm.clip": False, "seed": 7}
    table = trial_table(SWEEP, base, spec, 3, values)
    assert table["log_root"] == "/home/ana/sweeps/runs" and table["isaaclab_dir"] == "/home/ana/IsaacLab"
    assert table["extra_args"] == ["env.episode_length_s=5.0", "agent.algorithm.learning_rate=1e-05",
                                   '+agent.policy.note=a "quoted" b', "agent.algorithm.clip=false"]
    assert table["watchdogs"] == {"divergence": {"enabled": True}}
    assert table["environment"] == {"WANDB_ARGS": "k=v=w", "X.Y": "1"}
    back = read_back(toml_job_file(table))
    assert back == table
    assert check_job_table(back, str(FILE)) == trial_job(spec, 3, values).model_copy(update={"autostart": False})


def test_trial_values_must_be_the_searched_keys():
    text, spec = _example()
    with pytest.raises(ValueError, match="the sweep searches"):
        trial_table(text, EXAMPLE.parent, spec, 1, {"seed": 1})
    values = sample(spec.space, spec.trials, spec.seed)[0]
    with pytest.raises(ValueError, match="not one of the sweep's trials"):
        trial_table(text, EXAMPLE.parent, spec, spec.trials + 1, values)


def test_the_best_trial_is_a_job_to_submit_as_it_is():
    text, spec = _example()
    values = sample(spec.space, spec.trials, spec.seed)[6]
    file = best_job_file(text, EXAMPLE.parent, spec, 7, values)
    comments = [line for line in file.splitlines() if line.startswith("#")]
    assert comments[0].startswith("# the best trial of sweep cartpole-lr: trial 7 of 16 (cartpole-lr-t007): "
                                  "agent.algorithm.learning_rate=")
    assert any("cartpole-lr-best" in c and "rename" in c for c in comments)
    back = read_back(file)
    assert back["name"] == "cartpole-lr-best" and "autostart" not in back
    job = check_job_table(back, str(FILE))
    assert job.autostart is True
    assert job == trial_job(spec, 7, values).model_copy(update={"name": "cartpole-lr-best"})
    assert tomllib.loads(file)["jobs"][0]["seed"] == values["seed"]
