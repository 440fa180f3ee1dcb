"""How long one ASHA decision over a whole sweep takes (issue 39's scale: up to 1,000 trials), median of repeats.

    .venv/bin/python bench/asha_decide.py [--repeat 50]

Prints, per trial count, the median seconds of `sweeps.asha.decide` over random sweeps (states, rung values), and
its ratio to the 100-trial median measured in the same run."""

from __future__ import annotations

import argparse
import random
import statistics
import time

from isaacd.sweeps.asha import Asha, TrialState, TrialView, decide


def view(rng: random.Random, n: int) -> TrialView:
    state = rng.choice(list(TrialState))
    if state is TrialState.PENDING:
        return TrialView(n, state)
    reached = rng.randint(1, 2)
    values = tuple(rng.random() for _ in range(reached))
    passed = rng.choice([reached - 1, reached]) if state is TrialState.RUNNING else reached - 1
    return TrialView(n, state, (10, 30)[reached - 1], values, passed)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args()
    asha = Asha(rungs=(10, 30), max_iterations=90, eta=3, concurrency=50)
    base = None
    for count in (100, 1000, 10000):
        rng = random.Random(count)
        took = []
        for _ in range(args.repeat):
            trials = [view(rng, n) for n in range(1, count + 1)]
            t0 = time.perf_counter()
            decide(asha, trials)
            took.append(time.perf_counter() - t0)
        med = statistics.median(took)
        base = base or med
        print(f"{count:6d} trials: decide median {med * 1e3:8.3f} ms  ({med / base:5.1f}x the 100-trial median)")


if __name__ == "__main__":
    main()
