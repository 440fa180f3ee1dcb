"""The shim <-> daemon contract (trainer/shim_protocol.py) as both sides really use it.

The shim runs by path under a Python that has no isaacd (Isaac Sim's, a container's), from the files a container is
given (the mounts the container spec makes), and must find the protocol beside itself there. What it writes must
be what the daemon's side reads: the events file is folded by the daemon's ShimEvents, and the daemon's go line is
parsed by the shim's own parser. No torch: a stand-in ``rsl_rl.runners`` (stdlib only) is what the shim hooks.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

from isaacd.config.schema import parse_config
from isaacd.observations.shim_events import ShimEvents
from isaacd.runtimes.base import LaunchSpec
from isaacd.runtimes.quadlet import ContainerSpec
from isaacd.attempt.spare import go_message
from isaacd_trainer.shim_protocol import (PROTOCOL_IN_CONTAINER, SHIM_EVENTS_ENV, SHIM_FILES, SHIM_IN_CONTAINER,
                                          SNAPSHOT_EVERY_ENV, ShimEvent)

SHIM = Path(__file__).resolve().parents[1] / "trainer" / "shim.py"

JOB = """
[[jobs]]
name = "anymal"
runtime = "podman"
workflow = "rsl_rl"
task = "Isaac-Velocity-Rough-Anymal-C-v0"
log_root = "/data/isaacd/anymal"
[jobs.container]
image = "nvcr.io/nvidia/isaac-lab:2.3.2"
"""

# rsl_rl's runner as far as the shim cares: learn() runs alg.act then alg.update per iteration, save/load a file
FAKE_RSL_RL = '''
import json, os, signal

__version__ = "0.0-stand-in"


class _Writer:
    def flush(self):
        pass


class _Alg:
    def __init__(self, runner):
        self.runner = runner

    def act(self):
        pass

    def update(self):
        r = self.runner
        if r.stop_at == r.current_learning_iteration:
            os.kill(os.getpid(), signal.SIGINT)  # an operator's stop, mid-iteration


class OnPolicyRunner:
    def __init__(self, log_dir):
        self.log_dir, self.current_learning_iteration, self.stop_at = log_dir, 0, None
        self.alg, self.writer = _Alg(self), _Writer()

    def learn(self, num_learning_iterations):
        start = self.current_learning_iteration
        for it in range(start, start + num_learning_iterations):
            self.current_learning_iteration = it
            self.alg.act()
            self.alg.update()
            if it % 2 == 0:
                self.save(os.path.join(self.log_dir, f"model_{it}.pt"))

    def save(self, path):
        with open(path, "w") as f:
            json.dump({"iter": self.current_learning_iteration}, f)

    def load(self, path):
        with open(path) as f:
            self.current_learning_iteration = json.load(f)["iter"]
'''

TRAIN = '''
import os, sys
try:
    import isaacd_trainer  # noqa: F401
    sys.exit("isaacd is importable here: this run would not show the shim finding its protocol by path")
except ImportError:
    pass
from rsl_rl.runners import OnPolicyRunner

run_dir = sys.argv[1]
runner = OnPolicyRunner(run_dir)
runner.load(os.path.join(run_dir, "model_4.pt"))
runner.learn(num_learning_iterations=2)  # 4, 5: learn_finished
runner.stop_at = 7
runner.learn(num_learning_iterations=10)  # 5, 6, 7: stopped at the boundary after 7, model_7.pt saved
print("learn returned")
'''


def container_copy(tmp_path: Path) -> tuple[Path, Path]:
    """The files a container of an rsl_rl job is given read-only under /opt/isaacd, copied to the same paths under
    a fresh root: (that root, the shim's path there)."""
    job = parse_config(JOB, "test", Path("/")).jobs[0]
    spec = LaunchSpec(job=job, argv=[], trainer_args=[], env={SHIM_EVENTS_ENV: "/var/lib/isaacd/shim/a/1.jsonl"},
                      cwd=Path("/"), log_path=Path("/tmp/x.log"))
    mounts = [(host, inside) for host, inside, mode in ContainerSpec.from_launch(spec, "tok", 1).volumes
              if inside.startswith("/opt/isaacd/") and mode == "ro"]
    assert {inside for _, inside in mounts} == {inside for _, inside in SHIM_FILES}  # the shim and all it loads
    assert {SHIM_IN_CONTAINER, PROTOCOL_IN_CONTAINER} <= {inside for _, inside in mounts}
    root = tmp_path / "container"
    for host, inside in mounts:
        dest = root / inside.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(host, dest)
    return root, root / SHIM_IN_CONTAINER.lstrip("/")


def project(tmp_path: Path) -> tuple[Path, Path]:
    """A train script beside a stand-in rsl_rl, and a run dir holding model_4.pt: (script, run dir)."""
    proj = tmp_path / "proj"
    (proj / "rsl_rl" / "runners").mkdir(parents=True)
    (proj / "rsl_rl" / "__init__.py").write_text('__version__ = "0.0-stand-in"\n')
    (proj / "rsl_rl" / "runners" / "__init__.py").write_text(FAKE_RSL_RL)
    (proj / "train.py").write_text(TRAIN)
    run_dir = tmp_path / "logs" / "run"
    run_dir.mkdir(parents=True)
    (run_dir / "model_4.pt").write_text(json.dumps({"iter": 4}))
    return proj / "train.py", run_dir


def run_isolated(shim: Path, args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    """`python -I -S shim ARGS`: no site-packages, no PYTHONPATH, nothing of isaacd importable."""
    return subprocess.run([sys.executable, "-I", "-S", str(shim), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=60)


def test_the_shim_runs_from_a_containers_copy_of_its_files_and_the_daemon_reads_its_events(tmp_path):
    _, shim = container_copy(tmp_path)
    script, run_dir = project(tmp_path)
    events = tmp_path / "shim" / "attempt-1.jsonl"
    events.parent.mkdir()
    env = {"PATH": "/usr/bin:/bin", SHIM_EVENTS_ENV: str(events), SNAPSHOT_EVERY_ENV: "0"}  # snapshots need torch
    r = run_isolated(shim, [str(script), str(run_dir)], env, tmp_path)
    assert r.returncode == 0 and "learn returned" in r.stdout, r.stderr

    reader = ShimEvents(events)  # the daemon's side, as the runner polls it
    seen = reader.poll()
    names = [ev["event"] for ev in seen]
    assert names == ["shim_started", "checkpoint_loaded", "runner_started", "first_iteration", "checkpoint_saved",
                     "learn_finished", "runner_started", "first_iteration", "checkpoint_saved", "stop_requested",
                     "checkpoint_saved", "stopped"]
    assert [ShimEvent(n).value for n in names] == names  # every name the shim wrote is one the protocol knows
    report = reader.report
    assert report.loaded == str(run_dir / "model_4.pt") and report.loaded_iteration == 4
    assert report.run_dir == str(run_dir) and report.start_iteration == 5
    assert report.checkpoints == [(4, str(run_dir / "model_4.pt")), (6, str(run_dir / "model_6.pt")),
                                  (7, str(run_dir / "model_7.pt"))]
    assert report.finished and report.stop_signal == "SIGINT"
    assert report.stopped_checkpoint == str(run_dir / "model_7.pt") and (run_dir / "model_7.pt").is_file()
    assert report.rsl_rl_version == "0.0-stand-in"
    assert reader.poll() == [] and reader.bad_lines == 0


def test_the_shim_without_its_protocol_beside_it_says_what_is_missing(tmp_path):
    lone = tmp_path / "opt" / "isaacd_shim.py"
    lone.parent.mkdir()
    shutil.copyfile(SHIM, lone)
    (tmp_path / "t.py").write_text("print('ran')\n")
    r = run_isolated(lone, [str(tmp_path / "t.py")], {"PATH": "/usr/bin:/bin"}, tmp_path)
    assert r.returncode != 0 and "ran" not in r.stdout
    assert "shim_protocol.py beside it" in r.stderr and str(lone.parent) in r.stderr


def test_the_shim_reaches_its_protocol_through_a_symlink(tmp_path):
    # a link to the shim elsewhere (a hand-made launcher dir): the protocol is found beside the file it points to
    link = tmp_path / "bin" / "shim.py"
    link.parent.mkdir()
    link.symlink_to(SHIM)
    (tmp_path / "t.py").write_text("print('ran')\n")
    events = tmp_path / "ev.jsonl"
    r = run_isolated(link, [str(tmp_path / "t.py")], {"PATH": "/usr/bin:/bin", SHIM_EVENTS_ENV: str(events)},
                     tmp_path)
    assert r.returncode == 0 and r.stdout == "ran\n", r.stderr
    reader = ShimEvents(events)
    assert [ev["event"] for ev in reader.poll()] == [ShimEvent.SHIM_STARTED]


def _shim_by_path():
    """The shim as a module loaded from its file (not as isaacd_trainer.shim): it loads its protocol by path."""
    spec = importlib.util.spec_from_file_location("isaacd_shim_under_test", SHIM)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_daemons_go_line_is_what_the_spare_parses():
    shim = _shim_by_path()
    assert shim.P.__name__ == "isaacd_shim_protocol"  # by path, not the installed package
    env = {SHIM_EVENTS_ENV: "/s/attempt-2.jsonl", SNAPSHOT_EVERY_ENV: "1", "WANDB_RUN_ID": "job-1",
           "HOME": "/root", "CUDA_VISIBLE_DEVICES": "0"}
    go = go_message(["-m", "isaacd_trainer", "--max_iterations", "5"], Path("/work/job"), False, env)
    line = json.dumps(go).encode()  # as SpareKeeper.take writes it, less the newline the reader splits on
    argv, got_env, cwd, log, plain = shim.spare._parse_go(line)
    assert argv == ["-m", "isaacd_trainer", "--max_iterations", "5"] and cwd == "/work/job" and log is None
    assert got_env == {SHIM_EVENTS_ENV: "/s/attempt-2.jsonl", SNAPSHOT_EVERY_ENV: "1", "WANDB_RUN_ID": "job-1"}
    assert plain is False
    assert shim.spare._parse_go(json.dumps(go_message(["t.py"], Path("/w"), True, {})).encode())[4] is True


def test_snapshot_names_the_shim_writes_are_the_ones_the_daemon_knows():
    from isaacd.observations.checkpoints import CHECKPOINT_RE, SNAPSHOT_PREFIX, SNAPSHOT_TEMP_RE

    shim = _shim_by_path()
    name = shim.snapshots.snapshot_name(12)
    assert name == "isaacd_snapshot_12.pt" and name.startswith(SNAPSHOT_PREFIX)
    assert CHECKPOINT_RE.match(name).group(1) == "12"
    temp = shim.P.snapshot_temp_name(name, 4242)
    assert temp == ".isaacd_snapshot_12.pt.tmp.4242" and SNAPSHOT_TEMP_RE.match(temp)
    assert not CHECKPOINT_RE.match(temp) and not temp.endswith(".pt")
    # the file format is the plain names, however an event is turned into text
    assert str(ShimEvent.STOPPED) == f"{ShimEvent.STOPPED}" == json.loads(json.dumps(ShimEvent.STOPPED)) == "stopped"


def test_the_shim_reports_the_first_environment_creation_and_leaves_gymnasium_alone_without_a_side_channel(tmp_path):
    """Isaac Lab builds its scene in ``gym.make(task, cfg=env_cfg)`` (isaaclab_rl 3.0.0 entrypoints/common.py
    create_isaaclab_env): the shim says when the first one begins and ends; the call itself is gymnasium's."""
    (tmp_path / "gymnasium").mkdir()
    (tmp_path / "gymnasium" / "__init__.py").write_text("def make(id, **kwargs):\n    return ('env', id, kwargs)\n")
    (tmp_path / "train.py").write_text("import gymnasium as gym\n"
                                       "print(gym.make('Isaac-Cartpole-Direct', cfg=1), gym.make(id='Eval'))\n"
                                       "print('wrapped' if hasattr(gym.make, '__wrapped__') else 'as installed')\n")
    events = tmp_path / "events.jsonl"
    r = run_isolated(SHIM, [str(tmp_path / "train.py")], {"PATH": "/usr/bin:/bin", SHIM_EVENTS_ENV: str(events)},
                     tmp_path)
    assert r.stdout == "('env', 'Isaac-Cartpole-Direct', {'cfg': 1}) ('env', 'Eval', {})\nwrapped\n", r.stderr
    seen = ShimEvents(events)
    assert [(e["event"], e.get("task")) for e in seen.poll()] == [
        ("shim_started", None), ("env_creating", "Isaac-Cartpole-Direct"), ("env_created", "Isaac-Cartpole-Direct")]
    assert seen.report.boot_phase == "runner"
    r = run_isolated(SHIM, [str(tmp_path / "train.py")], {"PATH": "/usr/bin:/bin"}, tmp_path)
    assert r.stdout.endswith("as installed\n"), r.stderr
