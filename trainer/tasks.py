"""Registry of the built-in tasks (no torch import here, so ``isaacd-train --help`` stays fast).

Each task maps to an environment entry point ("module:Class"), a default environment config and a default rsl_rl
runner config. The runner config is the plain dict that Isaac Lab's ``RslRlOnPolicyRunnerCfg.to_dict()`` produces
for rsl_rl 5.x (``actor``/``critic`` model configs with ``class_name``, ``algorithm`` with ``class_name``,
``obs_groups``), so it is fed to ``rsl_rl.runners.OnPolicyRunner`` unchanged.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

from isaacd_trainer.gymspec import check


# Cart-pole environment parameters (see isaacd_trainer.envs.cartpole); overridable with ``env.<key>=<value>``.
CARTPOLE_ENV_CFG: dict = {
    "dt": 0.02,
    "max_episode_length": 500,
    "gravity": 9.8,
    "mass_cart": 1.0,
    "mass_pole": 0.1,
    "pole_half_length": 0.5,
    "force_mag": 10.0,
    "x_threshold": 2.4,
    "theta_threshold_rad": 12.0 * 2.0 * math.pi / 360.0,
    "reset_noise": 0.05,
    "discrete_actions": False,
}


@dataclass(frozen=True)
class TaskSpec:
    name: str
    env_entry_point: str
    env_cfg: dict = field(default_factory=dict)
    agent_cfg: dict = field(default_factory=dict)
    default_num_envs: int = 256
    description: str = ""

    def make_env_cfg(self) -> dict:
        return copy.deepcopy(self.env_cfg)

    def make_agent_cfg(self) -> dict:
        return copy.deepcopy(self.agent_cfg)


def _cartpole_agent_cfg() -> dict:
    # Shaped like Isaac Lab's CartpolePPORunnerCfg (isaaclab_tasks ... cartpole/agents/rsl_rl_ppo_cfg.py) in the
    # rsl_rl 5.x dict format, with a rollout length that learns quickly on a few CPU cores.
    return {
        "class_name": "OnPolicyRunner",
        "seed": 42,
        # RslRlBaseRunnerCfg.device defaults to "cuda:0" (isaaclab_rl/rsl_rl/rl_cfg.py, isaaclab 3.0.0 wheel), and
        # no Isaac Lab train script (2.x @011c373c, 3.0.0's train_rsl_rl._run) applies --device to it unless
        # --distributed: the policy stays on cuda:0 whatever --device says, until `agent.device=...` is passed.
        "device": "cuda:0",
        "num_steps_per_env": 32,
        "max_iterations": 150,
        "save_interval": 50,
        "experiment_name": "cartpole",
        "run_name": "",
        "logger": "tensorboard",
        "resume": False,
        "load_run": ".*",
        "load_checkpoint": "model_.*.pt",
        "check_for_nan": True,
        "obs_groups": {"actor": ["policy"], "critic": ["policy"]},
        "actor": {
            "class_name": "MLPModel",
            "hidden_dims": [32, 32],
            "activation": "elu",
            "obs_normalization": True,
            "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0, "std_type": "scalar"},
        },
        "critic": {
            "class_name": "MLPModel",
            "hidden_dims": [32, 32],
            "activation": "elu",
            "obs_normalization": True,
        },
        "algorithm": {
            "class_name": "PPO",
            "value_loss_coef": 1.0,
            "use_clipped_value_loss": True,
            "clip_param": 0.2,
            "entropy_coef": 0.005,
            "num_learning_epochs": 5,
            "num_mini_batches": 4,
            "learning_rate": 1.0e-3,
            "schedule": "adaptive",
            "gamma": 0.99,
            "lam": 0.95,
            "desired_kl": 0.01,
            "max_grad_norm": 1.0,
        },
    }


TASKS: dict[str, TaskSpec] = {
    "Isaacd-Cartpole-v0": TaskSpec(
        name="Isaacd-Cartpole-v0",
        env_entry_point="isaacd_trainer.envs.cartpole:CartpoleEnv",
        env_cfg=dict(CARTPOLE_ENV_CFG, discrete_actions=False),
        agent_cfg=_cartpole_agent_cfg(),
        description="cart-pole balancing, continuous force action, +1 per step alive, 500-step episodes",
    ),
    "Isaacd-Cartpole-Discrete-v0": TaskSpec(
        name="Isaacd-Cartpole-Discrete-v0",
        env_entry_point="isaacd_trainer.envs.cartpole:CartpoleEnv",
        env_cfg=dict(CARTPOLE_ENV_CFG, discrete_actions=True),
        agent_cfg=_cartpole_agent_cfg(),
        description="cart-pole balancing, bang-bang force (sign of the action), +1 per step alive",
    ),
}


def get_task(name: str) -> TaskSpec:
    """The task, or what ``gym.spec(name)`` raises in Isaac Lab for an id its registry lacks (gymspec.py): the
    exception upstream's train scripts let through, and so exit 1 on."""
    check(name, TASKS)
    return TASKS[name]
