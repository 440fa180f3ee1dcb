"""A job's saved history: `store.py` one JSON document and one event journal per job, written atomically;
`rebuild.py` a job whose document is unusable rebuilt from what is on disk.
"""
