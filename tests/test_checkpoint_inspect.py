"""Deep checkpoint validation without torch in the daemon: keys, `iter`, finite tensors, generation.

The files are written by real torch (`torch.save`, as rsl_rl's `OnPolicyRunner.save` does) with
the key layouts of rsl_rl 2.x/3.x and 4.x/5.x; the daemon side reads them with its stub unpickler.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from isaacd.observations.checkpoint_inspect import RSL_RL_2, RSL_RL_4, InspectError, inspect_checkpoint
from isaacd.observations.checkpoints import Checkpoint
from isaacd.workflows.validate import CheckpointValidator, expected_rsl_rl_format


def _policy(dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.ELU(), torch.nn.Linear(32, 1)).to(dtype)


def save(path: Path, layout: str, it: int, nan: bool = False, dtype: torch.dtype = torch.float32) -> Checkpoint:
    actor, critic = _policy(dtype), _policy(dtype)
    opt = torch.optim.Adam(list(actor.parameters()) + list(critic.parameters()))
    if nan:
        with torch.no_grad():
            actor[0].weight[0, 0] = float("nan")
    if layout == "rsl_rl5":
        data = {"actor_state_dict": actor.state_dict(), "critic_state_dict": critic.state_dict(),
                "optimizer_state_dict": opt.state_dict(), "iter": it, "infos": None}
    else:
        data = {"model_state_dict": actor.state_dict(), "optimizer_state_dict": opt.state_dict(), "iter": it,
                "infos": None}
    torch.save(data, path)
    return Checkpoint(path, int(path.stem.split("_")[1]), 0.0, path.stat().st_size)


def test_generations_iter_and_nan_are_read_without_torch(tmp_path):
    new = inspect_checkpoint(save(tmp_path / "model_7.pt", "rsl_rl5", 7).path)
    assert new.rsl_rl_format == RSL_RL_4 and new.iteration == 7 and new.nonfinite == []
    old = inspect_checkpoint(save(tmp_path / "model_3.pt", "rsl_rl2", 3, nan=True).path)
    assert old.rsl_rl_format == RSL_RL_2 and old.nonfinite == ["model_state_dict"]
    bf = inspect_checkpoint(save(tmp_path / "model_4.pt", "rsl_rl5", 4, nan=True, dtype=torch.bfloat16).path)
    assert bf.nonfinite == ["actor_state_dict"]


def test_validator_names_both_generations_and_rejects_a_lying_name(tmp_path):
    v = CheckpointValidator()
    old = save(tmp_path / "model_40.pt", "rsl_rl2", 40)
    problem = v.problem(old, RSL_RL_4, "rsl_rl")
    assert problem and problem.startswith("incompatible") and RSL_RL_2 in problem and RSL_RL_4 in problem
    assert v.problem(old, None, "rsl_rl") is None  # generation not known yet: either layout may load
    liar = save(tmp_path / "model_50.pt", "rsl_rl5", 49)
    assert "iter is 49" in v.problem(liar, RSL_RL_4, "rsl_rl")
    nan = save(tmp_path / "model_60.pt", "rsl_rl5", 60, nan=True)
    assert "NaN" in v.problem(nan, RSL_RL_4, "rsl_rl")
    half = tmp_path / "model_70.pt"
    half.write_bytes((tmp_path / "model_40.pt").read_bytes()[:500])
    assert v.problem(Checkpoint(half, 70, 0, 500), RSL_RL_4, "rsl_rl").startswith("unreadable")
    v.close()


def test_expected_format_from_the_reported_rsl_rl_version():
    assert expected_rsl_rl_format("5.5.1", 2, builtin=False) == RSL_RL_4
    assert expected_rsl_rl_format("3.0.1", 2, builtin=False) == RSL_RL_2
    assert expected_rsl_rl_format(None, 3, builtin=False) == RSL_RL_4  # Isaac Lab 3.0 needs rsl-rl-lib >= 5.0.1
    assert expected_rsl_rl_format(None, 2, builtin=False) is None


def test_a_pickle_never_runs_code(tmp_path):
    """The stub unpickler builds stand-ins: a checkpoint that would run a command on torch.load does not here."""
    import pickle
    import zipfile

    class Evil:
        def __reduce__(self):  # noqa: ANN204
            return (Path(tmp_path / "pwned").touch, ())

    path = tmp_path / "model_1.pt"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/data.pkl", pickle.dumps({"actor_state_dict": Evil(), "iter": 1}))
    info = inspect_checkpoint(path)
    assert info.iteration == 1 and not (tmp_path / "pwned").exists()
    with pytest.raises(InspectError):
        inspect_checkpoint(tmp_path / "nope.pt")
