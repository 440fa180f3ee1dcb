"""isaacd's built-in trainer (import package ``isaacd_trainer``, console script ``isaacd-train``).

A small stand-in for Isaac Lab's ``scripts/reinforcement_learning/rsl_rl/train.py``: same command line, same
``logs/rsl_rl/<experiment>/<timestamp>[_<run_name>]/`` layout, the real rsl_rl ``OnPolicyRunner`` (checkpoints and
TensorBoard events are rsl_rl's own), but on built-in batched torch environments instead of Isaac Sim, so the
supervisor can be exercised on any host (CPU or CUDA).

Importing this package does not import torch; only :mod:`isaacd_trainer.train` and :mod:`isaacd_trainer.envs` do.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
