"""The config file's schema and how it is read: `schema.py` the TOML config as typed, validated models,
with its sections `backup.py` (`[jobs.backup]`) and `watchdogs.py` (`[jobs.watchdogs.*]`); `read.py` reads a config
someone may be saving; `locate.py` where the supervisor's control socket is (from a config file or the registry).
"""
