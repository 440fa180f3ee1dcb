"""The client side: the `isaacd` command line (`main.py`) and what its commands read to a person.

`render.py` (+ `render_backup.py`) how `isaacd status` and `isaacd events` read; `durations.py` "45s", "3h07m";
`job_logs.py` `isaacd logs`; `doctor.py` (+ `doctor_backup.py`, `checks.py`) `isaacd doctor`. Nothing in the
supervisor imports this package: it is the top of the import graph.
"""
