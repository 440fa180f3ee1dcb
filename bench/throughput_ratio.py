"""Issue 21's throughput figure from the alternating runs of bench/isaaclab3_recovery.py --throughput-iterations:
the median of each run's median Perf/total_fps, booted spare parked over no spare, and the same for the trainer's
CPU seconds per iteration (no spare over booted: above 1 means slower with the spare), which the host's steal
time does not move. Also each repeat's own ratio (booted i over off i, the runs next to each other in time) with
their median and geometric mean, and what the parked spare itself did over its windows (CPU seconds, NVML's SM
samples for its pid).

    python bench/throughput_ratio.py OUT_DIR PREFIX     # reads OUT_DIR/PREFIX-{off,booted}-{1,2,3}.json
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    out, prefix = Path(argv[0]), argv[1]
    fps: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    steal: dict[str, list[float]] = {}
    windows: dict[str, list[list[int]]] = {}
    idle: list[str] = []
    for mode in ("off", "booted"):
        for path in sorted(out.glob(f"{prefix}-{mode}-*.json")):
            tp = json.loads(path.read_text()).get("throughput") or {}
            if tp.get("median_fps"):
                fps.setdefault(mode, []).append(tp["median_fps"])
                windows.setdefault(mode, []).append(tp.get("iterations"))
            if tp.get("trainer_cpu_seconds_per_iteration"):
                cpu.setdefault(mode, []).append(tp["trainer_cpu_seconds_per_iteration"])
                steal.setdefault(mode, []).append(tp.get("host_steal_share"))
            if mode == "booted" and tp.get("spare_cpu_seconds_in_window") is not None:
                sm = tp.get("gpu_sm_util_max_by_pid")
                spare_sm = None if sm is None else sm.get(str(tp.get("spare_pid")), "no samples")
                idle.append(f"{path.stem}: spare {tp['spare_cpu_seconds_in_window']} CPU s in "
                            f"{tp.get('window_seconds')} s, SM % max {spare_sm} (trainer "
                            f"{None if sm is None else sm.get(str(tp.get('trainer_pid')), 'no samples')})")
    print("median Perf/total_fps per repeat:", fps)
    print("iterations measured per repeat:", windows)
    if not (fps.get("off") and fps.get("booted")):
        print("no ratio: a mode has no figure")
        return 1
    off, booted = statistics.median(fps["off"]), statistics.median(fps["booted"])
    print(f"booted spare parked / no spare: {booted / off:.3f}x (medians {booted} / {off})")
    pairs = [b / o for o, b in zip(fps["off"], fps["booted"])]
    print(f"per repeat (booted i / off i): {[round(r, 3) for r in pairs]}; median {statistics.median(pairs):.3f}x, "
          f"geometric mean {statistics.geometric_mean(pairs):.3f}x")
    for line in idle:
        print(line)
    if cpu.get("off") and cpu.get("booted"):
        c_off, c_booted = statistics.median(cpu["off"]), statistics.median(cpu["booted"])
        print("trainer CPU seconds per iteration per repeat:", cpu, "host steal share:", steal)
        print(f"CPU time per iteration, no spare / booted spare parked: {c_off / c_booted:.3f}x "
              f"(medians {c_off} / {c_booted} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
