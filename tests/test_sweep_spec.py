"""The sweep file (issue 39, daemon/sweeps/spec.py): a good file reads as the user wrote it, each trial's job carries
its values to the trainer's command line, and every mistake is one line naming the file, the key and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from hypothesis import given
from hypothesis import strategies as st

from isaacd.config.schema import ConfigError
from isaacd.runtimes.trainer_command import trainer_args
from isaacd.sweeps.space import Choice, Grid, IntRange, LogUniform, Uniform
from isaacd.sweeps.sampler import as_override
from isaacd.sweeps.spec import load_sweep, parse_sweep, trial_job
from isaacd_trainer.upstream import _parse_val as isaaclab3_parse_val
from isaacd_trainer.upstream import resolve_task_config_v3

REPO = Path(__file__).resolve().parents[1]
SOURCE = "/home/ana/sweeps/lr.toml"

SWEEP = '[sweep]\nname = "lr"\ntrials = 8\n'
SPACE = '[sweep.space]\n"agent.algorithm.learning_rate" = { loguniform = [1e-4, 1e-2] }\n'
JOB = '[job]\nmax_iterations = 500\ngpu_memory = "2 GB"\ndevice = "cpu"\n'


def parse(sweep: str = SWEEP, space: str = SPACE, job: str = JOB, extra: str = ""):
    return parse_sweep(sweep + extra + space + job, SOURCE, Path("/home/ana/sweeps"))


def refusal(**parts: str) -> list[str]:
    """The lines the user reads."""
    with pytest.raises(ConfigError) as info:
        parse(**parts)
    return str(info.value).splitlines()


def one_line(key: str, **parts: str) -> str:
    """The one line of a refused file, which names the file and the key; its message."""
    lines = refusal(**parts)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{SOURCE}: {key}: "), lines[0]
    return lines[0].removeprefix(f"{SOURCE}: {key}: ")


# ------------------------------------------------------------------------------------------------ a good file

def test_the_example_file_parses_as_written() -> None:
    spec = load_sweep(REPO / "etc" / "sweep.example.toml")
    assert (spec.name, spec.trials, spec.concurrency, spec.seed, spec.stop_at) == ("cartpole-lr", 16, 4, 7, 480.0)
    assert (spec.objective.tag, spec.objective.mode, spec.objective.smooth) == ("Train/mean_reward", "max", 10)
    assert (spec.scheduler.kind, spec.scheduler.reduction_factor, spec.scheduler.rungs) == ("asha", 3, (50, 150, 450))
    assert list(spec.space) == ["agent.algorithm.learning_rate", "agent.algorithm.entropy_coef",
                                "agent.algorithm.gamma", "num_envs", "seed"]  # the file's order
    assert spec.space["agent.algorithm.learning_rate"] == LogUniform(1e-4, 1e-2)
    assert spec.space["agent.algorithm.entropy_coef"] == Uniform(0.0, 0.02)
    assert spec.space["agent.algorithm.gamma"] == Grid((0.98, 0.99))
    assert spec.space["num_envs"] == Choice((1024, 2048))
    assert spec.space["seed"] == IntRange(0, 1000)
    assert spec.base.placed_by_isaacd and spec.base.gpu_memory == "6 GB" and spec.base.max_iterations == 500
    assert spec.source == str(REPO / "etc" / "sweep.example.toml")


def test_defaults_four_asha_rungs_below_max_iterations_and_every_trial_at_once() -> None:
    spec = parse()
    assert spec.concurrency == 8 and spec.seed == 0 and spec.stop_at is None
    assert (spec.objective.tag, spec.objective.mode, spec.objective.smooth) == ("Train/mean_reward", "max", 10)
    # grace period 500 / 3^3 = 18, then x3 while below 500 (Ray Tune's ASHA makes the same milestones)
    assert spec.scheduler.rungs == (18, 54, 162, 486)
    assert parse(extra="[sweep.scheduler]\nreduction_factor = 2\ngrace_period = 100\n").scheduler.rungs == (100, 200, 400)
    assert parse(extra='[sweep.scheduler]\nkind = "none"\nrungs = [10, 20]\n').scheduler.rungs == ()


def test_an_unquoted_dotted_key_is_the_same_hydra_override() -> None:
    spec = parse(space="[sweep.space]\nagent.algorithm.gamma = { grid = [0.98, 0.99] }\nseed = { int = [0, 9] }\n")
    assert spec.space == {"agent.algorithm.gamma": Grid((0.98, 0.99)), "seed": IntRange(0, 9)}


def test_a_relative_log_root_is_the_sweep_files_directorys() -> None:
    assert parse(job=JOB + 'log_root = "runs"\n').base.log_root == Path("/home/ana/sweeps/runs")


# ------------------------------------------------------------------------------------------------ trial_job

def test_a_trials_values_reach_the_trainers_command_line() -> None:
    spec = parse(space='[sweep.space]\n"agent.algorithm.learning_rate" = { loguniform = [1e-6, 1e-2] }\n'
                       '"env.episode_length_s" = { choice = [5, 10] }\n"agent.policy.activation" = { choice = '
                       '["elu", "tanh"] }\n"agent.empirical_normalization" = { choice = [true, false] }\n'
                       'num_envs = { choice = [64, 128] }\nseed = { int = [0, 1000] }\n',
                 job=JOB + 'extra_args = ["agent.algorithm.gamma=0.99"]\n')
    values = {"agent.algorithm.learning_rate": 1e-05, "env.episode_length_s": 10, "agent.policy.activation": "elu",
              "agent.empirical_normalization": True, "num_envs": 128, "seed": 3}
    job = trial_job(spec, 7, values)
    args = trainer_args(job, None)
    assert job.name == "lr-t007" and args[args.index("--run_name") + 1] == "lr-t007"
    assert args[args.index("--num_envs") + 1] == "128" and args[args.index("--seed") + 1] == "3"
    assert args[-5:] == ["agent.algorithm.gamma=0.99", "agent.algorithm.learning_rate=1e-05",
                         "env.episode_length_s=10", "agent.policy.activation=elu",
                         "agent.empirical_normalization=true"]
    # the base job is untouched; the trial keeps its placement and device
    assert spec.base.extra_args == ["agent.algorithm.gamma=0.99"] and spec.base.name == "lr"
    assert job.placed_by_isaacd and job.gpu_memory == "2 GB" and job.device == "cpu"


def test_a_trials_overrides_land_in_the_built_in_tasks_configs() -> None:
    """The overrides of a trial's command line, read by Isaac Lab 3.0's override parser (the built-in trainer's
    copy) over the built-in cart-pole's configs: each searched value is the config's."""
    spec = parse(space='[sweep.space]\n"agent.algorithm.learning_rate" = { loguniform = [1e-6, 1e-2] }\n'
                       '"agent.algorithm.entropy_coef" = { uniform = [0.0, 0.02] }\n'
                       '"agent.actor.hidden_dims" = { grid = ["[64, 64]", "[128, 64, 32]"] }\n'
                       '"env.max_episode_length" = { int = [200, 500] }\n')
    job = trial_job(spec, 2, {"agent.algorithm.learning_rate": 3.12457e-05, "agent.algorithm.entropy_coef": 0.0123,
                              "agent.actor.hidden_dims": "[128, 64, 32]", "env.max_episode_length": 321})
    overrides = [a for a in trainer_args(job, None) if a.startswith(("agent.", "env."))]
    env_cfg, agent_cfg = resolve_task_config_v3(job.task, "rsl_rl_cfg_entry_point", overrides)
    assert agent_cfg["algorithm"]["learning_rate"] == 3.12457e-05 and agent_cfg["algorithm"]["entropy_coef"] == 0.0123
    assert agent_cfg["actor"]["hidden_dims"] == [128, 64, 32] and env_cfg["max_episode_length"] == 321


def test_a_trial_outside_the_sweep_is_a_programming_error() -> None:
    spec = parse()
    with pytest.raises(ValueError, match="trial 9 is not one of the sweep's trials 1..8"):
        trial_job(spec, 9, {"agent.algorithm.learning_rate": 1e-3})
    with pytest.raises(ValueError, match="the sweep searches"):
        trial_job(spec, 1, {"seed": 1})


def overrides_read_back(text: str) -> list[object]:
    """What `agent.x=<text>` sets in the agent's config: Hydra's reading (Isaac Lab 2.x) and Isaac Lab 3.0's own."""
    return [OverridesParser.create().parse_override(f"agent.x={text}").value(), isaaclab3_parse_val(text)]


@given(st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-10**9, 10**9), st.booleans()))
def test_a_sampled_number_reaches_the_agents_config_exactly(value: float | int | bool) -> None:
    """Floats by repr: the trainer gets the sampled learning rate, not a rounded one."""
    for got in overrides_read_back(as_override(value)):
        assert type(got) is type(value) and got == value


def test_a_string_value_is_the_overrides_own_text() -> None:
    """A network's layers are searched as the override's text (TOML has no list of lists in a choice's values)."""
    spec = parse(space='[sweep.space]\n"agent.policy.actor_hidden_dims" = { choice = ["[256, 128]", "[64, 64]"] }\n'
                       '"agent.policy.activation" = { choice = ["elu", "tanh"] }\n')
    job = trial_job(spec, 1, {"agent.policy.actor_hidden_dims": "[256, 128]", "agent.policy.activation": "elu"})
    assert job.extra_args == ["agent.policy.actor_hidden_dims=[256, 128]", "agent.policy.activation=elu"]
    assert overrides_read_back("[256, 128]") == [[256, 128], [256, 128]]
    assert overrides_read_back("elu") == ["elu", "elu"]


# ------------------------------------------------------------------------------------------------ refusals

@pytest.mark.parametrize("key, space, words", [
    ("--max_iterations", "{ int = [100, 500] }", "isaacd sets --max_iterations (every trial trains to the base "
                                                 "job's max_iterations, and the scheduler's rungs lead up to it); "
                                                 "set max_iterations once in [job]"),
    ("--resume", "{ choice = [true, false] }", "isaacd sets --resume (isaacd chooses the checkpoint"),
    ("--num_envs", "{ choice = [64, 128] }", "isaacd writes --num_envs from the job key; search num_envs instead"),
    ("agent.save_interval", "{ int = [10, 50] }", "isaacd sets agent.save_interval (a paused trial resumes from "
                                                  "isaacd's saves); set save_interval once in [job]"),
    ("agent.max_iterations", "{ int = [10, 50] }", "set max_iterations once in [job]"),
    ("agent.resume", "{ choice = [true] }", "remove it"),
    ("agent.load_run", "{ choice = [\"a\"] }", "isaacd chooses the checkpoint a trial resumes from"),
    ("agent.seed", "{ int = [0, 9] }", "isaacd sets agent.seed (from the job key seed, through --seed); "
                                      "search seed instead: seed = { int = [0, 1000] }"),
    ("env.scene.num_envs", "{ choice = [64] }", "search num_envs instead"),
    ("agent.device", "{ choice = [\"cpu\"] }", "set device once in [job]"),
    ("agent.params.config.max_epochs", "{ int = [1, 5] }", "set max_iterations once in [job]"),
    ("agent.trainer.timesteps", "{ int = [1, 5] }", "set max_iterations once in [job]"),
    ("max_iterations", "{ int = [100, 500] }", "isaacd owns `max_iterations` in a sweep (every trial trains to the "
                                              "base job's total"),
    ("name", "{ choice = [\"a\"] }", "the trials are named <sweep>-t001"),
    ("owner", "{ choice = [\"ana\"] }", "isaacd owns `owner` in a sweep (the sweep's owner owns every "
                                         "trial); remove it"),
    ("gpus", "{ int = [1, 2] }", "the queue places the trials"),
    ("priority", "{ int = [1, 2] }", "priority is the same for every trial: set it in [job] (searchable job keys: "
                                     "agent, num_envs, seed"),
    ("num_env", "{ choice = [64] }", "not a job key; did you mean `num_envs`?"),
    ("oom.step_down", "{ uniform = [0.2, 0.5] }", "oom is a job setting, the same for every trial: set it in [job]"),
    ("algorithm.gamma", "{ uniform = [0.9, 0.99] }", "starting with agent. or env."),
])
def test_a_key_isaacd_owns_or_that_is_no_key_is_refused_with_the_fix(key: str, space: str, words: str) -> None:
    quoted = f'"{key}"'
    where = f'sweep.space."{key}"' if "." in key else f"sweep.space.{key}"
    assert words in one_line(where, space=f"[sweep.space]\n{quoted} = {space}\n")


@pytest.mark.parametrize("written, words", [
    ("{ normal = [0.0, 1.0] }", "unknown distribution `normal`; the known ones: choice = [1024, 2048], uniform = "
                                "[0.0, 0.02], loguniform = [1e-4, 1e-2], int = [0, 1000], grid = [0.98, 0.99]"),
    ("{ unifrom = [0.0, 1.0] }", "unknown distribution `unifrom`; did you mean `uniform`?"),
    ("{ uniform = [0.5, 0.5] }", "low 0.5 is not below high 0.5"),
    ("{ uniform = [1.0] }", "uniform takes two finite numbers, [low, high]"),
    ("{ loguniform = [0.0, 0.01] }", "loguniform's low 0.0 must be above 0"),
    ("{ loguniform = [-1.0, 0.01] }", "loguniform's low -1.0 must be above 0"),
    ("{ int = [0.5, 3] }", "int takes two whole numbers"),
    ("{ int = [9, 1] }", "low 9 is not below high 1"),
    ("{ choice = [] }", "choice = [] is empty; list the values to try"),
    ("{ grid = [] }", "grid = [] is empty"),
    ("{ grid = [0.99, 0.99] }", "lists 0.99 twice"),
    ("{ choice = [[256, 128]] }", '[256, 128] is a list: write it as the override\'s text, "[256, 128]" (Hydra and '
                                  "Isaac Lab read it back as a list)"),
    ("{ choice = [{ a = 1 }] }", '{"a": 1} is not a number, a string or true/false'),
    ('{ choice = ["a\\nb"] }', '"a\\nb" holds a control character (a line break?); write it on one line'),
    ("{ uniform = [0.1, 0.2], grid = [1] }", "write one distribution per key (found uniform, grid)"),
    ("[0.1, 0.2]", "is a list; a searched key takes a distribution, e.g. { choice = [0.1, 0.2] }"),
    ("0.5", "0.5 is one value: a fixed value goes in [job]"),
])
def test_a_wrong_distribution_is_one_line_naming_the_key_and_the_fix(written: str, words: str) -> None:
    key = 'sweep.space."agent.algorithm.entropy_coef"'
    assert words in one_line(key, space=f'[sweep.space]\n"agent.algorithm.entropy_coef" = {written}\n')


def test_rungs_must_increase_and_stay_below_max_iterations() -> None:
    assert "[50, 50, 150] is not strictly increasing" in one_line(
        "sweep.scheduler.rungs", extra="[sweep.scheduler]\nrungs = [50, 50, 150]\n")
    msg = one_line("sweep.scheduler.rungs", extra="[sweep.scheduler]\nrungs = [50, 150, 500]\n")
    assert msg == ("rung 500 is not below the base job's max_iterations = 500 (a trial there has finished); write "
                   "rungs = [50, 150] or raise max_iterations in [job]")
    assert "grace_period = 500 is not below the base job's max_iterations = 500" in one_line(
        "sweep.scheduler.grace_period", extra="[sweep.scheduler]\ngrace_period = 500\n")
    assert "keep one" in one_line("sweep.scheduler", extra="[sweep.scheduler]\ngrace_period = 5\nrungs = [5]\n")
    assert "greater than or equal to 2" in one_line("sweep.scheduler.reduction_factor",
                                                    extra="[sweep.scheduler]\nreduction_factor = 1\n")


@pytest.mark.parametrize("sweep, key, words", [
    ('[sweep]\nname = "lr"\ntrials = 0\n', "sweep.trials", "greater than or equal to 1"),
    ('[sweep]\nname = "lr"\ntrials = 8\nconcurrency = 0\n', "sweep.concurrency", "greater than or equal to 1"),
    ('[sweep]\nname = "lr"\ntrials = "8"\n', "sweep.trials", '"8" is a string; write a whole number'),
    ('[sweep]\nname = "lr"\ntrails = 8\n', "sweep.trails", "unknown key; did you mean `trials`?"),
    ('[sweep]\nname = "LR sweep"\ntrials = 8\n', "sweep.name", "must be 1-63 chars of a-z"),
    ('[sweep]\nname = "lr"\n', "sweep.trials", "missing; add trials = 16"),
    ('[sweep]\nname = "lr"\ntrials = 8\nstop_at = nan\n', "sweep.stop_at", "must be a finite number"),
    ('[sweep]\nname = "lr"\ntrials = 8\n[sweep.objective]\nmode = "maximize"\n', "sweep.objective.mode",
     "'max' or 'min'"),
    ('[sweep]\nname = "lr"\ntrials = 8\n[sweep.objective]\nsmooth = 0\n', "sweep.objective.smooth",
     "greater than or equal to 1"),
    ('[sweep]\nname = "lr"\ntrials = 8\n[sweep.scheduler]\nkind = "hyperband"\n', "sweep.scheduler.kind",
     "'asha', 'none' or 'pbt'"),
])
def test_a_wrong_sweep_setting_is_one_line_naming_the_key(sweep: str, key: str, words: str) -> None:
    assert words in one_line(key, sweep=sweep)


def test_a_base_job_that_does_not_go_through_the_queue_is_refused() -> None:
    msg = one_line("job", job='[job]\nmax_iterations = 500\n')
    assert msg == 'trials go through the host\'s queue: give the base job gpu_memory = "6 GB" (trials packed by ' \
                  'memory) or gpus = 1 (a count, not a list)'
    assert "gpus = 1" in one_line("job", job='[job]\nmax_iterations = 500\ngpus = [0]\n')
    parse(job='[job]\nmax_iterations = 500\ngpus = 1\n')  # a count goes through the queue
    lines = refusal(job='[job]\nmax_iterations = 500\nruntime = "ray"\n')
    assert lines[0] == (f'{SOURCE}: job.runtime: trials go through this host\'s queue, and Ray places a runtime = "ray" '
                        'job itself: use runtime = "process", "podman" or "systemd"')


def test_the_base_job_is_the_jobs_schema_without_name() -> None:
    assert "remove name from [job]" in one_line("job.name", job=JOB + 'name = "x"\n')
    msg = one_line("job.max_iteration", job=JOB + "max_iteration = 5\n")
    assert msg.startswith("unknown key; did you mean `max_iterations`?") and ", name," not in msg
    assert "1.5 is a decimal number; write a whole number" in one_line(
        "job.num_envs", job=JOB + "num_envs = 1.5\n")
    assert one_line("job", job="") == ('missing; add [job], the base job every trial copies (task, max_iterations, '
                                       'gpu_memory = "6 GB")')


def test_trials_must_be_a_multiple_of_the_grids_combinations() -> None:
    space = ('[sweep.space]\n"agent.algorithm.gamma" = { grid = [0.98, 0.99] }\nnum_envs = { grid = [64, 128] }\n'
             'seed = { int = [0, 9] }\n')
    msg = one_line("sweep.trials", sweep='[sweep]\nname = "lr"\ntrials = 10\n', space=space)
    assert msg == ("trials = 10 is not a multiple of the grid's 4 combinations (agent.algorithm.gamma (2) x "
                   "num_envs (2)); write trials = 8 or 12")
    assert parse(space=space).trials == 8


def test_a_grid_repeated_with_nothing_sampled_would_train_the_same_runs() -> None:
    msg = one_line("sweep.trials", space='[sweep.space]\n"agent.algorithm.gamma" = { grid = [0.98, 0.99] }\n')
    assert "the repeats would train the same runs; write trials = 2, or search seed too" in msg


def test_a_searched_job_keys_values_must_be_the_jobs() -> None:
    msg = one_line("sweep.space.num_envs", space="[sweep.space]\nnum_envs = { choice = [0, 1024] }\n")
    assert msg == "a trial with num_envs = 0 would be refused: Input should be greater than 0"
    assert "num_envs takes a whole number, which a uniform range does not give; write num_envs = { int = [64, " \
           "4096] }" in one_line("sweep.space.num_envs", space="[sweep.space]\nnum_envs = { uniform = [64, 4096] }\n")
    assert "oom.min_num_envs = 512 is above num_envs = 256" in one_line(
        "sweep.space.num_envs", space="[sweep.space]\nnum_envs = { choice = [1024, 256] }\n",
        job=JOB + "[job.oom]\nstep_down = 0.5\nmin_num_envs = 512\n")
    assert "[job] sets num_envs = 1024 too; remove it from [job]" in one_line(
        "sweep.space.num_envs", space="[sweep.space]\nnum_envs = { choice = [64] }\n", job=JOB + "num_envs = 1024\n")


def test_a_searched_key_that_extra_args_also_sets_is_refused() -> None:
    msg = one_line("job.extra_args", job=JOB + 'extra_args = ["agent.algorithm.learning_rate=0.001"]\n')
    assert msg == ("agent.algorithm.learning_rate=0.001 sets what the sweep searches; remove it from extra_args (each "
                   "trial gets its own value)")
    assert one_line("job.extra_args", space="[sweep.space]\nseed = { int = [0, 9] }\n",
                    job=JOB + 'extra_args = ["--seed=3"]\n').startswith("--seed=3 sets what the sweep searches")


def test_a_sweep_name_too_long_for_its_trials_names() -> None:
    name = "s" * 60
    msg = one_line("sweep.name", sweep=f'[sweep]\nname = "{name}"\ntrials = 8\n')
    assert msg == f'"{name}" makes trial names such as {name}-t008 (65 chars), past 63; shorten it by 2'


def test_every_mistake_of_a_file_is_reported_at_once() -> None:
    lines = refusal(space='[sweep.space]\n"--resume" = { choice = [true] }\nseed = { normal = [0, 1] }\n',
                    job="[job]\nmax_iterations = 500\n")
    assert [line.split(": ")[1] for line in lines] == ["sweep.space.--resume", "sweep.space.seed", "job"]
    assert all(line.startswith(f"{SOURCE}: ") for line in lines)


def test_a_file_that_is_no_toml_names_the_file() -> None:
    with pytest.raises(ConfigError) as info:
        parse_sweep("[sweep\n", SOURCE, Path("/"))
    assert str(info.value).startswith(f"{SOURCE}: not valid TOML: ")


def test_objective_eval_ranks_by_the_evaluations_and_needs_job_eval_and_kind_none() -> None:
    """Issue 41: `objective = "eval"` ranks the trials by their best evaluated checkpoint; it needs a [job.eval] and
    (for now) every trial to the end: ASHA/PBT judge at an iteration, before that checkpoint's evaluation lands."""
    from isaacd.sweeps.observe import Series
    from isaacd.observations.tensorboard import ScalarPoint

    lines = refusal(sweep=SWEEP + 'objective = "eval"\n')
    assert any(line.startswith(f"{SOURCE}: job.eval: ") and "[job.eval]" in line for line in lines), lines
    assert any(line.startswith(f"{SOURCE}: sweep.scheduler.kind: ") and 'kind = "none"' in line for line in lines)
    spec = parse(sweep=SWEEP + 'objective = "eval"\n[sweep.scheduler]\nkind = "none"\n',
                 job=JOB + '[job.eval]\nepisodes = 10\n')
    assert spec.objective.tag == "Eval/return_mean" and spec.objective.mode == "max"
    s = Series()
    s.add([ScalarPoint(10, "Eval/return_mean", 5.0, 0.0), ScalarPoint(20, "Eval/return_mean", 9.0, 0.0),
           ScalarPoint(30, "Eval/return_mean", 7.0, 0.0)], spec.objective.tag)
    assert s.score(spec.objective.tag, "max", spec.objective.smooth) == 9.0  # its best checkpoint counts
    assert s.score("Train/mean_reward", "max", 2) == 8.0  # a training tag: the mean of the newest 2, as before
