"""Batched cart-pole balancing task in plain torch, implementing rsl_rl's ``VecEnv``.

Classic Barto/Sutton cart-pole dynamics (as in Gym's ``CartPole``), explicit Euler at ``dt`` (0.02 s), with every
environment stepped by the same tensor operations on ``device`` (CPU or CUDA). The action is one continuous value
per environment, clipped to [-1, 1] and scaled to a horizontal force of ``force_mag`` newtons (or, with
``discrete_actions``, its sign: +/-``force_mag``, the classic bang-bang cart-pole).

Reward: +1 for every step that the pole is still up (also on the step that ends by time-out), 0 on the step that
fails. An episode fails when ``|x| > x_threshold`` or ``|theta| > theta_threshold_rad`` and is truncated ("time
out") after ``max_episode_length`` steps (500, i.e. 10 s). So an episode's return equals its length for a policy
that balances until the time limit: a random policy scores about 10-30, a trained one close to 500.

Semantics follow Isaac Lab's ``ManagerBasedRLEnv`` behind ``RslRlVecEnvWrapper``:

* ``step(actions) -> (obs: TensorDict, rewards, dones, extras)``; finished environments are reset inside ``step``,
  and the returned observation is the first observation of the new episode for those.
* ``dones`` is ``terminated | truncated`` (``torch.long``); ``extras["time_outs"]`` holds ``truncated`` (bool) so
  rsl_rl bootstraps values on time-outs.
* ``extras["log"]`` (only on steps where some episode ended) carries ``Episode_Reward/alive`` (mean episodic reward
  of the finished episodes divided by the episode length in seconds, like Isaac Lab's reward manager) and
  ``Episode_Termination/<term>`` counts; rsl_rl writes keys containing "/" verbatim to TensorBoard.
* ``episode_length_buf`` may be overwritten by the runner (``init_at_random_ep_len``).
"""

from __future__ import annotations

from typing import Callable

import torch
from rsl_rl.env import VecEnv
from tensordict import TensorDict

from isaacd_trainer.tasks import CARTPOLE_ENV_CFG

DEFAULT_CFG: dict = CARTPOLE_ENV_CFG


class CartpoleEnv(VecEnv):
    """``num_envs`` cart-poles stepped together; see the module docstring."""

    def __init__(self, num_envs: int, device: str | torch.device = "cpu", cfg: dict | None = None, seed: int | None = None):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        merged = dict(DEFAULT_CFG)
        if cfg:
            unknown = set(cfg) - set(DEFAULT_CFG) - {"num_envs", "seed", "device"}
            if unknown:
                raise ValueError(f"unknown cart-pole config keys: {sorted(unknown)}")
            merged.update({k: v for k, v in cfg.items() if k in DEFAULT_CFG})
        self.cfg = dict(merged, num_envs=num_envs, seed=seed, device=str(device))
        self.num_envs = int(num_envs)
        self.num_actions = 1
        self.num_obs = 4
        self.device = torch.device(device)
        self.max_episode_length = int(merged["max_episode_length"])
        self.dt = float(merged["dt"])
        self.max_episode_length_s = self.max_episode_length * self.dt

        self._g = float(merged["gravity"])
        self._mc = float(merged["mass_cart"])
        self._mp = float(merged["mass_pole"])
        self._total_mass = self._mc + self._mp
        self._l = float(merged["pole_half_length"])
        self._pml = self._mp * self._l
        self._force_mag = float(merged["force_mag"])
        self._x_thr = float(merged["x_threshold"])
        self._th_thr = float(merged["theta_threshold_rad"])
        self._noise = float(merged["reset_noise"])
        self._discrete = bool(merged["discrete_actions"])

        self._gen = torch.Generator(device=self.device)
        if seed is not None:
            self._gen.manual_seed(int(seed))
        else:
            self._gen.seed()

        # state: x, x_dot, theta, theta_dot
        self.state = torch.zeros(self.num_envs, 4, device=self.device)
        self.episode_length_buf = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        self.episode_reward_buf = torch.zeros(self.num_envs, device=self.device)
        self.common_step_counter = 0

        # Hooks for isaacd's trainer (fault injection, graceful stop, slow-down). Not part of rsl_rl's interface.
        self.pre_step_hook: Callable[[], None] | None = None
        self.reward_override: float | None = None
        self.reward_scale: float = 1.0

        self._reset_idx(torch.arange(self.num_envs, device=self.device))

    # ----------------------------------------------------------------------------------------------- VecEnv API
    def get_observations(self) -> TensorDict:
        return TensorDict({"policy": self.state.clone()}, batch_size=[self.num_envs], device=self.device)

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        if self.pre_step_hook is not None:
            self.pre_step_hook()
        actions = actions.to(self.device).reshape(self.num_envs, self.num_actions)
        if self._discrete:
            force = torch.where(actions[:, 0] >= 0.0, self._force_mag, -self._force_mag)
        else:
            force = actions[:, 0].clamp(-1.0, 1.0) * self._force_mag

        x, x_dot, theta, theta_dot = self.state.unbind(dim=1)
        cos_t = torch.cos(theta)
        sin_t = torch.sin(theta)
        temp = (force + self._pml * theta_dot.square() * sin_t) / self._total_mass
        theta_acc = (self._g * sin_t - cos_t * temp) / (
            self._l * (4.0 / 3.0 - self._mp * cos_t.square() / self._total_mass)
        )
        x_acc = temp - self._pml * theta_acc * cos_t / self._total_mass
        x = x + self.dt * x_dot
        x_dot = x_dot + self.dt * x_acc
        theta = theta + self.dt * theta_dot
        theta_dot = theta_dot + self.dt * theta_acc
        self.state = torch.stack((x, x_dot, theta, theta_dot), dim=1)

        self.episode_length_buf += 1
        self.common_step_counter += 1
        out_of_bounds = x.abs() > self._x_thr
        pole_fallen = theta.abs() > self._th_thr
        terminated = out_of_bounds | pole_fallen
        truncated = (self.episode_length_buf >= self.max_episode_length) & ~terminated

        rewards = (~terminated).float()
        if self.reward_override is not None:
            rewards = torch.full_like(rewards, float(self.reward_override))
        elif self.reward_scale != 1.0:
            rewards = rewards * self.reward_scale
        self.episode_reward_buf += rewards

        dones = terminated | truncated
        extras: dict = {"time_outs": truncated}
        reset_ids = dones.nonzero(as_tuple=False).flatten()
        if reset_ids.numel() > 0:
            extras["log"] = {
                "Episode_Reward/alive": self.episode_reward_buf[reset_ids].mean() / self.max_episode_length_s,
                "Episode_Termination/time_out": truncated.sum().float(),
                "Episode_Termination/pole_fallen": (pole_fallen & ~out_of_bounds).sum().float(),
                "Episode_Termination/cart_out_of_bounds": out_of_bounds.sum().float(),
            }
            self._reset_idx(reset_ids)

        return self.get_observations(), rewards, dones.long(), extras

    # ----------------------------------------------------------------------------------------------- internals
    def _reset_idx(self, env_ids: torch.Tensor) -> None:
        n = int(env_ids.numel())
        noise = torch.rand(n, 4, generator=self._gen, device=self.device) * (2.0 * self._noise) - self._noise
        self.state[env_ids] = noise
        self.episode_length_buf[env_ids] = 0
        self.episode_reward_buf[env_ids] = 0.0

    def close(self) -> None:  # parity with Isaac Lab envs
        pass
