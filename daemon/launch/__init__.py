"""One launch pipeline for a job's trainer and its warm spare (issue 38).

`context.py` holds what a launch is about, computed once (the config in force, the owner, caches, directories,
token, side channel, what it runs); `steps.py` is the ordered list of prepare steps, each one concern returning a
typed contribution (`contributions.py`); `pipeline.py` runs them and assembles the `LaunchSpec`, the same code for
a cold start (attempt/planner.py) and a spare (attempt/spare.py): what differs between them is the context's data.
`worker.py` runs a preparation off the tick thread, so one job's slow launch never stalls another job's recovery.
"""
