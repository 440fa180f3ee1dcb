"""Checkpoint evaluation beside training (issue 41): the pure parts and the job's eval record.

types.py (EvalResult, EvalsStatus), result.py (a result JSON read and checked), record.py (state_dir/evals/<job>.json),
choose.py (which checkpoint next), best.py (the best result). The keeper that runs evaluations is attempt/evals.py.
"""
