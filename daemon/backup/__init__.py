"""Checkpoints in object storage (issue 22): every complete checkpoint copied off the host, and a resume from
the bucket when the job's disk (or node) is gone. One module per job:

- config/backup.py (outside this folder, with the rest of the config file) `[jobs.backup]`
- objects.py  the bucket through fsspec: atomic uploads, downloads, small documents
- manifest.py the per-job manifest (run, iteration, sha256, size, time)
- uploader.py the background thread that uploads (validation, backoff, status)
- restore.py  fetch + verify the newest checkpoint into the local run layout
- keeper.py   what the runner holds: uploads, and the launch's fetch, without blocking the tick
- remote.py   a Ray node without the shared log_root: the fetch and the uploads happen there
- notes.py    events from the threads, written to the job's journal on the runner's tick

Its `isaacd doctor` check and its `isaacd status` line are client code: cli/doctor_backup.py, cli/render_backup.py.

Nothing is imported here: `isaacd status` renders the backup line through cli/render_backup.py and must not pay for
pydantic and fsspec (tests/test_cli.py keeps the clients light). Import the modules themselves.
"""
