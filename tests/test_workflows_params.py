"""A run's params/*.yaml read with PyYAML, as Isaac Lab writes them: `yaml.dump` (not `safe_dump`) of the config as a
dict, so tuples, enums, slices and functions come out with `!!python/...` tags that `yaml.safe_load` refuses."""

from __future__ import annotations

import enum
import math
import os

import pytest
import yaml

from isaacd.workflows.params import load_params, yaml_float, yaml_int, yaml_value


class Backend(enum.Enum):
    TORCH = 1


# the shape of a real Isaac Lab 3 env.yaml (cartpole_direct): tuples in block and flow style, nested mappings
ISAACLAB_ENV_YAML = """\
sim:
  physics_prim_path: /physicsScene
  dt: 0.008333333333333333
  gravity: !!python/tuple
  - 0.0
  - 0.0
  - -9.81
viewer:
  eye: !!python/tuple
  - 8.0
  - 0.0
  - 5.0
  cloning_contexts: !!python/tuple []
  num_envs: 999
scene:
  num_envs: 4096
  env_spacing: 4.0
  replicate_physics: true
"""


def plain(value: object) -> bool:
    """Only what YAML itself has: mappings, lists, strings, numbers, booleans, null; no object a tag built."""
    if isinstance(value, dict):
        return all(plain(k) and plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(plain(v) for v in value)
    return type(value) in (str, int, float, bool, type(None))


def _dump(path, data):
    """What isaaclab.utils.io.dump_yaml does with the dict class_to_dict made."""
    with open(path, "w") as f:
        yaml.dump(data, f, default_flow_style=False, sort_keys=False)


def test_python_tags_of_yaml_dump_are_read_as_plain_values(tmp_path):
    f = tmp_path / "agent.yaml"
    _dump(f, {"params": {"config": {"horizon_length": 16, "score_to_win": 20000, "minibatch": (512, 2),
                                    "slice": slice(1, 2), "backend": Backend.TORCH, "act": math.sqrt}},
              "agent": {"rollouts": 24, "shape": ()}})
    text = f.read_text()
    assert "!!python/tuple" in text and "!!python/object/apply:" in text and "!!python/name:" in text
    with pytest.raises(yaml.YAMLError):
        yaml.safe_load(text)  # why the daemon has its own loader
    assert yaml_int(f, ("params", "config", "horizon_length")) == 16
    assert yaml_float(f, ("params", "config", "score_to_win")) == 20000.0
    assert yaml_int(f, ("agent", "rollouts")) == 24
    assert yaml_value(f, ("params", "config", "minibatch")) == [512, 2]  # a tuple, as a list
    assert yaml_value(f, ("params", "config", "slice")) == [1, 2, None]
    # how `yaml.dump` reduces an enum differs between Python patch releases (3.11.7 writes `Backend(1)`, read as [1];
    # Debian's 3.11.2 `getattr(Backend, 'TORCH')`, read as ['', 'TORCH']): the loader promises a plain value, no enum
    backend = yaml_value(f, ("params", "config", "backend"))
    assert plain(backend) and isinstance(backend, list) and (1 in backend or "TORCH" in backend), backend
    assert yaml_value(f, ("params", "config", "act")) == ""  # never imported
    assert yaml_value(f, ("agent", "shape")) == []
    assert plain(load_params(f))


def test_a_real_isaaclab_env_yaml(tmp_path):
    f = tmp_path / "env.yaml"
    f.write_text(ISAACLAB_ENV_YAML)
    assert yaml_int(f, ("scene", "num_envs")) == 4096  # not viewer.num_envs
    assert yaml_value(f, ("sim", "gravity")) == [0.0, 0.0, -9.81]
    assert yaml_int(f, ("scene", "env_spacing")) is None  # a float is not a whole number
    assert yaml_int(f, ("scene", "replicate_physics")) is None  # nor is a bool
    assert yaml_float(f, ("scene", "replicate_physics")) is None
    assert yaml_float(f, ("sim", "dt")) == pytest.approx(1 / 120)
    assert yaml_int(f, ("sim", "gravity", "0")) is None  # no list indices
    assert yaml_int(f, ("scene", "num_envs", "x")) is None


def test_objects_are_never_built_from_other_tags(tmp_path):
    f = tmp_path / "agent.yaml"
    f.write_text("a: !!python/object/apply:os.system ['touch pwned']\nb: !custom {x: 1}\nn: 3\n")
    assert yaml_value(f, ("a",)) == ["touch pwned"] and not (tmp_path / "pwned").exists()
    assert yaml_value(f, ("b",)) == {"x": 1} and yaml_int(f, ("n",)) == 3


def test_numbers_strings_and_broken_files(tmp_path):
    f = tmp_path / "agent.yaml"
    f.write_text("a: 1e6\nb: inf\nc: .nan\nd: '7'\ne: 1_000\n")
    assert yaml_float(f, ("a",)) == 1e6  # YAML 1.1 reads 1e6 (no dot) as a string
    assert yaml_float(f, ("b",)) is None and yaml_float(f, ("c",)) is None  # not finite
    assert yaml_int(f, ("d",)) is None and yaml_int(f, ("e",)) == 1000
    assert yaml_int(tmp_path / "missing.yaml", ("a",)) is None
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n")
    assert load_params(bad) is None and yaml_int(bad, ("a",)) is None
    bad.write_bytes(b"a: \xff\n")
    os.utime(bad, ns=(1, 1))
    assert yaml_int(bad, ("a",)) is None


def test_a_rewritten_file_is_read_again(tmp_path):
    f = tmp_path / "agent.yaml"
    f.write_text("agent:\n  rollouts: 16\n")
    os.utime(f, ns=(10**18, 10**18))
    assert yaml_int(f, ("agent", "rollouts")) == 16
    f.write_text("agent:\n  rollouts: 32\n")  # the same size
    os.utime(f, ns=(2 * 10**18, 2 * 10**18))
    assert yaml_int(f, ("agent", "rollouts")) == 32
