"""The built-in task's agent configs for skrl and RL-Games: the ``skrl_cfg_entry_point`` and
``rl_games_cfg_entry_point`` a registered Isaac Lab task carries (plain dicts, as their YAML files load).

Apart from the train scripts so that upstream.load_cfg_from_registry_v3 reads them without importing a script
that imports it.
"""

from __future__ import annotations


def skrl_agent_cfg() -> dict:
    """Shaped like Isaac Lab's ``direct/cartpole/agents/skrl_ppo_cfg.yaml`` (@39a7f586), smaller rollouts."""
    return {
        "seed": 42,
        "models": {"separate": False,
                   "policy": {"class": "GaussianMixin", "clip_actions": False, "initial_log_std": 0.0,
                              "network": [{"name": "net", "input": "STATES", "layers": [32, 32],
                                           "activations": "elu"}], "output": "ACTIONS"},
                   "value": {"class": "DeterministicMixin", "clip_actions": False,
                             "network": [{"name": "net", "input": "STATES", "layers": [32, 32],
                                          "activations": "elu"}], "output": "ONE"}},
        "memory": {"class": "RandomMemory", "memory_size": -1},
        "agent": {
            "class": "PPO", "rollouts": 16, "learning_epochs": 8, "mini_batches": 8, "discount_factor": 0.99,
            "lambda": 0.95, "learning_rate": 5.0e-04, "learning_starts": 0,
            "experiment": {"directory": "cartpole_direct", "experiment_name": "", "write_interval": "auto",
                           "checkpoint_interval": "auto"},
        },
        "trainer": {"class": "SequentialTrainer", "timesteps": 4800, "environment_info": "log"},
    }


def rl_games_agent_cfg() -> dict:
    """Shaped like Isaac Lab's cart-pole ``rl_games_ppo_cfg.yaml`` (no ``full_experiment_name``), small horizon."""
    return {
        "params": {
            "seed": 42,
            "env": {"clip_observations": 5.0, "clip_actions": 1.0},
            "algo": {"name": "a2c_continuous"},
            "model": {"name": "continuous_a2c_logstd"},
            "network": {"name": "actor_critic", "separate": False, "mlp": {"units": [32, 32], "activation": "elu"}},
            "load_checkpoint": False,
            "load_path": "",
            "config": {
                "name": "cartpole_direct", "env_name": "rlgpu", "device": "cuda:0", "device_name": "cuda:0",
                "multi_gpu": False, "ppo": True, "normalize_input": True, "num_actors": -1,
                "gamma": 0.99, "tau": 0.95, "learning_rate": 5e-4, "lr_schedule": "adaptive", "kl_threshold": 0.008,
                "score_to_win": 20000, "max_epochs": 150, "save_best_after": 50, "save_frequency": 25,
                "grad_norm": 1.0, "entropy_coef": 0.0, "truncate_grads": True, "e_clip": 0.2,
                "horizon_length": 16, "minibatch_size": 512, "mini_epochs": 8, "critic_coef": 4,
                "clip_value": True, "seq_length": 4, "bounds_loss_coef": 0.0001,
            },
        }
    }
