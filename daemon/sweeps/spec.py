"""The sweep file (issue 39): a TOML file that says what to search (`[sweep.space]`), how many trials, what a trial is
judged by (`[sweep.objective]`), when a trial is paused (`[sweep.scheduler]`), and the base job every trial is a copy
of (`[job]`, the `[[jobs]]` schema without `name`). Validated like a job file: every mistake is one line naming the
file, the key and the fix (config/schema.py's ConfigError and config/errors.py's wording).

`parse_sweep` reads the file into a `SweepSpec`; `trial_job` makes trial N's job from the base job and the trial's
values (job keys set on the job, Hydra overrides appended to its extra_args). Both are pure.

What a sweep may search is what isaacd does not write itself: a trial's `--max_iterations`, resume point, save points,
run layout, device and placement are isaacd's (workflows/*.py `args`, runtimes/trainer_command.py), so a searched key
that would fight them is refused here, before any trial exists."""

from __future__ import annotations

import difflib
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from ..config import errors as type_errors
from ..config.jobs_dir import with_paths_under
from ..config.schema import JOB_NAME_RE, ConfigError, ConfigIssue, JobConfig, read_text_file
from .owned_keys import key_refusal
from .pbt import Mutation, Pbt
from .sampler import as_override, grid_points, trial_name
from .space import Choice, Distribution, Grid, IntRange, LogUniform, SearchSpace, Uniform, Value

DEFAULT_TAG = "Train/mean_reward"
# `objective = "eval"` (issue 41): the trials ranked by their checkpoints' evaluations ([job.eval]), whose scores the
# eval keeper hands the sweep as this tag at each evaluated checkpoint's iteration
EVAL_TAG = "Eval/return_mean"

# the distributions as the file writes them, for the "known ones" of a refusal
DISTRIBUTIONS = {"choice": "choice = [1024, 2048]", "uniform": "uniform = [0.0, 0.02]",
                 "loguniform": "loguniform = [1e-4, 1e-2]", "int": "int = [0, 1000]", "grid": "grid = [0.98, 0.99]"}

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class _Model(BaseModel):
    # as config/schema.py's: an unknown key is a typo, "10" is not 10
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ObjectiveConfig(_Model):
    """[sweep.objective]: what ranks the trials."""

    tag: Annotated[str, Field(min_length=1)] = DEFAULT_TAG  # a TensorBoard tag the trainer writes
    mode: Literal["max", "min"] = "max"
    smooth: Annotated[int, Field(ge=1)] = 10  # the mean over the last N logged iterations


PBT_KEYS = ("interval", "quantile", "resample_probability", "factors", "perturb")
ASHA_KEYS = ("reduction_factor", "grace_period", "rungs")


class SchedulerConfig(_Model):
    """[sweep.scheduler] as written; `SweepSpec.scheduler` holds its rungs, computed (and PBT's settings)."""

    kind: Literal["asha", "none", "pbt"] = "asha"
    reduction_factor: Annotated[int, Field(ge=2)] = 3
    grace_period: Annotated[int, Field(ge=1)] | None = None
    rungs: Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=1)] | None = None
    # PBT (issue 40; pbt.py): a member is judged every `interval` iterations; the bottom `quantile` copies the top
    interval: Annotated[int, Field(ge=1)] | None = None  # default: max_iterations / 10
    quantile: Annotated[float, Field(gt=0, le=0.5)] = 0.25
    resample_probability: Annotated[float, Field(ge=0, le=1)] = 0.25
    factors: Annotated[list[Annotated[float, Field(gt=0)]], Field(min_length=1)] = [0.8, 1.2]
    perturb: Annotated[list[str], Field(min_length=1)] | None = None  # default: every searched key

    @model_validator(mode="after")
    def _one_way(self) -> "SchedulerConfig":
        if self.grace_period is not None and self.rungs is not None:
            raise ValueError("grace_period and rungs both say where the first rung is: keep one (rungs = [50, 150, "
                             "450], or grace_period = 50 and the rest by reduction_factor)")
        return self


class SweepSection(_Model):
    """[sweep]."""

    name: str
    trials: Annotated[int, Field(ge=1)]
    concurrency: Annotated[int, Field(ge=1)] | None = None  # default: every trial at once (the queue still places)
    seed: Annotated[int, Field(ge=0)] = 0
    stop_at: float | None = None
    objective: ObjectiveConfig = ObjectiveConfig()
    scheduler: SchedulerConfig = SchedulerConfig()
    space: dict[str, Any]  # read by _space: its refusals name the distribution and the key

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not JOB_NAME_RE.fullmatch(v):
            raise ValueError(f'"{v}" must be 1-63 chars of a-z, 0-9, "_", ".", "-" starting with a letter or digit '
                             '(its trials are jobs named <name>-t001, ...), e.g. name = "cartpole-lr"')
        return v

    @field_validator("stop_at")
    @classmethod
    def _finite(cls, v: float | None) -> float | None:
        if v is not None and not math.isfinite(v):
            raise ValueError("must be a finite number, the objective value that ends the sweep (e.g. stop_at = 480.0)")
        return v


class SweepFile(_Model):
    sweep: SweepSection
    job: JobConfig


@dataclass(frozen=True)
class Objective:
    tag: str
    mode: Literal["max", "min"]
    smooth: int


@dataclass(frozen=True)
class PbtSettings:
    """kind = "pbt"'s settings, validated (`pbt_of` makes pbt.py's Pbt of them and the space)."""

    interval: int
    quantile: float
    resample_probability: float
    factors: tuple[float, ...]
    perturb: tuple[str, ...]  # the perturbed keys, in the space's order


@dataclass(frozen=True)
class Scheduler:
    kind: Literal["asha", "none", "pbt"]
    reduction_factor: int
    rungs: tuple[int, ...]  # iteration milestones, strictly increasing, each below max_iterations; () unless "asha"
    pbt: PbtSettings | None = None  # kind = "pbt" only


@dataclass(frozen=True)
class SweepSpec:
    name: str
    trials: int
    concurrency: int
    seed: int
    stop_at: float | None
    objective: Objective
    scheduler: Scheduler
    space: SearchSpace = field(hash=False)  # in the file's order
    base: JobConfig = field(hash=False)  # the validated base job, named after the sweep (a placeholder)
    source: str = ""  # the file, as parse_sweep was given it

    @property
    def grid_size(self) -> int:
        return grid_size(self.space)


def grid_size(space: SearchSpace) -> int:
    """How many combinations the grid keys make (1 without grid keys)."""
    return len(grid_points(space))


def is_job_key(key: str) -> bool:
    """A searched key without a dot is a job key (`num_envs`, `seed`); with one, a Hydra override."""
    return "." not in key


def trial_job(spec: SweepSpec, number: int, values: dict[str, Value]) -> JobConfig:
    """Trial `number`'s job: the base job named <sweep>-tNNN, its searched job keys set, its searched Hydra
    overrides appended to extra_args as `key=value` (after the workflow's own arguments, as every extra_arg), the
    value as sampler.as_override writes it: a float by its repr (the exact number), a bool true/false, a string
    verbatim (the override's own text: "[256, 128]" is a list to Hydra and to Isaac Lab 3.0's parser)."""
    if set(values) != set(spec.space):
        raise ValueError(f"trial values for {sorted(values)}, the sweep searches {sorted(spec.space)}")
    job = {k: getattr(spec.base, k) for k in spec.base.model_fields_set}  # as written: defaults stay defaults
    job["name"] = trial_name(spec.name, number, spec.trials)  # (a number outside 1..trials: ValueError)
    job["extra_args"] = list(spec.base.extra_args)
    for key in spec.space:  # the file's order
        if is_job_key(key):
            job[key] = values[key]
        else:
            job["extra_args"].append(f"{key}={as_override(values[key])}")
    return JobConfig.model_validate(job)


# ------------------------------------------------------------------------------------------------ parse_sweep

def parse_sweep(text: str, source: str, base_dir: Path) -> SweepSpec:
    """The sweep file's text as a SweepSpec, or ConfigError naming `source`, each key and its fix. A relative
    log_root or isaaclab_dir of the base job is relative to `base_dir` (the file's directory)."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(source, [ConfigIssue("", f"not valid TOML: {exc}")]) from None
    raw, issues = _prepared(raw, base_dir)
    sweep_raw = raw.get("sweep") if isinstance(raw.get("sweep"), dict) else {}
    space: SearchSpace = {}
    space_issues: list[ConfigIssue] = []
    if isinstance(sweep_raw.get("space"), dict):
        space, space_issues = _space(sweep_raw["space"])
    written = raw.get("job") if isinstance(raw.get("job"), dict) else {}
    if written and not space_issues:
        raw = {**raw, "job": _with_searched(written, space)}
    spec_file = None
    try:
        spec_file = SweepFile.model_validate(raw)
    except ValidationError as exc:
        issues += [ConfigIssue(key, _worded(key, msg)) for key, msg in type_errors.lines(exc, raw, SweepFile)]
    issues += space_issues
    if spec_file is not None:
        issues += _with_job(spec_file)
        if not space_issues:  # (a partly read space would count a wrong grid)
            issues += _with_space(spec_file, space, raw["job"], set(written))
            issues += _pbt_issues(spec_file, space)
    issues = _typos_not_missing(issues)
    if issues:
        raise ConfigError(source, issues)
    assert spec_file is not None
    s = spec_file.sweep
    return SweepSpec(name=s.name, trials=s.trials, concurrency=min(s.concurrency or s.trials, s.trials), seed=s.seed,
                     stop_at=s.stop_at, objective=Objective(s.objective.tag, s.objective.mode, s.objective.smooth),
                     scheduler=Scheduler(s.scheduler.kind, s.scheduler.reduction_factor,
                                         rungs(s.scheduler, spec_file.job.max_iterations),
                                         pbt_settings(s.scheduler, space, spec_file.job.max_iterations)),
                     space=space, base=spec_file.job, source=source)


def load_sweep(path: str | Path) -> SweepSpec:
    path = Path(path)
    return parse_sweep(read_text_file(path), str(path), path.resolve().parent)


def rungs(cfg: SchedulerConfig, max_iterations: int) -> tuple[int, ...]:
    """ASHA's milestones: as written, or grace_period x eta^k below max_iterations (grace_period by default
    max_iterations / eta^3, at least 1: about four rungs, as Ray Tune's ASHA makes them)."""
    if cfg.kind != "asha":
        return ()
    if cfg.rungs is not None:
        return tuple(cfg.rungs)
    eta = cfg.reduction_factor
    out, r = [], cfg.grace_period or max(1, max_iterations // eta ** 3)
    while r < max_iterations:
        out.append(r)
        r *= eta
    return tuple(out)


_MISSING = {"sweep": '[sweep] with name = "cartpole-lr", trials = 16 and a [sweep.space] table',
            "job": '[job], the base job every trial copies (task, max_iterations, gpu_memory = "6 GB")',
            "sweep.name": 'name = "cartpole-lr" (its trials are jobs named cartpole-lr-t001, ...)',
            "sweep.trials": "trials = 16 (how many configurations)",
            "sweep.space": '[sweep.space] with a distribution per searched key, e.g. "agent.algorithm.learning_rate" '
                           "= { loguniform = [1e-4, 1e-2] }"}


def _worded(key: str, msg: str) -> str:
    """pydantic's lines for a sweep file: a missing key says what to add; [job] has no `name`."""
    if msg == "Field required":
        return f"missing; add {_MISSING[key]}" if key in _MISSING else "missing; add it"
    if key.startswith("job.") and msg.startswith("unknown key"):
        return msg.replace(", name,", ",")
    return msg


def _typos_not_missing(issues: list[ConfigIssue]) -> list[ConfigIssue]:
    """A missing key that an unknown key beside it is a typo of (`trails = 8`) is said once, as the typo."""
    typos = {i.key.rsplit(".", 1)[0] + "." + m.group(1) if "." in i.key else m.group(1)
             for i in issues if (m := re.search(r"did you mean `([^`]+)`", i.message))}
    return [i for i in issues if not (i.message.startswith("missing") and i.key in typos)]


def _with_searched(job: dict[str, Any], space: SearchSpace) -> dict[str, Any]:
    """The base job as validated: each searched job key the file leaves out at one of its values that the job
    takes, so the base is checked as a trial would be (num_envs searched over [1024, 2048] beside [job.oom]
    min_num_envs = 512 is no mistake, though the default num_envs, 256, is below it)."""
    out = dict(job)
    for key, dist in space.items():
        if not is_job_key(key) or key in job:
            continue
        candidates = dist.values if isinstance(dist, (Choice, Grid)) else (dist.low, dist.high)
        for v in candidates:
            try:
                JobConfig.model_validate({**out, key: v})
            except ValidationError:
                continue
            out[key] = v
            break
    return out


def _prepared(raw: dict[str, Any], base_dir: Path) -> tuple[dict[str, Any], list[ConfigIssue]]:
    """The file with its base job named (a placeholder: trial_job names each trial) and its paths made absolute."""
    job = raw.get("job")
    if not isinstance(job, dict):
        return raw, []
    issues = []
    if job.get("runtime") == "ray":
        issues.append(ConfigIssue("job.runtime", 'trials go through this host\'s queue, and Ray places a runtime = "ray" '
                                                 'job itself: use runtime = "process", "podman" or "systemd"'))
    if "name" in job:
        issues.append(ConfigIssue("job.name", "the trials are named <sweep>-t001, <sweep>-t002, ... after "
                                              "[sweep] name; remove name from [job]"))
    sweep = raw.get("sweep") if isinstance(raw.get("sweep"), dict) else {}
    if sweep.get("objective") == "eval":  # the short form: the evaluations' mean return, the best one counts
        raw = {**raw, "sweep": {**sweep, "objective": {"tag": EVAL_TAG, "mode": "max", "smooth": 1}}}
    name = sweep.get("name")
    placeholder = name if isinstance(name, str) and JOB_NAME_RE.fullmatch(name) else "sweep"
    return {**raw, "job": {**with_paths_under(job, base_dir), "name": placeholder}}, issues


# ------------------------------------------------------------------------------------------------ the space

def _space_key(key: str) -> str:
    """The key as the file spells it under [sweep.space]: quoted where it has a dot."""
    return f'sweep.space."{key}"' if "." in key or not re.fullmatch(r"[A-Za-z0-9_-]+", key) else f"sweep.space.{key}"


def _leaves(table: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """(searched key, what it says), in the file's order. An unquoted dotted key (`agent.algorithm.gamma = {...}`)
    is nested tables in TOML; a table whose values are all tables is such a path, read as the dotted key."""
    out: list[tuple[str, Any]] = []
    for k, v in table.items():
        key = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict) and v and all(isinstance(x, dict) for x in v.values()):
            out += _leaves(v, key)
        else:
            out.append((key, v))
    return out


def _space(table: dict[str, Any]) -> tuple[SearchSpace, list[ConfigIssue]]:
    space: SearchSpace = {}
    issues: list[ConfigIssue] = []
    leaves = _leaves(table)
    if not leaves:
        issues.append(ConfigIssue("sweep.space", f"missing; add {_MISSING['sweep.space']}"))
    seen: dict[str, str] = {}
    for key, written in leaves:
        where = _space_key(key)
        why = key_refusal(key)
        if why is None and key.lstrip("+") in seen:
            why = f"searched twice (also as {seen[key.lstrip('+')]}); keep one"
        seen.setdefault(key.lstrip("+"), key)
        dist, bad = _distribution(key, written)
        if why is not None:
            issues.append(ConfigIssue(where, why))
        elif bad is not None:
            issues.append(ConfigIssue(where, bad))
        elif dist is not None:
            space[key] = dist
    return space, issues


def _distribution(key: str, written: Any) -> tuple[Distribution | None, str | None]:
    """(the distribution `written` says, or why it says none: one line with the fix)."""
    example = f"{key} = {{ {DISTRIBUTIONS['choice']} }}" if is_job_key(key) else \
        f'"{key}" = {{ {DISTRIBUTIONS["uniform"]} }}'
    if not isinstance(written, dict):
        if isinstance(written, list):
            return None, (f"{type_errors.toml(written)} is a list; a searched key takes a distribution, e.g. "
                          f"{{ choice = {type_errors.toml(written)} }}")
        return None, (f"{type_errors.toml(written)} is one value: a fixed value goes in [job] (a job key, or a Hydra "
                      f"override in extra_args); a searched key takes a distribution, e.g. {example}")
    if len(written) != 1:
        said = ", ".join(written) or "none"
        return None, f"write one distribution per key (found {said}), e.g. {example}"
    kind, arg = next(iter(written.items()))
    if kind not in DISTRIBUTIONS:
        close = difflib.get_close_matches(kind, list(DISTRIBUTIONS), n=1, cutoff=0.75)  # (normal is no uniform)
        mean = f"; did you mean `{close[0]}`?" if close else ""
        return None, (f"unknown distribution `{kind}`{mean}; the known "
                      f"ones: {', '.join(DISTRIBUTIONS.values())}")
    if not isinstance(arg, list):
        return None, f"{kind} takes a list, e.g. {{ {DISTRIBUTIONS[kind]} }}"
    if kind in ("choice", "grid"):
        return _values(key, kind, arg)
    return _range(kind, arg)


def _values(key: str, kind: str, arg: list[Any]) -> tuple[Distribution | None, str | None]:
    if not arg:
        return None, f"{kind} = [] is empty; list the values to try, e.g. {{ {DISTRIBUTIONS[kind]} }}"
    for v in arg:
        if isinstance(v, list) and not is_job_key(key):
            text = type_errors.toml(v).replace('"', "'")
            return None, (f"{type_errors.toml(v)} is a list: write it as the override's text, \"{text}\" (Hydra and "
                          f"Isaac Lab read it back as a list)")
        if isinstance(v, (dict, list)) or not isinstance(v, (bool, int, float, str)):
            return None, (f"{type_errors.toml(v)} is not a number, a string or true/false, which {kind} values are; "
                          f"e.g. {{ {DISTRIBUTIONS[kind]} }}")
        if isinstance(v, float) and not math.isfinite(v):
            return None, f"{v} is not a finite number; {kind} values are finite"
        if isinstance(v, str) and _CONTROL.search(v):
            return None, f"{type_errors.toml(v)} holds a control character (a line break?); write it on one line"
    twice = [v for i, v in enumerate(arg) if any(_same(v, w) for w in arg[:i])]
    if twice:
        return None, f"lists {type_errors.toml(twice[0])} twice; each value once"
    values = tuple(arg)
    return (Choice(values) if kind == "choice" else Grid(values)), None


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b  # 1 and 1.0 and true are three values to a trainer's config


def _range(kind: str, arg: list[Any]) -> tuple[Distribution | None, str | None]:
    fix = f"e.g. {{ {DISTRIBUTIONS[kind]} }}"
    whole = kind == "int"
    ok = (lambda v: isinstance(v, int) and not isinstance(v, bool)) if whole else \
        (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v))
    if len(arg) != 2 or not all(ok(v) for v in arg):
        what = "two whole numbers" if whole else "two finite numbers"
        return None, f"{kind} takes {what}, [low, high]: {type_errors.toml(arg)} is not; {fix}"
    low, high = arg
    if low >= high:
        return None, f"low {low} is not below high {high}; write [low, high] with low < high ({fix})"
    if kind == "loguniform" and low <= 0:
        return None, (f"loguniform's low {low} must be above 0 (its logarithm is uniform); e.g. {{ loguniform = "
                      f"[1e-4, {high}] }}, or uniform = [{low}, {high}]")
    if whole:
        return IntRange(low, high), None
    return (Uniform if kind == "uniform" else LogUniform)(float(low), float(high)), None


# ------------------------------------------------------------------------------------------------ with the job

def _with_job(spec_file: SweepFile) -> list[ConfigIssue]:
    """What the sweep's settings say about the base job (and it about them)."""
    s, job = spec_file.sweep, spec_file.job
    issues: list[ConfigIssue] = []
    if not job.placed_by_isaacd:
        issues.append(ConfigIssue("job", "trials go through the host's queue: give the base job gpu_memory = "
                                         '"6 GB" (trials packed by memory) or gpus = 1 (a count, not a list)'))
    if s.objective.tag == EVAL_TAG:
        if getattr(job, "eval", None) is None:
            issues.append(ConfigIssue("job.eval", 'objective = "eval" ranks the trials by their checkpoints\' '
                                                  "evaluations: give the base job a [job.eval] section (e.g. every = 1,"
                                                  " episodes = 100), or rank by a training tag"))
        if s.scheduler.kind != "none":
            issues.append(ConfigIssue("sweep.scheduler.kind",
                                      'objective = "eval" works with kind = "none" (every trial to the end, ranked by '
                                      f"its best evaluation): {s.scheduler.kind.upper()} judges a trial at an iteration, "
                                      "and an evaluation lands a minute or more after its checkpoint; waiting for it "
                                      'is not built. Write kind = "none", or rank by a training tag'))
    widest = trial_name(s.name, s.trials, s.trials)
    if len(widest) > 63:
        issues.append(ConfigIssue("sweep.name", f'"{s.name}" makes trial names such as {widest} ({len(widest)} '
                                                f"chars), past 63; shorten it by {len(widest) - 63}"))
    return issues + _scheduler_issues(s.scheduler, job.max_iterations)


def _with_space(spec_file: SweepFile, space: SearchSpace, raw_job: dict[str, Any],
                written: set[str]) -> list[ConfigIssue]:
    """What the search space says about the trials and the base job."""
    s, job = spec_file.sweep, spec_file.job
    issues: list[ConfigIssue] = []
    size = grid_size(space)
    if s.trials % size:
        grid = " x ".join(f"{k} ({len(d.values)})" for k, d in space.items() if isinstance(d, Grid))
        below, above = s.trials // size * size, (s.trials // size + 1) * size
        fix = f"trials = {below} or {above}" if below else f"trials = {above}"
        issues.append(ConfigIssue("sweep.trials", f"trials = {s.trials} is not a multiple of the grid's {size} "
                                                  f"combinations ({grid}); write {fix}"))
    elif s.trials > size and all(isinstance(d, Grid) for d in space.values()):
        issues.append(ConfigIssue("sweep.trials", f"trials = {s.trials} repeats the grid's {size} combinations with "
                                                  "nothing else sampled (the same seed): the repeats would train the "
                                                  f"same runs; write trials = {size}, or search seed too (seed = "
                                                  "{ int = [0, 1000] })"))
    issues += _extra_args_clash(job, space)
    for key, dist in space.items():
        if is_job_key(key):
            issues += _job_values(key, dist, raw_job, written)
    return issues


def _scheduler_issues(cfg: SchedulerConfig, max_iterations: int) -> list[ConfigIssue]:
    if cfg.kind == "none":
        return []  # (its asha and pbt keys are kept: flip kind to compare on one file)
    if cfg.kind == "pbt":
        return [ConfigIssue(f"sweep.scheduler.{k}", f"{k} is ASHA's (kind = \"asha\"); PBT judges each member every "
                                                    "`interval` iterations: remove it")
                for k in ASHA_KEYS if k in cfg.model_fields_set]
    wrong = [k for k in PBT_KEYS if k in cfg.model_fields_set]
    return [ConfigIssue(f"sweep.scheduler.{k}", f'{k} is PBT\'s (kind = "pbt"); ASHA pauses by rungs: remove it')
            for k in wrong] or _asha_issues(cfg, max_iterations)


def _asha_issues(cfg: SchedulerConfig, max_iterations: int) -> list[ConfigIssue]:
    if cfg.rungs is not None:
        r = cfg.rungs
        if any(b <= a for a, b in zip(r, r[1:])):
            return [ConfigIssue("sweep.scheduler.rungs", f"{type_errors.toml(r)} is not strictly increasing; list "
                                                         "the iteration milestones in order, each once")]
        if r[-1] >= max_iterations:
            kept = [x for x in r if x < max_iterations]
            fix = f"rungs = {type_errors.toml(kept)}" if kept else "lower rungs"
            return [ConfigIssue("sweep.scheduler.rungs", f"rung {r[-1]} is not below the base job's max_iterations = "
                                                         f"{max_iterations} (a trial there has finished); write {fix}"
                                                         " or raise max_iterations in [job]")]
        return []
    if cfg.grace_period is not None and cfg.grace_period >= max_iterations:
        return [ConfigIssue("sweep.scheduler.grace_period", f"grace_period = {cfg.grace_period} is not below the base "
                                                            f"job's max_iterations = {max_iterations}; write "
                                                            f"grace_period = {max(1, max_iterations // 10)}")]
    if not rungs(cfg, max_iterations):
        return [ConfigIssue("sweep.scheduler", f"max_iterations = {max_iterations} leaves ASHA no rung below it; "
                                               'raise max_iterations in [job], or kind = "none"')]
    return []


def _extra_args_clash(job: JobConfig, space: SearchSpace) -> list[ConfigIssue]:
    """A searched key the base job's extra_args also set: two values for one key, which wins is the trainer's."""
    written = {a.split("=", 1)[0].lstrip("+"): a for a in job.extra_args}
    clash = [written[k] for k in (key.lstrip("+") for key in space if not is_job_key(key)) if k in written]
    clash += [written[f"--{k}"] for k in space if is_job_key(k) and f"--{k}" in written]
    if not clash:
        return []
    return [ConfigIssue("job.extra_args", f"{', '.join(clash)} set{'s' if len(clash) == 1 else ''} what the sweep "
                                          "searches; remove it from extra_args (each trial gets its own value)")]


def _takes_whole_numbers(key: str, raw_job: dict[str, Any]) -> bool:
    try:
        JobConfig.model_validate({**raw_job, key: 1.5})
    except ValidationError as exc:
        return any(e["type"] in ("int_type", "int_from_float") for e in exc.errors())
    return False


def _job_values(key: str, dist: Distribution, raw_job: dict[str, Any], written: set[str]) -> list[ConfigIssue]:
    """Each value a searched job key can take (a choice's, a range's ends) as the base job's: the job's own rule."""
    where = _space_key(key)
    if key in written:
        return [ConfigIssue(where, f"[job] sets {key} = {type_errors.toml(raw_job[key])} too; remove it from [job] "
                                   "(each trial gets its own value)")]
    if isinstance(dist, (Uniform, LogUniform)) and _takes_whole_numbers(key, raw_job):
        return [ConfigIssue(where, f"{key} takes a whole number, which a {type(dist).__name__.lower()} range does not "
                                   f"give; write {key} = {{ int = [{math.ceil(dist.low)}, {math.floor(dist.high)}] }} "
                                   "or a choice")]
    values = (dist.values if isinstance(dist, (Choice, Grid)) else (dist.low, dist.high))
    for v in values:
        try:
            JobConfig.model_validate({**raw_job, key: v})
        except ValidationError as exc:
            said = "; ".join(msg for _, msg in type_errors.lines(exc, {**raw_job, key: v}, JobConfig))
            return [ConfigIssue(where, f"a trial with {key} = {type_errors.toml(v)} would be refused: {said}")]
    return []


# ------------------------------------------------------------------------------------------------ PBT (issue 40)

# What an exploit can change in a member's running trainer: rsl_rl's PPO keeps each `agent.algorithm.<name>` as an
# attribute of the same name (rsl_rl/algorithms/ppo.py __init__: self.learning_rate, self.entropy_coef, ...), read at
# every update, and the learning rate also in its optimizer (set again after its load(), which takes the
# checkpoint's). Anything else is part of what the member's running process was built with: the environment (env.*,
# num_envs, seed), the network (agent.policy.*: the copied weights' shapes) or the runner (agent.<key>).
IN_PLACE_PREFIX = "agent.algorithm."
PBT_WORKFLOWS = ("builtin", "rsl_rl")
# Why the other libraries' members cannot exploit yet, by what each does with a learning rate changed on resume from
# another member's checkpoint (read in the installed wheels, rl-games 1.6.5 and skrl 2.1.1); and for every key: an
# exploit copies rsl_rl's checkpoints (model_<N>.pt) and sets rsl_rl's algorithm again after the load, nothing else.
PBT_REFUSED = {
    "rl_games": ("agent.params.config.learning_rate",
                 "an exploit copies only rsl_rl checkpoints (model_<N>.pt, not rl_games' nn/*.pth), and a run resumed "
                 "from a copy would train its first minibatch at the copy's learning rate, restored with its "
                 "optimizer state, the configured one (last_lr, not saved) only from the second "
                 "(rl_games/common/a2c_common.py set_full_state_weights, algos_torch/a2c_continuous.py "
                 "train_actor_critic)"),
    "skrl": ("agent.agent.learning_rate",
             "a run resumed from a copy keeps the copy's learning rate (skrl/agents/torch/base.py Agent.load restores "
             "the optimizer's state; the configured rate only builds the optimizer, agents/torch/ppo/ppo.py; "
             "KLAdaptiveLR steps from the restored rate), and an exploit copies only rsl_rl checkpoints"),
}


def pbt_settings(cfg: SchedulerConfig, space: SearchSpace, max_iterations: int) -> PbtSettings | None:
    """kind = "pbt"'s settings with their defaults (None for another kind)."""
    if cfg.kind != "pbt":
        return None
    perturb = tuple(k for k in space if cfg.perturb is None or k in cfg.perturb)
    return PbtSettings(interval=cfg.interval or max(1, max_iterations // 10), quantile=cfg.quantile,
                       resample_probability=cfg.resample_probability, factors=tuple(cfg.factors), perturb=perturb)


def pbt_of(spec: SweepSpec) -> Pbt:
    """The pure decision's settings (pbt.py) of a kind = "pbt" sweep."""
    p = spec.scheduler.pbt
    if p is None:
        raise ValueError(f"sweep {spec.name} is scheduled by {spec.scheduler.kind}, not pbt")
    return Pbt(interval=p.interval, max_iterations=spec.base.max_iterations, quantile=p.quantile,
               mode=spec.objective.mode, seed=spec.seed, stop_at=spec.stop_at,
               mutations={k: Mutation(spec.space[k], p.factors, p.resample_probability) for k in p.perturb})


def _pbt_issues(spec_file: SweepFile, space: SearchSpace) -> list[ConfigIssue]:
    """What a population needs: every member at once, at least two, keys an exploit can change in place."""
    s, job = spec_file.sweep, spec_file.job
    cfg = s.scheduler
    if cfg.kind != "pbt":
        return []
    issues: list[ConfigIssue] = []
    if s.trials < 2:
        issues.append(ConfigIssue("sweep.trials", "a population of 1 has no member to copy: trials = 4 or more "
                                                  "(the population)"))
    if s.concurrency is not None and s.concurrency < s.trials:
        issues.append(ConfigIssue("sweep.concurrency", f"PBT's {s.trials} members train side by side and copy each "
                                                       f"other: write concurrency = {s.trials}, or leave it out"))
    interval = cfg.interval or max(1, job.max_iterations // 10)
    if interval >= job.max_iterations:
        issues.append(ConfigIssue("sweep.scheduler.interval", f"interval = {interval} is not below the base job's "
                                                              f"max_iterations = {job.max_iterations}: no member "
                                                              f"would be judged; write interval = "
                                                              f"{max(1, job.max_iterations // 10)}"))
    if job.workflow not in PBT_WORKFLOWS:
        issues.append(_library_refused(job.workflow, cfg, space))
        return issues  # (the in-place rules below are rsl_rl's)
    for key in space:
        if not key.lstrip("+").startswith(IN_PLACE_PREFIX):
            issues.append(ConfigIssue(_space_key(key), f"{key} is not changed by an exploit in place: a member goes "
                                                       "on in its running trainer (its environment, network and "
                                                       "runner stay), which only agent.algorithm.* can change; fix "
                                                       'it in [job], or search it with kind = "asha"'))
    for key in cfg.perturb or ():
        if key not in space:
            issues.append(ConfigIssue("sweep.scheduler.perturb", f'"{key}" is not searched: each perturbed key needs '
                                                                 "a distribution in [sweep.space] (its first sample "
                                                                 "and its bounds)"))
    if all(f == 1.0 for f in cfg.factors) and cfg.resample_probability == 0:
        issues.append(ConfigIssue("sweep.scheduler.factors", f"{type_errors.toml(cfg.factors)} with "
                                                             "resample_probability = 0 never changes a value: "
                                                             "factors = [0.8, 1.2]"))
    return issues


def _library_refused(workflow: str, cfg: SchedulerConfig, space: SearchSpace) -> ConfigIssue:
    """One line naming a perturbed key (the library's learning rate when perturbed) and why a member of `workflow`
    would not train with its perturbed value."""
    lr_key, why_lr = PBT_REFUSED.get(workflow, ("", ""))
    perturbed = [k for k in space if cfg.perturb is None or k in cfg.perturb] or list(space)
    if not perturbed:
        return ConfigIssue("job.workflow", f'PBT runs rsl_rl members (workflow = "rsl_rl" or "builtin"), not '
                                           f"{workflow}'s")
    key = lr_key if lr_key in perturbed else perturbed[0]
    why = why_lr if key == lr_key else ("an exploit copies only rsl_rl's checkpoints and sets only rsl_rl's "
                                        "agent.algorithm.* again after the copy's load")
    return ConfigIssue(_space_key(key), f"{key} cannot be perturbed in {workflow} members: {why}; PBT runs rsl_rl "
                                        'members (workflow = "rsl_rl" or "builtin"): search it with kind = "asha"')
