"""Issue 21 part 1, the pure parts of a booted spare: which spare a job gets (daemon/attempt/spare_mode.py), the go's
`resume`, the staging dirs (daemon/attempt/spare.py) and the shim's hand-over helpers (trainer/shim.py "booted spare"):
run dir naming, params and manifest, and that `--checkpoint latest` never picks a staged run."""

from __future__ import annotations

import json
import os
from dataclasses import replace
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from isaacd.config.schema import ConfigError, JobConfig, parse_config
from isaacd.attempt.spare import remove_staging, sweep_staging
from isaacd.attempt.spare_launch import stage_booted
from isaacd.attempt.spare_mode import (GiB, Room, booted_resume, choose_mode, gpu_rooms, host_room, room_problem,
                                       set_after_load, spare_setting, split_attempt_flags)
from isaacd_trainer import shim_spare
from isaacd.gpu.snapshot import GpuSnapshot, empty_snapshot
from isaacd.gpu.types import GpuInfo, GpuMap, GpuSample, ProcessMemory
from test_spare_unit import acted
from isaacd_trainer.upstream import resolve_checkpoint_selector, write_run_manifest


def job(**over) -> JobConfig:  # noqa: ANN003
    fields = {"name": "cp", "workflow": "rsl_rl", "task": "Isaac-Cartpole-Direct", "launcher": ["/usr/bin/python3"]}
    return JobConfig.model_validate({**fields, **over})


# ---- the setting -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value,want", [(None, "auto"), (True, "auto"), (False, "off"), ("booted", "booted"),
                                        ("imports", "imports"), ("off", "off"), ("auto", "auto")])
def test_spare_setting_keeps_true_and_false(value, want):
    assert spare_setting(value) == want


def test_config_accepts_the_modes_and_names_the_key_for_others(tmp_path):
    for v in ('"booted"', '"imports"', '"off"', '"auto"', "true", "false"):
        cfg = parse_config(f'[[jobs]]\nname = "a"\nspare = {v}\n', "t.toml", tmp_path)
        assert spare_setting(cfg.jobs[0].spare) == (json.loads(v) if v.startswith('"') else
                                                    {"true": "auto", "false": "off"}[v])
    with pytest.raises(ConfigError) as e:
        parse_config('[[jobs]]\nname = "a"\nspare = "warm"\n', "t.toml", tmp_path)
    assert "spare" in str(e.value)


# ---- the room rule ---------------------------------------------------------------------------------------------
def test_room_rule_trainer_share_plus_a_tenth():
    h200 = 140 * GiB
    assert room_problem([Room("GPU 0", 120 * GiB, 6 * GiB, h200)]) is None
    tight = room_problem([Room("GPU 0", 15 * GiB, 6 * GiB, h200)])
    assert tight is not None and tight.startswith("GPU 0: 15.0 GiB free") and "imports-only" in tight
    assert room_problem([Room("GPU 0", 120 * GiB, None, h200)]).endswith("not known: imports-only")
    assert "not known" in room_problem(None)
    # small devices keep at least 1 GiB free
    assert room_problem([Room("host RAM", int(1.9 * GiB), 1 * GiB, 4 * GiB)]) is not None
    assert room_problem([Room("host RAM", int(2.1 * GiB), 1 * GiB, 4 * GiB)]) is None


def test_choose_mode():
    roomy = [Room("GPU 0", 100 * GiB, 5 * GiB, 140 * GiB)]
    assert choose_mode("auto", job(), True, roomy) == ("booted", None)
    mode, why = choose_mode("auto", job(), True, None)
    assert mode == "imports" and "not known" in why  # GPU memory unknown: never risk the trainer's memory
    assert choose_mode("imports", job(), True, roomy) == ("imports", None)
    assert choose_mode("booted", job(), True, None) == ("booted", None)  # the operator decided: no room check
    mode, why = choose_mode("auto", job(workflow="skrl"), False, roomy)
    assert mode == "imports" and "skrl and rl_games" in why
    mode, why = choose_mode("booted", job(workflow="builtin", launcher=None), True, None)
    assert mode == "booted"
    mode, why = choose_mode("auto", job(workflow="builtin", launcher=None), True, roomy)
    assert mode == "imports" and "built-in trainer" in why
    mode, why = choose_mode("booted", job(extra_args=["--no-resume_optimizer_state"]), True, roomy)
    assert mode == "imports" and "--no-resume_optimizer_state" in why
    assert choose_mode("booted", job(), True, roomy, fallback="died during its boot") == ("imports",
                                                                                         "died during its boot")
    mode, why = choose_mode("auto", job(extra_args=["agent.logger=wandb"]), True, roomy)
    assert mode == "imports" and "W&B" in why  # auto: a W&B job keeps the imports-only spare
    assert choose_mode("booted", job(extra_args=["agent.logger=wandb"]), True, roomy) == ("booted", None)


def gpu_snapshot(devices: dict[str, tuple[int | None, int | None, dict[int, int | None]]]) -> GpuSnapshot:
    """The GPU sampler's snapshot: per GPU key (memory used, total, {pid: bytes it holds})."""
    return replace(empty_snapshot(), up=True, source="scripted",
                   gpus=GpuMap({k: GpuInfo(int(k), f"GPU-{k}", "NVIDIA H200", f"0:{k}") for k in devices}),
                   samples=GpuMap({k: GpuSample(k, 0.0, memory_used_bytes=used, memory_total_bytes=total,
                                                processes=tuple(ProcessMemory(k, p, b) for p, b in procs.items()))
                                   for k, (used, total, procs) in devices.items()}))


def test_rooms_from_the_gpu_snapshot_and_meminfo():
    snap = gpu_snapshot({"0": (10 * GiB, 80 * GiB, {1: 6 * GiB, 2: 4 * GiB}), "1": (1, 80 * GiB, {})})
    # GPU 0: claimed, and the trainer (pid 1) holds 6 GiB there; pid 2 is no process of the job
    assert gpu_rooms(job(gpus=[0]), [1], snap) == [Room("GPU 0", 70 * GiB, 6 * GiB, 80 * GiB)]
    # a GPU the job does not claim counts where its trainer holds memory on it (the attribution's "jobs")
    unclaimed = job(gpus=[], device="cpu")
    assert gpu_rooms(unclaimed, [1], snap) == [Room("GPU 0", 70 * GiB, 6 * GiB, 80 * GiB)]
    assert gpu_rooms(job(gpus=[0]), [1], replace(snap, up=False)) is None
    assert gpu_rooms(job(gpus=[0]), [1], None) is None and gpu_rooms(unclaimed, [7], snap) is None
    meminfo = "MemTotal:       24683792 kB\nMemFree:  100 kB\nMemAvailable:   21524024 kB\n"
    assert host_room(meminfo, 900 * 2**20) == [Room("host RAM", 21524024 * 1024, 900 * 2**20, 24683792 * 1024)]
    assert host_room("", None) is None


# ---- the go of a booted spare ----------------------------------------------------------------------------------
FRESH = ["--task", "T", "--num_envs", "16", "--seed", "42", "--max_iterations", "30", "--device", "cpu",
         "--experiment_name", "cartpole", "--run_name", "cp", "agent.save_interval=5", "agent.device=cpu"]


def resumed(ckpt: str, n: int, seed: str = "42", envs: str = "16") -> list[str]:
    args = [("30" if a == "30" else a) for a in FRESH]
    args[args.index("--max_iterations") + 1] = str(n)
    args[args.index("--seed") + 1] = seed
    args[args.index("--num_envs") + 1] = envs
    return args + ["--checkpoint", ckpt]


def test_booted_resume_takes_checkpoint_iterations_and_seed_only():
    assert booted_resume(FRESH, resumed("/l/r/model_5.pt", 25, "7"), "/l/r/model_5.pt") == \
        {"checkpoint": "/l/r/model_5.pt", "max_iterations": 25, "seed": 7}
    assert booted_resume(FRESH, FRESH, None) == {"checkpoint": None, "max_iterations": 30, "seed": 42}
    why = booted_resume(FRESH, resumed("/c.pt", 25, envs="8"), "/c.pt")
    assert isinstance(why, str) and "differs" in why and "8" in why  # a num_envs step-down: another environment
    assert "not known" in booted_resume(FRESH, resumed("/c.pt", 25), None)
    # Isaac Lab 2.x: --resume [True] --load_run <re> --checkpoint <re>
    two = FRESH + ["--headless"]
    old = two + ["--resume", "True", "--load_run", "^run$", "--checkpoint", "^model_5[.]pt$"]
    assert booted_resume(two, old, "/l/run/model_5.pt")["checkpoint"] == "/l/run/model_5.pt"
    rest, values = split_attempt_flags(["--resume", "--load_run", "x", "a"])
    assert rest == ["a"] and values == {"--resume": True, "--load_run": "x"}


def test_a_booted_spare_takes_a_pbt_exploit_whose_new_algorithm_values_the_shim_sets_after_the_load():
    # issue 40: the member's job file was rewritten with its new rate after its spare booted with the old one; the
    # go's ISAACD_ALGORITHM_SET sets the new one after the copy's load (launch/exploit.py), so the spare may take it
    boot = FRESH + ["agent.algorithm.schedule=fixed", "agent.algorithm.learning_rate=1.85664e-05"]
    copy = "/l/pop-t001/2026-12-06_09-15-31_pbt-from-pop-t002-at-35/model_35.pt"
    attempt = resumed(copy, 85) + ["agent.algorithm.schedule=fixed", "agent.algorithm.learning_rate=0.000396239"]
    algorithm_set = json.dumps({"checkpoint": "2026-12-06_09-15-31_pbt-from-pop-t002-at-35/model_35.pt",
                                "values": {"learning_rate": 0.000396239, "schedule": "fixed"}})
    names = set_after_load(algorithm_set, copy)
    assert names == {"learning_rate", "schedule"}
    assert booted_resume(boot, attempt, copy, names) == {"checkpoint": copy, "max_iterations": 85, "seed": 42}
    # without it (a plain resume, or the values set after another file's load) the changed rate is refused
    why = booted_resume(boot, attempt, copy)
    assert isinstance(why, str) and "agent.algorithm.learning_rate=0.000396239 instead of " \
        "agent.algorithm.learning_rate=1.85664e-05" in why, why
    assert set_after_load(algorithm_set, "/l/pop-t001/run/model_35.pt") == frozenset()
    assert set_after_load("not json", copy) == set_after_load(None, copy) == frozenset()
    # only the names set after the load may differ: another override still needs another boot
    other = attempt + ["agent.algorithm.gamma=0.9"]
    assert isinstance(booted_resume(boot, other, copy, names), str)
    assert isinstance(booted_resume(boot, resumed(copy, 85, envs="8") + attempt[len(FRESH) + 2:], copy, names), str)


# ---- staging ---------------------------------------------------------------------------------------------------
def test_staging_is_made_swept_and_removed(tmp_path):
    token = "0123456789abcdef0123456789abcdef"
    cwd, log = stage_booted(tmp_path / token)
    assert cwd == tmp_path / token / "work" and (cwd / "logs").is_dir() and not (cwd / "logs").is_symlink()
    assert log == tmp_path / token / "boot.log"
    (tmp_path / "keep-me").mkdir()
    (tmp_path / ("f" * 32)).write_text("a file, not a staging dir")
    sweep_staging(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f" * 32, "keep-me"]
    remove_staging(None)


# ---- the shim's hand-over --------------------------------------------------------------------------------------
def test_fresh_run_name_is_a_cold_starts_and_moves_on_when_taken(tmp_path):
    now = time.mktime((2026, 12, 4, 9, 0, 0, 0, 0, -1))
    assert shim_spare._fresh_run_name("2026-12-04_07-42-44_cp", str(tmp_path), now) == "2026-12-04_09-00-00_cp"
    (tmp_path / "2026-12-04_09-00-00_cp").mkdir()
    assert shim_spare._fresh_run_name("2026-12-04_07-42-44_cp", str(tmp_path), now) == "2026-12-04_09-00-01_cp"
    assert shim_spare._fresh_run_name("2026-12-04_07-42-44", str(tmp_path), now) == "2026-12-04_09-00-00"
    (tmp_path / "custom").mkdir()
    assert shim_spare._fresh_run_name("custom", str(tmp_path), now) == "custom_1"


def test_rewrite_top_level_touches_only_top_level_scalars(tmp_path):
    p = tmp_path / "agent.yaml"
    p.write_text("seed: 42\ndevice: cpu\nmax_iterations: 30\npolicy:\n  seed: 1\nload_checkpoint: model_.*.pt\n")
    shim_spare._rewrite_top_level(str(p), {"seed": 7, "max_iterations": 25, "load_checkpoint": "/a b/model_5.pt",
                                           "policy": 3, "missing": 1})
    assert p.read_text() == ("seed: 7\ndevice: cpu\nmax_iterations: 25\npolicy:\n  seed: 1\n"
                             "load_checkpoint: /a b/model_5.pt\n")


def fake_runner(log_dir: str) -> SimpleNamespace:
    env_cfg = SimpleNamespace(log_dir=log_dir, seed=42)
    return SimpleNamespace(logger=SimpleNamespace(log_dir=log_dir), env=SimpleNamespace(unwrapped=SimpleNamespace(
        cfg=env_cfg)), cfg={"seed": 42, "max_iterations": 30, "load_checkpoint": "model_.*.pt", "other": 1})


def latest(root: Path) -> str:
    return resolve_checkpoint_selector(str(root), "latest", library="rsl_rl", task="T",
                                       checkpoint_pattern=r"model_.*\.pt")


def test_a_staged_run_becomes_the_attempts_and_latest_never_sees_it_before(tmp_path, monkeypatch):
    """The staged run lives outside the job's log root; at go it moves there under a cold start's name and
    becomes the newest run (`--checkpoint latest`, by run.json's created_at) once it has a checkpoint."""
    root = tmp_path / "job" / "logs" / "rsl_rl" / "cartpole"
    old = root / "2026-12-04_07-00-00_cp"
    write_run_manifest(str(old), library="rsl_rl", task="T")
    (old / "model_5.pt").write_bytes(b"x")
    staging = tmp_path / "state" / "spare" / "cp" / ("a" * 32)
    work, _ = stage_booted(staging)
    staged = work / "logs" / "rsl_rl" / "cartpole" / "2026-12-04_07-30-00_cp"
    write_run_manifest(str(staged), library="rsl_rl", task="T")  # what the boot wrote, newer than the job's run
    (staged / "params").mkdir()
    (staged / "params" / "agent.yaml").write_text("seed: 42\nmax_iterations: 30\nload_checkpoint: model_.*.pt\n")
    (staged / "params" / "env.yaml").write_text(f"seed: 42\nlog_dir: {staged}\n")
    (staged / "model_0.pt").write_bytes(b"x")  # even a checkpoint there would not be seen
    pick = latest(root)
    assert pick == str(old / "model_5.pt")
    (staged / "model_0.pt").unlink()

    assert shim_spare._staging_problem(str(staged), str(staging)) is None
    assert "outside" in shim_spare._staging_problem(str(root / "x"), str(staging))
    assert "no log dir" in shim_spare._staging_problem(None, str(staging))

    monkeypatch.setattr(shim_spare._Booted, "staging", str(staging))
    runner = fake_runner(str(staged))
    resume = {"checkpoint": str(old / "model_5.pt"), "max_iterations": 25, "seed": 7}
    argv = ["-m", "isaaclab", "train", "--seed", "7", "--checkpoint", str(old / "model_5.pt")]
    before = time.time()
    new = Path(shim_spare._adopt_staged_run(runner, str(staged), str(tmp_path / "job"), resume, argv))
    assert new.parent == root and new.name.endswith("_cp") and new.name != old.name and not staged.exists()
    assert runner.logger.log_dir == str(new) and runner.env.unwrapped.cfg.log_dir == str(new)
    assert runner.cfg == {"seed": 7, "max_iterations": 25, "load_checkpoint": str(old / "model_5.pt"), "other": 1}
    assert (new / "params" / "agent.yaml").read_text() == \
        f"seed: 7\nmax_iterations: 25\nload_checkpoint: {old / 'model_5.pt'}\n"
    assert (new / "params" / "env.yaml").read_text() == f"seed: 7\nlog_dir: {new}\n"
    from datetime import datetime

    manifest = json.loads((new / "run.json").read_text())
    assert datetime.fromisoformat(manifest["created_at"]).timestamp() >= before - 1
    assert not [p for p in new.iterdir() if p.name.startswith(".")]  # no temp file left
    (new / "model_5.pt").write_bytes(b"x")
    pick = latest(root)
    assert pick == str(new / "model_5.pt")


def test_reseed_uses_the_envs_own_seeder():
    seen = []
    runner = SimpleNamespace(env=SimpleNamespace(unwrapped=SimpleNamespace(seed=seen.append,
                                                                           cfg=SimpleNamespace(seed=42))))
    shim_spare._reseed(runner, 7)
    assert seen == [7] and runner.env.unwrapped.cfg.seed == 7


def test_parse_resume():
    line = json.dumps({"argv": ["x.py"], "resume": {"checkpoint": None, "max_iterations": 3, "seed": 1}}).encode()
    assert shim_spare._parse_resume(line) == {"checkpoint": None, "max_iterations": 3, "seed": 1}
    for bad in ({}, {"resume": {"max_iterations": -1}}, {"resume": {"max_iterations": 1, "seed": "x"}},
                {"resume": {"max_iterations": True}}, {"resume": {"max_iterations": 1, "checkpoint": 3}}):
        with pytest.raises(ValueError):
            shim_spare._parse_resume(json.dumps(bad).encode())
    assert os.environ.get(shim_spare.P.BOOTED_ARGV_ENV) is None


# ---- the keeper (daemon/attempt/spare.py) with a fake runtime -----------------------------------------------------------
class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict]] = []

    def __call__(self, event: str, **fields) -> None:  # noqa: ANN003
        self.events.append((event, fields))

    def named(self, name: str) -> list[dict]:
        return [f for e, f in self.events if e == name]


def builtin_booted(tmp_path: Path, **over):  # noqa: ANN003, ANN201
    import sys

    from isaacd.workflows import resolve

    text = f'[[jobs]]\nname = "cp"\nspare = "booted"\nlauncher = ["{sys.executable}"]\nlog_root = "logs"\n'
    text += "".join(f"{k} = {json.dumps(v)}\n" for k, v in over.items())
    cfg = parse_config(text, "t.toml", tmp_path).jobs[0]
    return cfg, resolve(cfg).program(in_container=False)


class SpecRuntime:
    """job_fakes.FakeRuntime that also keeps the specs it was asked to start."""

    def __init__(self) -> None:
        from job_fakes import FakeRuntime

        self.inner, self.specs = FakeRuntime(), []
        self.name = "process"

    def start(self, spec):  # noqa: ANN001, ANN201
        self.specs.append(spec)
        return self.inner.start(spec)

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self.inner, name)


def test_a_booted_spare_is_staged_and_a_failed_boot_falls_back_to_imports(tmp_path):
    from isaacd.runtimes import trainer_command
    from isaacd.jobs.model import JobState
    from isaacd.runtimes.base import ExitStatus

    cfg, program = builtin_booted(tmp_path)
    rt, rec = SpecRuntime(), Recorder()
    from isaacd.attempt.spare import SpareKeeper

    keeper = SpareKeeper(cfg, rt, tmp_path / "state", rec)
    acted(keeper, keeper.tick(JobState.RUNNING, program, 0.0))
    spec = rt.specs[-1]
    staging = Path(spec.env["ISAACD_SPARE_STAGING"])
    assert staging.parent == tmp_path / "state" / "spare" / "cp" and len(staging.name) == 32
    assert spec.cwd == staging / "work" and (staging / "work" / "logs").is_dir()
    assert spec.log_path == staging / "boot.log"  # its boot's output is not the job log's
    assert json.loads(spec.env["ISAACD_SPARE_BOOT_ARGV"]) == program.go_argv(trainer_command.trainer_args(cfg, None))
    # upstream pins a W&B run id at boot unless one is set (wandb 0.31 cannot make one: the boot died); the go
    # brings the attempt's real one before rsl_rl's wandb.init in learn()
    assert spec.env["WANDB_RUN_ID"] == "isaacd-booted-spare"
    assert rec.named("spare_started")[-1]["mode"] == "booted"
    assert keeper.status().mode == "booted"

    (staging / "boot.log").write_text("Traceback ...\nValueError: Distillation training requires --checkpoint.\n")
    rt.trainers[spec_pid(rt)].exit = ExitStatus(code=1)
    acted(keeper, keeper.tick(JobState.RUNNING, program, 1.0))
    exited = rec.named("spare_exited")[-1]
    assert exited["mode"] == "booted" and "requires --checkpoint" in exited["boot_output"]
    assert not staging.exists() and keeper.spare is None
    acted(keeper, keeper.tick(JobState.RUNNING, program, 100.0))  # after the retry delay: imports-only from now on
    assert "ISAACD_SPARE_BOOT_ARGV" not in rt.specs[-1].env
    started = rec.named("spare_started")[-1]
    assert started["mode"] == "imports" and "died during its boot" in started["imports_only_because"]


def spec_pid(rt: SpecRuntime) -> int:
    return max(rt.inner.trainers)


def test_take_hands_a_booted_spare_the_resume_or_refuses_another_command_line(tmp_path):
    from isaacd.observations.shim_events import ShimEvents
    from isaacd.runtimes.base import Handle
    from isaacd.attempt.spare import SpareKeeper, _Spare

    cfg, program = builtin_booted(tmp_path)
    rt, rec = SpecRuntime(), Recorder()
    keeper = SpareKeeper(cfg, rt, tmp_path / "state", rec)

    def ready_spare(name: str) -> tuple[int, Path]:
        fifo = tmp_path / f"{name}.fifo"
        os.mkfifo(fifo)
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        staging = tmp_path / "state" / "spare" / "cp" / (name * 32)[:32]
        stage_booted(staging)
        pid = 5000 + len(rt.inner.trainers)
        from job_fakes import FakeTrainer

        rt.inner.trainers[pid] = FakeTrainer(pid, "tok", [])
        keeper.spare = _Spare(Handle("process", "cp", {"pid": pid, "log_path": str(staging / "boot.log")}), "tok",
                              fifo, ShimEvents(tmp_path / f"{name}.jsonl"), 0.0, ready=True, mode="booted",
                              staging=staging, boot_args=FRESH)
        return reader, staging

    reader, staging = ready_spare("a")
    assert acted(keeper, keeper.take({"argv": ["x"]}, attempt_args=resumed("/c.pt", 25, envs="8"),
                                     checkpoint="/c.pt")) is None
    assert keeper.spare is None and not staging.exists() and "differs" in keeper.booted_off
    assert "num_envs" in rec.named("spare_stopped")[-1]["reason"]
    os.close(reader)

    keeper.booted_off = None
    reader, staging = ready_spare("b")
    (tmp_path / "state" / "logs").mkdir(parents=True)
    job_log = tmp_path / "state" / "logs" / "cp.log"
    job_log.write_text("the dead trainer's output\n")
    handle, token = acted(keeper, keeper.take({"argv": ["x"]}, attempt_args=resumed("/c.pt", 25, "7"),
                                              checkpoint="/c.pt"))
    go = json.loads(os.read(reader, 65536).decode())
    os.close(reader)
    assert go["resume"] == {"checkpoint": "/c.pt", "max_iterations": 25, "seed": 7} and go["log"] == str(job_log)
    assert handle.state["log_path"] == str(job_log) and handle.state["log_offset"] == job_log.stat().st_size
    assert staging.exists()  # the shim moves its run dir out at the go, then removes it


def test_status_says_the_mode_and_measures_the_booted_spare_live(tmp_path):
    from isaacd.observations.shim_events import ShimEvents
    from isaacd.runtimes.base import Handle
    from isaacd.attempt.spare import SpareKeeper, _Spare

    cfg, _ = builtin_booted(tmp_path)
    snap = gpu_snapshot({"0": (None, None, {os.getpid(): 3 * GiB})})  # the GPU sampler's, as app.py hands it in
    keeper = SpareKeeper(cfg, SpecRuntime(), tmp_path, Recorder(), gpu_snapshot=lambda: snap)
    keeper.spare = _Spare(Handle("process", "cp", {"pid": os.getpid()}), "t", tmp_path / "f",
                          ShimEvents(tmp_path / "e.jsonl"), 0.0, ready=True, mode="booted",
                          facts={"cuda_memory_bytes": 1, "preload_seconds": 40.0})
    assert keeper.status().rss_bytes is None  # not measured yet (spare_ready said none): status walks no /proc
    keeper.measure_memory(1.0)  # what the tick does, at most every RSS_SCAN_INTERVAL: its process tree
    st = keeper.status()
    assert st.state == "ready" and st.mode == "booted" and st.cuda_memory_bytes == 3 * GiB
    assert st.rss_bytes > 10 * 2**20 and st.preload_seconds == 40.0
    keeper.gpu_snapshot = None
    assert keeper.status().cuda_memory_bytes == 1  # no GPU collector: what the spare measured at its park


def test_staging_left_by_a_previous_supervisor_or_a_dead_takeover_is_removed(tmp_path):
    from isaacd.jobs.model import JobState
    from isaacd.attempt.spare import SpareKeeper

    cfg, program = builtin_booted(tmp_path)
    base = tmp_path / "state" / "spare" / "cp"
    leftover = base / ("c" * 32)
    stage_booted(leftover)
    keeper = SpareKeeper(cfg, SpecRuntime(), tmp_path / "state", Recorder())
    # the previous supervisor's spare (FakeRuntime has no find): its staging goes
    acted(keeper, keeper.dismiss_leftover("c" * 32))
    assert not leftover.exists()
    stage_booted(leftover)
    acted(keeper, keeper.tick(JobState.FAILED, program, 0.0))  # at rest: nothing may stay
    assert not leftover.exists()


def test_auto_reads_the_room_from_what_it_was_handed_not_from_a_status(tmp_path):
    """spare = "auto" (rsl_rl on a GPU): the keeper's room is the GPU sampler's snapshot and the live trainer's
    pids it was handed at construction; no snapshot, no room known: imports-only."""
    from types import SimpleNamespace

    from isaacd.attempt.spare import SpareKeeper

    cfg = job(device="cuda:0", gpus=[0], spare="auto")
    hooked = SimpleNamespace(shim=True, plain_spare=False)  # the rsl_rl runner hooked by the shim
    snaps = {"roomy": gpu_snapshot({"0": (10 * GiB, 140 * GiB, {1: 6 * GiB})}),
             "tight": gpu_snapshot({"0": (135 * GiB, 140 * GiB, {1: 6 * GiB, 2: 100 * GiB})})}
    seen = {"snap": "roomy"}
    keeper = SpareKeeper(cfg, SpecRuntime(), tmp_path, Recorder(), gpu_snapshot=lambda: snaps[seen["snap"]],
                         trainer_pids=lambda: [1])
    assert keeper._mode(hooked) == ("booted", None)
    seen["snap"] = "tight"
    mode, why = keeper._mode(hooked)
    assert mode == "imports" and why.startswith("GPU 0: 5.0 GiB free") and "6.0 GiB" in why
    keeper.gpu_snapshot = None
    mode, why = keeper._mode(hooked)
    assert mode == "imports" and "not known" in why
