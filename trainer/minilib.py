"""Stand-ins for the parts of skrl and rl_games that Isaac Lab's train scripts touch (torch only).

Neither library is installed here. What isaacd relies on is reproduced from the upstream source, line for line
where it matters (the docstrings name the file and commit): when checkpoints are written and how they are named,
what a load restores and what it does not, how timesteps/epochs are counted across a resume, where TensorBoard
events go. The learning itself is a tiny actor-critic on the built-in cart-pole, not skrl's PPO or rl_games' A2C:
no contract point depends on it.
"""

from __future__ import annotations

import collections
import copy
import datetime
import os
import sys
import time
from typing import Any

import numpy as np
import torch
from torch import nn


# ------------------------------------------------------------------------------------------------ shared pieces


class ActorCritic(nn.Module):
    def __init__(self, num_obs: int, num_actions: int, hidden: int = 32):
        super().__init__()
        self.pi = nn.Sequential(nn.Linear(num_obs, hidden), nn.ELU(), nn.Linear(hidden, num_actions))
        self.v = nn.Sequential(nn.Linear(num_obs, hidden), nn.ELU(), nn.Linear(hidden, 1))
        self.log_std = nn.Parameter(torch.zeros(num_actions))

    def dist(self, obs: torch.Tensor) -> torch.distributions.Normal:
        return torch.distributions.Normal(self.pi(obs), self.log_std.exp().expand(obs.shape[0], -1))


def ac_update(model: ActorCritic, optimizer: torch.optim.Optimizer, obs: torch.Tensor, actions: torch.Tensor,
              rewards: torch.Tensor, dones: torch.Tensor, gamma: float = 0.99) -> tuple[float, float]:
    """One advantage actor-critic step on a [T, N, ...] rollout; returns (policy loss, value loss)."""
    with torch.no_grad():
        values = model.v(obs).squeeze(-1)
        returns = torch.zeros_like(rewards)
        running = values[-1]
        for t in reversed(range(rewards.shape[0])):
            running = rewards[t] + gamma * running * (1.0 - dones[t])
            returns[t] = running
        adv = returns - values
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    flat = obs.reshape(-1, obs.shape[-1])
    logp = model.dist(flat).log_prob(actions.reshape(-1, actions.shape[-1])).sum(-1)
    policy_loss = -(logp * adv.reshape(-1)).mean()
    value_loss = (model.v(flat).squeeze(-1) - returns.reshape(-1)).pow(2).mean()
    optimizer.zero_grad()
    (policy_loss + 0.5 * value_loss).backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return policy_loss.item(), value_loss.item()


class GymLikeEnv:
    """The built-in cart-pole (an rsl_rl VecEnv) seen the way SkrlVecEnvWrapper / RlGamesVecEnvWrapper show an
    Isaac Lab env: ``reset() -> (obs, info)``, ``step(a) -> (obs, reward, terminated, truncated, info)``."""

    def __init__(self, env: Any, pre_step=None):
        self.env = env
        self.num_envs = env.num_envs
        self.num_actions = env.num_actions
        self.num_agents = 1
        self.device = env.device
        self.pre_step = pre_step

    @property
    def num_obs(self) -> int:
        return int(self.env.get_observations()["policy"].shape[-1])

    def reset(self) -> tuple[torch.Tensor, dict]:
        return self.env.get_observations()["policy"], {}

    def step(self, actions: torch.Tensor):
        if self.pre_step is not None:
            self.pre_step()
        obs, rewards, dones, extras = self.env.step(actions)
        truncated = extras["time_outs"].bool()
        terminated = dones.bool() & ~truncated
        return (obs["policy"], rewards.view(-1, 1), terminated.view(-1, 1), truncated.view(-1, 1),
                {"log": extras.get("log", {})})

    def close(self) -> None:
        self.env.close()


# ------------------------------------------------------------------------------------------------------- skrl


class SkrlAgent:
    """``skrl.agents.torch.base.Agent`` + the PPO parts that count (Toni-SM/skrl, base.py @001413df, the rollout
    counter of ``ppo.py:post_interaction``; the same in skrl 1.4.x, which Isaac Lab 2.x requires).

    * ``init``: ``write_interval``/``checkpoint_interval`` ``"auto"`` -> ``int(timesteps / 100)`` / ``/ 10``;
      a TensorBoard writer on the experiment dir itself; ``checkpoints/`` is created when checkpointing is on.
    * ``post_interaction(timestep)``: PPO first (``_rollout += 1``; an update when ``_rollout % rollouts == 0``
      and ``timestep >= learning_starts``), then the base: ``timestep += 1``; at ``timestep > 1`` and
      ``timestep % checkpoint_interval == 0`` the best modules are tracked and ``checkpoints/agent_<timestep>.pt``
      written (a plain ``torch.save`` of ``{name: state_dict}``), plus ``best_agent.pt`` when a new best waits.
    * ``load(path)``: ``load_state_dict`` for each module in the file. **Nothing else**: not the timestep (the
      trainer starts at 0 again), not the rollout counter, not the best reward, not the memory.
    """

    def __init__(self, cfg: dict, env: GymLikeEnv, device: str):
        self.cfg = cfg
        self.device = device
        self.model = ActorCritic(env.num_obs, env.num_actions).to(device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=float(cfg.get("learning_rate", 5e-4)))
        # skrl's PPO names its modules policy/value/optimizer (+ preprocessors): keep the shape of the file
        self.checkpoint_modules = {"policy": self.model.pi, "value": self.model.v, "optimizer": self.optimizer,
                                   "log_std": _ParamModule(self.model.log_std)}
        self._rollouts = int(cfg["rollouts"])
        self._learning_starts = int(cfg.get("learning_starts", 0))
        self._rollout = 0
        self.memory: list[tuple[torch.Tensor, ...]] = []
        exp = cfg.get("experiment", {})
        self.write_interval = exp.get("write_interval", "auto")
        self.checkpoint_interval = exp.get("checkpoint_interval", "auto")
        self.checkpoint_best_modules = {"timestep": 0, "reward": -(2**31), "saved": False, "modules": {}}
        self.tracking_data: dict[str, list[float]] = collections.defaultdict(list)
        self._track_rewards: collections.deque = collections.deque(maxlen=100)
        self._cumulative_rewards: torch.Tensor | None = None
        directory = exp.get("directory") or os.path.join(os.getcwd(), "runs")
        name = exp.get("experiment_name") or f"{datetime.datetime.now():%y-%m-%d_%H-%M-%S-%f}_PPO"
        self.experiment_dir = os.path.join(directory, name)
        self.writer = None

    def init(self, trainer_cfg: dict) -> None:
        if self.write_interval == "auto":
            self.write_interval = int(trainer_cfg.get("timesteps", 0) / 100)
        if self.write_interval > 0:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=self.experiment_dir)
        if self.checkpoint_interval == "auto":
            self.checkpoint_interval = int(trainer_cfg.get("timesteps", 0) / 10)
        if self.checkpoint_interval > 0:
            os.makedirs(os.path.join(self.experiment_dir, "checkpoints"), exist_ok=True)

    @staticmethod
    def _state(module: Any) -> Any:
        return module.state_dict() if hasattr(module, "state_dict") else module

    def act(self, states: torch.Tensor) -> torch.Tensor:
        return self.model.dist(states).sample()

    def record_transition(self, states, actions, rewards, terminated, truncated) -> None:
        if self.write_interval > 0:
            if self._cumulative_rewards is None:
                self._cumulative_rewards = torch.zeros_like(rewards, dtype=torch.float32)
            self._cumulative_rewards.add_(rewards)
            finished = (terminated + truncated).nonzero(as_tuple=True)[0]
            if finished.numel():
                self._track_rewards.extend(self._cumulative_rewards[finished].view(-1).tolist())
                self._cumulative_rewards[finished] = 0
            self.tracking_data["Reward / Instantaneous reward (mean)"].append(torch.mean(rewards).item())
            if len(self._track_rewards):
                self.tracking_data["Reward / Total reward (mean)"].append(float(np.mean(self._track_rewards)))
        self.memory.append((states, actions, rewards.view(-1), (terminated | truncated).view(-1).float()))

    def _update(self) -> None:
        obs, actions, rewards, dones = (torch.stack(x) for x in zip(*self.memory))
        self.memory.clear()
        pl, vl = ac_update(self.model, self.optimizer, obs, actions, rewards, dones)
        self.tracking_data["Loss / Policy loss"].append(pl)
        self.tracking_data["Loss / Value loss"].append(vl)

    def post_interaction(self, timestep: int, timesteps: int) -> None:
        self._rollout += 1
        if not self._rollout % self._rollouts and timestep >= self._learning_starts:
            self._update()
        # skrl Agent.post_interaction
        timestep += 1
        if timestep > 1 and self.checkpoint_interval > 0 and not timestep % self.checkpoint_interval:
            reward = np.mean(self.tracking_data.get("Reward / Total reward (mean)", -(2**31)))
            if reward > self.checkpoint_best_modules["reward"]:
                self.checkpoint_best_modules.update(timestep=timestep, reward=reward, saved=False, modules={
                    k: copy.deepcopy(self._state(v)) for k, v in self.checkpoint_modules.items()})
            self.write_checkpoint(timestep, timesteps)
        if timestep > 1 and self.write_interval > 0 and not timestep % self.write_interval:
            self.write_tracking_data(timestep)

    def write_tracking_data(self, timestep: int) -> None:
        for k, v in self.tracking_data.items():
            self.writer.add_scalar(k, float(np.mean(v)), timestep)
        self.tracking_data.clear()

    def write_checkpoint(self, timestep: int | None, timesteps: int) -> None:
        tag = str(timestep if timestep is not None else datetime.datetime.now().strftime("%y-%m-%d_%H-%M-%S-%f"))
        modules = {name: self._state(module) for name, module in self.checkpoint_modules.items()}
        torch.save(modules, os.path.join(self.experiment_dir, "checkpoints", f"agent_{tag}.pt"))
        if self.checkpoint_best_modules["modules"] and not self.checkpoint_best_modules["saved"]:
            torch.save(self.checkpoint_best_modules["modules"], os.path.join(self.experiment_dir, "checkpoints",
                                                                             "best_agent.pt"))
            self.checkpoint_best_modules["saved"] = True

    def load(self, path: str) -> None:
        modules = torch.load(path, map_location=self.device, weights_only=False)
        if type(modules) is dict:
            for name, data in modules.items():
                module = self.checkpoint_modules.get(name)
                if module is not None:
                    module.load_state_dict(data)
                else:
                    print(f"[skrl:WARNING] Skipping module '{name}'. The agent doesn't have such an instance")


class _ParamModule:
    def __init__(self, p: nn.Parameter):
        self.p = p

    def state_dict(self) -> dict:
        return {"value": self.p.detach().clone()}

    def load_state_dict(self, d: dict) -> None:
        with torch.no_grad():
            self.p.copy_(d["value"])


class SkrlRunner:
    """``skrl.utils.runner.torch.Runner`` + ``SequentialTrainer`` (skrl ``trainers/torch/base.py`` @fe59f8a2,
    ``sequential.py`` @06fbf2ef): ``initial_timestep = 0`` and ``for timestep in range(initial_timestep,
    timesteps)``: pre_interaction, act, step, record_transition, post_interaction. No signal handling."""

    def __init__(self, env: GymLikeEnv, cfg: dict, device: str):
        self.env = env
        self.cfg = cfg
        self.agent = SkrlAgent(cfg["agent"], env, device)
        self.timesteps = int(cfg["trainer"]["timesteps"])
        self.initial_timestep = 0
        self.agent.init(trainer_cfg=cfg["trainer"])

    def run(self) -> None:
        states, _ = self.env.reset()
        for timestep in range(self.initial_timestep, self.timesteps):
            with torch.no_grad():
                actions = self.agent.act(states)
                next_states, rewards, terminated, truncated, _ = self.env.step(actions)
                self.agent.record_transition(states, actions, rewards, terminated, truncated)
            self.agent.post_interaction(timestep, self.timesteps)
            states = next_states
        if self.agent.writer is not None:
            self.agent.writer.flush()


# --------------------------------------------------------------------------------------------------- rl_games


class RlGamesAgent:
    """``rl_games.common.a2c_common.ContinuousA2CBase`` as far as the contract goes (Denys88/rl_games
    ``rl_games/common/a2c_common.py`` @005ec174):

    * dirs: ``<train_dir>/<full_experiment_name or name + _%d-%H-%M-%S>/{nn,summaries}``; the SummaryWriter
      writes into ``summaries/`` (rank 0 only), most scalars stepped by frames, ``rewards/iter`` by epoch.
    * ``train()``: ``last_mean_rewards = -100500``; ``curr_frames = batch_size_envs = horizon_length *
      num_actors``; ``while True``: ``epoch_num = update_epoch()`` (+1, so the first epoch after a fresh start is
      1 and after restoring epoch N it is N+1), one epoch of play + update, ``frame = self.frame // num_agents``
      (*before* this epoch's frames: epoch E of a fresh run is logged at ``(E - 1) * curr_frames``), then
      ``self.frame += curr_frames * world_size`` (multi-GPU: rank 0 counts every rank's frames); ``write_stats``
      (``losses/*``, ``info/epochs`` ... at ``frame``); when some episode finished in the reward window (last 100
      games): the
      ``rewards/*`` scalars, ``last_<name>_ep_<epoch>_rew_<mean>`` every ``save_frequency`` epochs and
      ``<name>`` on a new best after ``save_best_after``, and if ``score_to_win`` is in the config and that best
      beats it: "Maximum reward achieved. Network won!", ``<name>_ep_<epoch>_rew_<mean>`` and exit; at
      ``epoch_num >= max_epochs``: always ``last_<name>_ep_<epoch>_rew_<str(mean_rewards) with [] -> _>`` and
      return; at ``self.frame >= max_frames`` (not -1): ``last_<name>_frame_<frame>_rew_<...>``, "MAX FRAMES
      NUM!" and return. Returning ends ``train()`` and the script exits 0. ``save`` appends ``.pth``.
    * ``restore``: weights, optimizer, ``epoch_num = checkpoint['epoch']``, ``frame``, ``last_mean_rewards``
      (then overwritten by ``train()``). The reward window is not restored.
    """

    def __init__(self, params: dict, env: GymLikeEnv, device: str):
        self.config = config = params["config"]
        full = config.get("full_experiment_name", None)
        if full:
            print(f"Exact experiment name requested from command line: {full}")
            self.experiment_name = full
        else:
            self.experiment_name = config["name"] + datetime.datetime.now().strftime("_%d-%H-%M-%S")
        self.env = env
        self.device = device
        self.num_actors = config["num_actors"]
        self.horizon_length = int(config["horizon_length"])
        self.save_freq = config.get("save_frequency", 0)
        self.save_best_after = config.get("save_best_after", 100)
        self.max_epochs = config.get("max_epochs", -1)
        self.max_frames = config.get("max_frames", -1)
        self.games_to_track = config.get("games_to_track", 100)
        self.game_rewards: collections.deque = collections.deque(maxlen=self.games_to_track)
        self.mean_rewards = self.last_mean_rewards = -1000000000
        self.epoch_num = 0
        self.frame = 0
        self.multi_gpu = config.get("multi_gpu", False)
        self.world_size = int(os.getenv("WORLD_SIZE", "1")) if self.multi_gpu else 1
        self.global_rank = int(os.getenv("RANK", "0")) if self.multi_gpu else 0
        self.num_agents = 1  # env_info.get("agents", 1): Isaac Lab's wrapper is single-agent
        self.train_dir = config.get("train_dir", "runs")
        self.experiment_dir = os.path.join(self.train_dir, self.experiment_name)
        self.nn_dir = os.path.join(self.experiment_dir, "nn")
        self.summaries_dir = os.path.join(self.experiment_dir, "summaries")
        for d in (self.train_dir, self.experiment_dir, self.nn_dir, self.summaries_dir):
            os.makedirs(d, exist_ok=True)
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(self.summaries_dir) if self.global_rank == 0 else None
        self.model = ActorCritic(env.num_obs, env.num_actions).to(device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=float(config.get("learning_rate", 5e-4)))
        self._returns = torch.zeros(env.num_envs, device=device)

    # torch_ext.save_checkpoint / load_checkpoint
    def save(self, fn: str) -> None:
        state = {"model": self.model.state_dict(), "epoch": self.epoch_num, "optimizer": self.optimizer.state_dict(),
                 "frame": self.frame, "last_mean_rewards": self.last_mean_rewards, "env_state": None}
        filename = fn if fn.endswith(".pth") else fn + ".pth"
        torch.save(state, filename)

    def restore(self, fn: str) -> None:
        checkpoint = torch.load(fn, map_location=self.device, weights_only=False)
        self.model.load_state_dict(checkpoint["model"])
        self.epoch_num = checkpoint["epoch"]
        self.frame = checkpoint.get("frame", 0)
        self.optimizer.load_state_dict(checkpoint["optimizer"])
        self.last_mean_rewards = checkpoint.get("last_mean_rewards", -1000000000)

    def _play_and_update(self, obs: torch.Tensor) -> tuple[torch.Tensor, int]:
        steps = []
        for _ in range(self.horizon_length):
            with torch.no_grad():
                actions = self.model.dist(obs).sample()
            next_obs, rewards, terminated, truncated, _ = self.env.step(actions)
            done = (terminated | truncated).view(-1)
            self._returns += rewards.view(-1)
            for r in self._returns[done].tolist():
                self.game_rewards.append(r)
            self._returns[done] = 0.0
            steps.append((obs, actions, rewards.view(-1), done.float()))
            obs = next_obs
        o, a, r, d = (torch.stack(x) for x in zip(*steps))
        losses = ac_update(self.model, self.optimizer, o, a, r, d)
        return obs, losses

    def train(self) -> tuple[float, int]:
        self.last_mean_rewards = -100500
        obs, _ = self.env.reset()
        self.curr_frames = self.horizon_length * self.num_actors  # batch_size_envs
        while True:
            self.epoch_num += 1
            epoch_num = self.epoch_num
            obs, (a_loss, c_loss) = self._play_and_update(obs)
            frame = self.frame // self.num_agents  # taken before this epoch's frames are added
            should_exit = False
            if self.global_rank != 0:
                # upstream: rank 0 decides and broadcasts should_exit; the stand-in has no process group, so
                # its other ranks stop at max_epochs only (score_to_win and max_frames end rank 0 alone)
                if epoch_num >= self.max_epochs and self.max_epochs != -1:
                    return self.last_mean_rewards, epoch_num
                continue
            curr_frames = self.curr_frames * self.world_size if self.multi_gpu else self.curr_frames
            self.frame += curr_frames
            print(f"epoch: {epoch_num:.0f}/{self.max_epochs:.0f} frames: {frame:.0f}", flush=True)
            self.writer.add_scalar("losses/a_loss", a_loss, frame)
            self.writer.add_scalar("losses/c_loss", c_loss, frame)
            self.writer.add_scalar("info/epochs", epoch_num, frame)
            if len(self.game_rewards) > 0:
                mean_rewards = np.array([np.mean(self.game_rewards)], dtype=np.float32)
                self.mean_rewards = mean_rewards[0]
                self.writer.add_scalar("rewards/step", mean_rewards[0], frame)
                self.writer.add_scalar("rewards/iter", mean_rewards[0], epoch_num)
                checkpoint_name = self.config["name"] + "_ep_" + str(epoch_num) + "_rew_" + str(mean_rewards[0])
                if self.save_freq > 0 and epoch_num % self.save_freq == 0:
                    self.save(os.path.join(self.nn_dir, "last_" + checkpoint_name))
                if mean_rewards[0] > self.last_mean_rewards and epoch_num >= self.save_best_after:
                    print("saving next best rewards: ", mean_rewards)
                    self.last_mean_rewards = mean_rewards[0]
                    self.save(os.path.join(self.nn_dir, self.config["name"]))
                    if "score_to_win" in self.config:
                        if self.last_mean_rewards > self.config["score_to_win"]:
                            print("Maximum reward achieved. Network won!")
                            self.save(os.path.join(self.nn_dir, checkpoint_name))
                            should_exit = True
            if epoch_num >= self.max_epochs and self.max_epochs != -1:
                if len(self.game_rewards) == 0:
                    print("WARNING: Max epochs reached before any env terminated at least once")
                    mean_rewards = -np.inf
                self.save(os.path.join(self.nn_dir, "last_" + self.config["name"] + "_ep_" + str(epoch_num)
                                       + "_rew_" + str(mean_rewards).replace("[", "_").replace("]", "_")))
                print("MAX EPOCHS NUM!")
                should_exit = True
            if self.frame >= self.max_frames and self.max_frames != -1:
                if len(self.game_rewards) == 0:
                    print("WARNING: Max frames reached before any env terminated at least once")
                    mean_rewards = -np.inf
                self.save(os.path.join(self.nn_dir, "last_" + self.config["name"] + "_frame_" + str(self.frame)
                                       + "_rew_" + str(mean_rewards).replace("[", "_").replace("]", "_")))
                print("MAX FRAMES NUM!")
                should_exit = True
            self.writer.flush()
            if should_exit:
                return self.last_mean_rewards, epoch_num


class RlGamesRunner:
    """``rl_games.torch_runner.Runner``: ``load(cfg)``, ``reset()``, ``run({"train": True, "checkpoint": p})``
    -> create the agent, ``restore(checkpoint)`` if given, ``train()``."""

    def __init__(self, env: GymLikeEnv, device: str):
        self.env = env
        self.device = device
        self.params: dict | None = None

    def load(self, cfg: dict) -> None:
        self.params = copy.deepcopy(cfg["params"])

    def reset(self) -> None:
        pass

    def run(self, args: dict) -> None:
        assert self.params is not None
        agent = RlGamesAgent(self.params, self.env, self.device)
        if args.get("checkpoint"):
            print(f"=> loading checkpoint '{args['checkpoint']}'")
            agent.restore(args["checkpoint"])
        agent.train()


def step_pacer(delay: float, exit_after: tuple[int, int] | None, steps_per_iteration: int):
    """isaacd's --step_delay and --fault_exit_after K:CODE (K counted in this process's iterations)."""
    state = {"steps": 0}

    def before_step() -> None:
        it = state["steps"] // max(steps_per_iteration, 1)
        state["steps"] += 1
        if exit_after is not None and it >= exit_after[0]:
            sys.stdout.flush()
            print(f"isaacd-train: FAULT INJECTION: exiting with status {exit_after[1]} at iteration {it}",
                  file=sys.stderr, flush=True)
            os._exit(exit_after[1])
        if delay > 0:
            time.sleep(delay)

    return before_step
