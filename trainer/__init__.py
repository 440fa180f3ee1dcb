"""isaacd's built-in trainer (import package ``isaacd_trainer``, console script ``isaacd-train``).

A faithful stand-in for Isaac Lab's rsl_rl train scripts on built-in batched torch environments instead of Isaac
Sim, so the supervisor can be exercised on any host (CPU or CUDA): same command line, same Hydra overrides (real
hydra-core), same ``./logs/rsl_rl/<experiment>/<timestamp>[_<run_name>]/`` layout relative to the working
directory, the real rsl_rl ``OnPolicyRunner`` (checkpoints, numbering and TensorBoard events are rsl_rl's own), and
the same (absent) signal handling. One entry point per Isaac Lab generation:

* ``isaacd-train`` / ``python -m isaacd_trainer``: Isaac Lab 2.1 - 2.3.x (:mod:`isaacd_trainer.train_v2`);
* ``python -m isaacd_trainer.isaaclab20``: Isaac Lab <= 2.0;
* ``python -m isaacd_trainer.isaaclab30 --rl_library rsl_rl``: the Isaac Lab 3.x unified entry point.

isaacd's own additions (fault injection) live in :mod:`isaacd_trainer.extras`. Save-on-stop and the side channel
to the daemon are not part of the trainer: :mod:`isaacd_trainer.shim` adds them from outside, to this trainer and
to a real Isaac Lab train script alike.

Importing this package does not import torch; only :mod:`isaacd_trainer.runtime` and :mod:`isaacd_trainer.envs` do.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
