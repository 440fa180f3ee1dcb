"""``isaacd-train`` (= ``python -m isaacd_trainer``): the built-in trainer in Isaac Lab 2.1 - 2.3.x mode (default).

Behaves like ``scripts/reinforcement_learning/rsl_rl/train.py`` of Isaac Lab 2.1 - 2.3.x on every contract point
(see :mod:`isaacd_trainer.train_v2`): ``--resume`` is ``store_true``, ``--load_run``/``--checkpoint`` are
``get_checkpoint_path`` regexes, leftover words are Hydra overrides parsed by hydra-core (``--resume True`` leaves
a stray ``True``: Hydra's "Error parsing override", exit 1), runs go to ``./logs/rsl_rl/<experiment>/<timestamp>
[_<run_name>]`` relative to the working directory, vanilla rsl_rl iteration numbering, no signal handling.

Other Isaac Lab generations: ``python -m isaacd_trainer.isaaclab20`` (<= 2.0) and ``python -m
isaacd_trainer.isaaclab30 --rl_library rsl_rl`` (3.x unified entry point). Save-on-stop comes from the launcher
shim, ``python -m isaacd_trainer.shim`` / ``python /path/to/shim.py``, exactly as for a real Isaac Lab job.
"""

from __future__ import annotations

import sys
from typing import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from isaacd_trainer.train_v2 import main as train_main

    return train_main("2.1", argv, prog="isaacd-train")


if __name__ == "__main__":
    sys.exit(main())
