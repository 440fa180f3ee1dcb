"""A PBT sweep file (issue 40, daemon/sweeps/spec.py `kind = "pbt"`): what it gives the decision, and each refusal
as one line naming the file, the key and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from isaacd.config.schema import ConfigError
from isaacd.sweeps.pbt import Mutation
from isaacd.sweeps.space import LogUniform, Uniform
from isaacd.sweeps.spec import parse_sweep, pbt_of

SOURCE = "/home/ana/sweeps/pop.toml"
SWEEP = '[sweep]\nname = "pop"\ntrials = 4\nseed = 3\n'
SCHED = '[sweep.scheduler]\nkind = "pbt"\ninterval = 50\n'
SPACE = ('[sweep.space]\n"agent.algorithm.learning_rate" = { loguniform = [1e-4, 1e-2] }\n'
         '"agent.algorithm.entropy_coef" = { uniform = [0.0, 0.02] }\n')
JOB = '[job]\nworkflow = "rsl_rl"\nmax_iterations = 500\ngpu_memory = "2 GB"\ndevice = "cpu"\n'


def parse(sweep: str = SWEEP, sched: str = SCHED, space: str = SPACE, job: str = JOB):  # noqa: ANN201
    return parse_sweep(sweep + sched + space + job, SOURCE, Path("/home/ana/sweeps"))


def one_line(key: str, **parts: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse(**parts)
    lines = str(info.value).splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{SOURCE}: {key}: "), lines[0]
    return lines[0].removeprefix(f"{SOURCE}: {key}: ")


def test_a_population_gives_the_decision_its_settings_and_every_searched_key_is_perturbed_by_default():
    spec = parse()
    assert spec.scheduler.kind == "pbt" and spec.scheduler.rungs == () and spec.concurrency == 4
    p = pbt_of(spec)
    assert (p.interval, p.max_iterations, p.quantile, p.seed, p.mode) == (50, 500, 0.25, 3, "max")
    assert p.mutations == {"agent.algorithm.learning_rate": Mutation(LogUniform(1e-4, 1e-2)),
                           "agent.algorithm.entropy_coef": Mutation(Uniform(0.0, 0.02))}


def test_the_settings_as_written_and_a_key_searched_but_not_perturbed():
    sched = SCHED + ('quantile = 0.5\nresample_probability = 0.0\nfactors = [0.5, 2.0]\n'
                     'perturb = ["agent.algorithm.learning_rate"]\n')
    p = pbt_of(parse(sched=sched))
    assert p.quantile == 0.5
    assert p.mutations == {"agent.algorithm.learning_rate": Mutation(LogUniform(1e-4, 1e-2), (0.5, 2.0), 0.0)}


def test_the_interval_defaults_to_a_tenth_of_max_iterations():
    assert pbt_of(parse(sched='[sweep.scheduler]\nkind = "pbt"\n')).interval == 50


@pytest.mark.parametrize(("part", "key", "words"), [
    ({"sweep": '[sweep]\nname = "pop"\ntrials = 1\n'}, "sweep.trials", "a population of 1 has no member to copy"),
    ({"sweep": '[sweep]\nname = "pop"\ntrials = 4\nconcurrency = 2\n'}, "sweep.concurrency",
     "write concurrency = 4, or leave it out"),
    ({"sched": SCHED.replace("50", "500")}, "sweep.scheduler.interval", "write interval = 50"),
    ({"sched": SCHED + "quantile = 0.75\n"}, "sweep.scheduler.quantile", "less than or equal to 0.5"),
    ({"sched": SCHED + "factors = [0.8, -1.2]\n"}, "sweep.scheduler.factors[1]", "greater than 0"),
    ({"sched": SCHED + "resample_probability = 2\n"}, "sweep.scheduler.resample_probability",
     "less than or equal to 1"),
    ({"sched": SCHED + "factors = [1.0]\nresample_probability = 0.0\n"}, "sweep.scheduler.factors",
     "never changes a value"),
    ({"sched": SCHED + 'perturb = ["agent.algorithm.gamma"]\n'}, "sweep.scheduler.perturb",
     '"agent.algorithm.gamma" is not searched'),
    ({"sched": SCHED + "rungs = [10, 30]\n"}, "sweep.scheduler.rungs", "is ASHA's"),
    ({"sched": '[sweep.scheduler]\nkind = "asha"\ninterval = 50\n'}, "sweep.scheduler.interval", "is PBT's"),
])
def test_a_wrong_population_setting_is_one_line_naming_the_key_and_the_fix(part, key, words):
    assert words in one_line(key, **part)


@pytest.mark.parametrize("key", ['"env.episode_length_s" = { choice = [5.0, 10.0] }',
                                 "num_envs = { choice = [1024, 2048] }", "seed = { int = [0, 9] }",
                                 '"agent.policy.init_noise_std" = { uniform = [0.5, 1.0] }'])
def test_a_key_an_exploit_cannot_change_in_the_running_trainer_is_refused(key):
    name = key.split(" = ")[0].strip('"')
    where = f'sweep.space."{name}"' if "." in name else f"sweep.space.{name}"
    said = one_line(where, space=SPACE + key + "\n")
    assert "not changed by an exploit in place" in said and "agent.algorithm.*" in said


@pytest.mark.parametrize(("library", "lr", "other", "words"), [
    ("rl_games", "agent.params.config.learning_rate", "agent.params.config.entropy_coef",
     "would train its first minibatch at the copy's learning rate"),
    ("skrl", "agent.agent.learning_rate", "agent.agent.entropy_loss_scale", "keeps the copy's learning rate"),
])
def test_a_population_of_another_library_is_refused_naming_the_key_its_resume_would_not_change(library, lr, other,
                                                                                               words):
    space = f'[sweep.space]\n"{lr}" = {{ loguniform = [1e-4, 1e-2] }}\n"{other}" = {{ uniform = [0.0, 0.02] }}\n'
    said = one_line(f'sweep.space."{lr}"', space=space, job=JOB.replace('"rsl_rl"', f'"{library}"'))
    assert said.startswith(f"{lr} cannot be perturbed in {library} members: ") and words in said
    assert said.endswith('PBT runs rsl_rl members (workflow = "rsl_rl" or "builtin"): search it with kind = "asha"')
    # its learning rate searched, not perturbed: the perturbed key is named, and why any key is refused
    sched = SCHED + f'perturb = ["{other}"]\n'
    said = one_line(f'sweep.space."{other}"', space=space, sched=sched, job=JOB.replace('"rsl_rl"', f'"{library}"'))
    assert "an exploit copies only rsl_rl's checkpoints" in said
    # the same keys with kind = "asha": a sweep of that library as any other
    assert parse(space=space, sched=SCHED.replace('"pbt"', '"asha"').replace("interval = 50\n", ""),
                 job=JOB.replace('"rsl_rl"', f'"{library}"')).scheduler.pbt is None


def test_kind_none_keeps_the_pbt_keys_so_one_file_flips_between_them():
    assert parse(sched=SCHED.replace('"pbt"', '"none"')).scheduler.pbt is None


# ---- a population that cannot fit (submit) --------------------------------------------------------------------------
def test_a_population_larger_than_an_empty_host_holds_is_refused_saying_how_many_fit():
    from test_queue_config import snapshot

    from isaacd.sweeps.spec import trial_job
    from isaacd.sweeps.submit import members_that_fit

    spec = parse(job=JOB.replace('"2 GB"', '"60GiB"'))  # 140 GiB GPUs: 2 members each
    member = trial_job(spec, 1, {"agent.algorithm.learning_rate": 1e-3, "agent.algorithm.entropy_coef": 0.0})
    assert members_that_fit(member, snapshot({0: 40.0, 1: 40.0})) == 4  # (the MIG slice is its GPU's: not counted)
    assert members_that_fit(member, snapshot({0: 40.0})) == 2
    assert members_that_fit(member, None) is None  # no inventory: never a reason to refuse


def test_a_population_on_a_host_with_mig_counts_one_member_per_instance_that_holds_it():
    from test_scheduler_mig import sampler

    from isaacd.gpu import GpuSampler, ManualClock, ScriptedSource
    from isaacd.sweeps.spec import trial_job
    from isaacd.sweeps.submit import members_that_fit

    def member(size: str):  # noqa: ANN202
        spec = parse(job=JOB.replace('"2 GB"', f'"{size}"'))
        return trial_job(spec, 1, {"agent.algorithm.learning_rate": 1e-3, "agent.algorithm.entropy_coef": 0.0})

    # GPU 0 an 80 GB H100 in MIG mode (1g.10gb x2: 9.96 GiB each, 3g.40gb: 39.8 GiB), GPU 1 an H100 not in MIG mode:
    # GPU 1 holds 9 members of 8 GiB, each instance one (held whole), GPU 0 itself none (it counted 9, as a GPU)
    mixed = sampler().snapshot()
    assert members_that_fit(member("8GiB"), mixed) == 12
    assert members_that_fit(member("30GiB"), mixed) == 3  # 2 on GPU 1, 1 on the 3g.40gb
    assert members_that_fit(member("8GiB").model_copy(update={"gpu_memory": None, "gpus": 1}), mixed) == 1
    assert members_that_fit(member("8GiB").model_copy(update={"gpus": 2}), mixed) == 4  # a gang: never on instances
    assert members_that_fit(member("8GiB"), sampler(gpu1=False).snapshot()) == 3
    # a GPU in MIG mode with no instance yet (the layout being made): never a reason to refuse
    clock = ManualClock(1_700_000_000.0)
    bare = GpuSampler(ScriptedSource({"gpus": [{"index": 0, "mig_mode": True}, {"index": 1}]}, clock=clock),
                      clock=clock)
    bare.poll_fast()
    assert members_that_fit(member("8GiB"), bare.snapshot()) is None
