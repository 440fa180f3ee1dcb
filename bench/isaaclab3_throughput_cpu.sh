#!/usr/bin/env bash
# Issue 21's throughput goal on this machine's CPUs: the real Isaac Lab 3.0 (kit-less, .venv-isaaclab3 from
# scripts/install.sh, Python 3.11 installed with --ignore-requires-python) under isaacd's process runtime,
# device = "cpu", 16 envs; three alternating repeats of no spare / a booted spare parked, each measuring
# Perf/total_fps over the same iterations (--throughput-from). Keep the machine quiet while it runs (~9 min on 2 cores).
#
#   bash bench/isaaclab3_throughput_cpu.sh [OUT_DIR]
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$REPO/bench/results/issue21-cpu-throughput}; mkdir -p "$OUT"
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
for i in 1 2 3; do
  for mode in off booted; do
    "$REPO/.venv/bin/python" "$REPO/bench/isaaclab3_recovery.py" --python "$REPO/.venv-isaaclab3/bin/python" \
      --device cpu --runtime process --num-envs "${NUM_ENVS:-16}" --max-iterations 400 --save-interval 25 \
      --spare "$mode" --throughput-iterations "${TP_IT:-40}" --throughput-from "${TP_FROM:-90}" \
      --workdir "$W" --out "$OUT/throughput-$mode-$i.json" > "$OUT/throughput-$mode-$i.txt" 2>&1
    grep -h "throughput: {" "$OUT/throughput-$mode-$i.txt" || tail -5 "$OUT/throughput-$mode-$i.txt"
  done
done
"$REPO/.venv/bin/python" "$REPO/bench/throughput_ratio.py" "$OUT" throughput | tee "$OUT/summary.txt"
