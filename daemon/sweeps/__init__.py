"""Sweeps (issue 39): many trials of one task with different hyperparameters, run as ordinary jobs on the host's
queue, the bad ones paused early by ASHA and promoted (resumed exactly) when they rank. `space.py` the search space's
distributions; `spec.py` the sweep file; `sampler.py` the trials' configurations (seeded); `asha.py` the scheduler's
pure decisions over the trials' objective histories."""
