"""The built-in trainer in Isaac Lab <= 2.0 mode: ``python -m isaacd_trainer.isaaclab20`` (``isaacd-train-isaaclab20``).

Identical to the 2.1 - 2.3 mode except what differed upstream (cli_args.py at commit
fe626787e5cd6ee2d7d54ec79a2e372ff8b22c3d): ``--resume`` has ``type=bool, default=None`` -- ``--resume True`` (and,
since ``bool("False")`` is True, also ``--resume False``) resumes, a bare ``--resume`` is an argparse error (exit 2)
-- and ``update_rsl_rl_cfg`` does not apply ``--experiment_name`` (use the Hydra override
``agent.experiment_name=NAME``, which every generation honours). No ``--export_io_descriptors``.
"""

from __future__ import annotations

import sys
from typing import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from isaacd_trainer.train_v2 import main as train_main

    return train_main("2.0", argv, prog="isaacd-train-isaaclab20")


if __name__ == "__main__":
    sys.exit(main())
