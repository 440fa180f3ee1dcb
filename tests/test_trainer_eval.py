"""Checkpoint evaluation, trainer side (issue 41; /work/notes/eval-design.md B), the fast parts: the episode counter,
the result writer, the variables, and the shim's rewrite of a training command line into Isaac Lab's play. No torch,
no process: the end-to-end runs are tests/test_trainer_eval_builtin.py (built-in trainer) and
tests/test_isaaclab3_eval.py (the real Isaac Lab 3.0)."""

from __future__ import annotations

import json
import os

import pytest

from isaacd_trainer import eval_core as C
from isaacd_trainer import shim_eval as E


def settings(tmp_path, **over) -> C.EvalSettings:
    env = {"ISAACD_EVAL": "1", "ISAACD_EVAL_CHECKPOINT": str(tmp_path / "model_40.pt"), "ISAACD_EVAL_ITERATION": "40",
           "ISAACD_EVAL_EPISODES": "10", "ISAACD_EVAL_NUM_ENVS": "4", "ISAACD_EVAL_SEED": "7",
           "ISAACD_EVAL_DEVICE": "cpu", "ISAACD_EVAL_RESULT": str(tmp_path / "model_40.pt.eval.json"),
           "ISAACD_EVAL_TB_DIR": str(tmp_path / "eval"), "ISAACD_EVAL_VIDEO": "0"}
    env.update(over)
    return C.EvalSettings.from_env(env)


# ----------------------------------------------------------------------------------------------- counting
def test_each_env_counts_its_own_first_episodes_so_short_ones_are_not_favoured():
    c = C.EpisodeCounter(num_envs=2, episodes=4)
    assert c.quota == [2, 2]
    # env 0 fails every step (length 1, return 0); env 1 balances: 3 steps of reward 1 per episode
    for step in range(1, 7):
        c.observe([0.0, 1.0], [1, 1 if step % 3 == 0 else 0])
        assert c.done == (step == 6)
    # env 0 finished 6 short episodes, only its first 2 count; env 1's 2 long ones count as much
    assert c.returns == [[0.0, 0.0], [3.0, 3.0]] and c.lengths == [[1, 1], [3, 3]]
    s = c.summary()
    assert s["episodes"] == 4 and s["return_mean"] == 1.5 and s["return_std"] == 1.5
    assert s["length_mean"] == 2.0 and s["success_rate"] is None


def test_the_remainder_goes_to_the_first_envs_and_exactly_episodes_are_counted():
    assert C.quotas(10, 4) == [3, 3, 2, 2] and C.quotas(3, 5) == [1, 1, 1, 0, 0]
    c = C.EpisodeCounter(num_envs=5, episodes=3)
    c.observe([1.0] * 5, [0, 0, 0, 1, 1])  # envs 3 and 4 have no share: their episodes never count
    assert c.counted == 0 and not c.done
    c.observe([1.0] * 5, [1, 1, 1, 1, 1])
    assert c.done and c.summary()["episodes"] == 3 and c.summary()["length_mean"] == 2.0


def test_success_rate_from_the_step_log_or_per_env():
    c = C.EpisodeCounter(num_envs=2, episodes=2)
    c.observe([1.0, 1.0], [1, 0], success=1.0)  # Isaac Lab's Metrics/success_rate of the episodes ending now
    c.observe([1.0, 1.0], [0, 1], success=0.0)
    assert c.summary()["success_rate"] == 0.5
    d = C.EpisodeCounter(num_envs=2, episodes=2)
    d.observe([1.0, 1.0], [1, 1], success=[1.0, 0.0])
    assert d.summary()["success_rate"] == 0.5
    assert C.success_of({"log": {"Metrics/success_rate": 0.25}}) == 0.25
    assert C.success_of({"log": {"Episode_Reward/alive": 1.0}}) is None and C.success_of({}) is None


def test_counter_refuses_a_step_of_the_wrong_width():
    with pytest.raises(ValueError):
        C.EpisodeCounter(2, 2).observe([1.0], [1])


# ----------------------------------------------------------------------------------------------- results
def test_result_json_is_written_whole_with_every_field_of_the_contract(tmp_path):
    s = settings(tmp_path)
    c = C.EpisodeCounter(4, 10)
    while not c.done:
        c.observe([1.0] * 4, [1] * 4)
    doc = C.result_document(s, c.summary(), task="Isaac-Cartpole-Direct", library="rsl_rl", started=0.0,
                            video_reason="no renderer: x")
    C.write_json_atomic(s.result, doc)
    C.write_json_atomic(s.result, doc)  # over an existing one
    got = json.loads(open(s.result).read())
    assert set(got) == {"version", "checkpoint", "iteration", "task", "library", "episodes", "num_envs", "seed",
                        "deterministic", "return_mean", "return_std", "length_mean", "length_std", "success_rate",
                        "duration_seconds", "device", "video", "gif", "video_reason"}
    assert got["version"] == 1 and got["iteration"] == 40 and got["episodes"] == 10 and got["seed"] == 7
    assert got["checkpoint"] == str(tmp_path / "model_40.pt") and got["deterministic"] is True
    assert os.listdir(tmp_path) == ["model_40.pt.eval.json"]  # no temp file left behind


def test_fail_writes_the_error_json_and_exits_nonzero(tmp_path, monkeypatch):
    s = settings(tmp_path)
    monkeypatch.setenv("ISAACD_EVAL_CHECKPOINT", s.checkpoint)
    monkeypatch.setenv("ISAACD_EVAL_ITERATION", "40")
    monkeypatch.setenv("ISAACD_EVAL_RESULT", s.result)
    with pytest.raises(SystemExit) as exc:
        C.fail("checkpoint does not load:\n  torn")
    assert exc.value.code == C.EXIT_EVAL_ERROR != 0
    assert json.loads(open(s.result).read()) == {"version": 1, "checkpoint": s.checkpoint, "iteration": 40,
                                                 "error": "checkpoint does not load: torn"}


def test_settings_say_what_is_missing_or_wrong(tmp_path):
    with pytest.raises(C.EvalSettingsError, match="ISAACD_EVAL_EPISODES"):
        settings(tmp_path, ISAACD_EVAL_EPISODES="")
    with pytest.raises(C.EvalSettingsError, match="no integer"):
        settings(tmp_path, ISAACD_EVAL_SEED="x")
    s = settings(tmp_path, ISAACD_EVAL_NUM_ENVS="")
    assert s.num_envs == s.episodes == 10  # the design's default: num_envs = episodes


# ----------------------------------------------------------------------------------------------- the shim's rewrite
TRAIN = ["-m", "isaaclab", "train", "--rl_library", "rsl_rl", "--task", "Isaac-Cartpole-Direct", "--num_envs", "16",
         "--seed", "42", "--max_iterations", "30", "--device", "cpu", "--experiment_name", "cartpole", "--run_name",
         "cp", "agent.save_interval=5", "agent.device=cpu", "--checkpoint", "/runs/a/model_9.pt", "env.x=1"]


def test_isaaclab3_train_becomes_play_on_the_checkpoint(tmp_path):
    s = settings(tmp_path, ISAACD_EVAL_DEVICE="cuda:0")
    p = E.plan(TRAIN, s)
    assert p.error is None and p.kind == "isaaclab3" and p.task == "Isaac-Cartpole-Direct"
    assert p.argv == ["-m", "isaaclab", "play", "--rl_library", "rsl_rl", "--checkpoint", s.checkpoint,
                      "--num_envs", "4", "--seed", "7", "--device", "cuda:0", "--task", "Isaac-Cartpole-Direct",
                      "--experiment_name", "cartpole", "--run_name", "cp", "agent.save_interval=5", "env.x=1",
                      "agent.device=cuda:0"]


def test_train_only_flags_are_dropped_in_both_spellings():
    assert E.strip_flags(["--max_iterations=5", "--distributed", "--run_timestamp", "t", "--video",
                          "--video_length", "9", "--resume", "True", "--load_run", "r", "--no-resume_optimizer_state",
                          "--capture_env_sensors", "2", "--task", "T", "agent.device=cuda:1", "x=1"]) == [
        "--task", "T", "x=1"]
    assert E.strip_flags(["--resume", "--task", "T"]) == ["--task", "T"]  # 2.1's store_true --resume


def test_scripts_become_their_sibling_play_py(tmp_path):
    s = settings(tmp_path)
    unified = tmp_path / "lab" / "scripts" / "reinforcement_learning"
    v2 = tmp_path / "lab2" / "scripts" / "reinforcement_learning" / "rsl_rl"
    for d in (unified, v2):
        d.mkdir(parents=True)
        (d / "train.py").write_text("")
    p = E.plan([str(unified / "train.py"), "--rl_library", "rsl_rl", "--task", "T"], s)
    assert "no play.py beside" in p.error  # a checkout without play.py: the reason, not a training run
    (unified / "play.py").write_text("")
    (v2 / "play.py").write_text("")
    p = E.plan([str(unified / "train.py"), "--rl_library", "rsl_rl", "--task", "T", "--max_iterations", "3"], s)
    assert p.kind == "isaaclab3" and p.argv[:3] == [str(unified / "play.py"), "--rl_library", "rsl_rl"]
    assert "--max_iterations" not in p.argv
    p = E.plan([str(v2 / "train.py"), "--task", "T", "--resume", "--load_run", "r", "--headless"], s)
    assert p.kind == "isaaclab2" and p.argv[0] == str(v2 / "play.py") and p.argv.count("--headless") == 1
    assert "--resume" not in p.argv and "--load_run" not in p.argv


def test_the_builtin_trainer_runs_as_is_and_other_libraries_are_refused(tmp_path):
    s = settings(tmp_path, ISAACD_EVAL_VIDEO="100")
    builtin = ["-m", "isaacd_trainer.isaaclab30", "--rl_library", "rsl_rl", "--task", "Isaacd-Cartpole-v0"]
    p = E.plan(builtin, s)
    assert p.kind == "builtin" and p.argv == builtin and p.video_reason.startswith("no renderer")
    for argv in (TRAIN[:3] + ["--rl_library", "skrl"], ["-m", "isaacd_trainer.isaaclab30", "--rl_library", "rl_games"]):
        assert E.plan(argv, s).error.startswith("evaluation of ") and "is not built yet" in E.plan(argv, s).error
    assert "no Isaac Lab train entry point" in E.plan(["my_train.py", "--task", "T"], s).error


# ----------------------------------------------------------------------------------------------- the shim's hooks
class _Vec(list):
    """A tensor's two methods the step hook uses (tolist, reshape)."""

    def tolist(self) -> list:
        return list(self)

    def reshape(self, *shape) -> "_Vec":
        return self


def test_a_checkpoint_that_does_not_load_is_the_error_json_and_exports_are_skipped(tmp_path, monkeypatch):
    s = settings(tmp_path)
    for k, v in (("ISAACD_EVAL_CHECKPOINT", s.checkpoint), ("ISAACD_EVAL_ITERATION", "40"),
                 ("ISAACD_EVAL_RESULT", s.result)):
        monkeypatch.setenv(k, v)

    class OnPolicyRunner:  # rsl_rl's load of another library's checkpoint: its dict has no actor_state_dict
        def load(self, path, load_cfg=None):
            raise KeyError("actor_state_dict")

        def export_policy_to_jit(self, path, filename="policy.pt"):
            raise AssertionError("exported")

        export_policy_to_onnx = export_policy_to_jit

    E._patch_runner_class(OnPolicyRunner)
    runner = OnPolicyRunner()
    runner.export_policy_to_jit(path=str(tmp_path / "exported"), filename="policy.pt")  # nothing written
    runner.export_policy_to_onnx(path=str(tmp_path / "exported"), filename="policy.onnx")
    with pytest.raises(SystemExit) as exc:
        runner.load(s.checkpoint)
    assert exc.value.code == C.EXIT_EVAL_ERROR
    err = json.loads(open(s.result).read())["error"]
    assert err.startswith(f"checkpoint {s.checkpoint} does not load: KeyError") and not (tmp_path / "exported").exists()


def test_the_step_hook_writes_the_result_once_the_count_is_reached_then_ends_play(tmp_path, monkeypatch):
    s = settings(tmp_path, ISAACD_EVAL_EPISODES="2", ISAACD_EVAL_NUM_ENVS="2", ISAACD_EVAL_TB_DIR="")
    monkeypatch.setattr(E._Eval, "settings", s)
    monkeypatch.setattr(E._Eval, "plan", E.plan(TRAIN, s))
    monkeypatch.setattr(E._Eval, "counter", C.EpisodeCounter(2, 2))
    monkeypatch.setattr(E._Eval, "finished", False)
    E._on_step((None, _Vec([1.0, 1.0]), _Vec([1, 0]), {"log": {"Metrics/success_rate": 1.0}}))
    assert not os.path.exists(s.result)
    with pytest.raises(KeyboardInterrupt):  # what 3.0's run_playback suppresses: its loop ends, close_env runs
        E._on_step((None, _Vec([2.0, 2.0]), _Vec([0, 1]), {}))
    doc = json.loads(open(s.result).read())
    assert (doc["episodes"], doc["return_mean"], doc["length_mean"], doc["success_rate"]) == (2, 2.0, 1.5, 1.0)
    assert doc["task"] == "Isaac-Cartpole-Direct" and doc["iteration"] == 40
    E._on_step((None, _Vec([1.0, 1.0]), _Vec([1, 1]), {}))  # a step after the end (close_env's) counts nothing


def test_video_is_asked_for_only_where_isaac_lab_can_render(tmp_path, monkeypatch):
    s = settings(tmp_path, ISAACD_EVAL_DEVICE="cuda:0", ISAACD_EVAL_VIDEO="120")
    installed = {"isaaclab_visualizers", "moviepy"}  # a pip install of Isaac Lab 3.0: kit-less, no isaacsim
    monkeypatch.setattr(E.importlib.util, "find_spec", lambda name: object() if name in installed else None)
    p = E.plan(TRAIN, s)
    assert "--video" not in p.argv and p.video_reason.startswith("no renderer: Isaac Sim (Kit) is not installed")
    installed.update({"isaaclab_visualizers.newton", "pyglet"})  # what Newton's GL viewer needs, EGL here
    monkeypatch.setattr(C, "headless_gl_missing", lambda: None)
    p = E.plan(TRAIN + ["--viz", "newton_gl"], s)  # the job names a visualizer to record from: upstream's --video
    assert p.video_reason is None and p.argv[p.argv.index("--video"):][:3] == ["--video", "--video_length", "120"]
    installed.add("isaacsim")
    assert E.plan(TRAIN, s).video_reason is None
    installed.discard("moviepy")  # VideoRecorder raises ImportError without it: the whole play run would fail
    assert E.plan(TRAIN, s).video_reason.startswith("no video writer: moviepy is not installed")
    installed.clear()
    assert E.plan(TRAIN, s).video_reason == "no renderer: the isaaclab_visualizers package is not installed"


def test_a_small_gif_is_written_beside_each_clip(tmp_path):
    np = pytest.importorskip("numpy")
    from PIL import Image

    class VideoRecorder:  # 3.0.0 envs/utils/video_recorder.py: _close_clip writes <prefix>_<index>.mp4, index += 1
        def __init__(self):
            self._frames = [np.full((480, 640, 3), i, dtype=np.uint8) for i in range(120)]  # 2 s at 60 fps
            self._clip_index, self._env = 0, type("Env", (), {"step_dt": 1 / 60})()
            self.cfg = type("Cfg", (), {"fps": None})()

        def _clip_path(self, index):
            return str(tmp_path / f"clip_model_9_{index:04d}.mp4")

        def _close_clip(self):
            open(self._clip_path(self._clip_index), "wb").close()
            self._clip_index += 1
            self._frames = []

    E._patch_recorder_module(type("M", (), {"VideoRecorder": VideoRecorder}))
    VideoRecorder()._close_clip()
    gif = Image.open(tmp_path / "clip_model_9_0000.gif")
    assert gif.width == E.GIF_WIDTH and gif.height == 240 and gif.n_frames == 20  # 2 s at 10 fps
    assert sorted(os.listdir(tmp_path)) == ["clip_model_9_0000.gif", "clip_model_9_0000.mp4"]


def test_an_evaluation_beside_a_gpu_training_runs_at_the_lowest_cpu_priority():
    """It never holds training back where the CPU is contended (bench/results/issue41-eval-beside-gpu.txt: the
    trainer bound by one core, an evaluation's start-up took it to 0.975x): nice 19 where the daemon asks for it
    (a GPU training), which its children inherit."""
    import subprocess
    import sys

    code = "import os; from isaacd_trainer import shim_eval as E; E._yield_to_training(); print(os.nice(0))"
    env = {**os.environ, "ISAACD_EVAL_NICE": "19"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60, env=env)
    assert out.stdout.strip() == "19"
    env["ISAACD_EVAL_NICE"] = "0"  # beside a CPU training: the trainer's priority (nice 19 would starve it)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60, env=env)
    assert out.stdout.strip() == str(os.nice(0))
