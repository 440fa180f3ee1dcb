"""isaacd as a system service: `units.py` `isaacd install-units` (its own systemd units); `sdnotify.py`
sd_notify(3) READY, STATUS, WATCHDOG, STOPPING; `early_signals.py` SIGHUP is a reload request from the first
instant of `isaacd run`.
"""
