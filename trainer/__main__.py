"""``python -m isaacd_trainer`` is the same as ``isaacd-train``."""

from isaacd_trainer.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
