#!/usr/bin/env bash
# Issue 40's GPU benchmarks on the device machine (H100 or H200), the real Isaac Lab 3.0 cart-pole:
#   outcome: PBT against the same members trained independently (bench/pbt_vs_independent.py: 8 members packed by
#            gpu_memory on the one GPU, a real `isaacd run` with [gpu] source = "nvml"; both arms in one call);
#   cost:    the exploit cost, booted spare against cold start (bench/pbt_exploit_cost.py on the GPU).
# The wheels travel as bench/isaaclab3_sweep_gpu.sh's header says (device-wheels.sh -> .dw1 .. .dwN, PARTS of them:
# 5 parts of 48 MB since 2026-12-06 11:01), then `run` calls back to back on one warm machine (timeout_s = 600):
#   1..N-1. carry=[".dwK"]  command: PARTS=5 bash bench/isaaclab3_pbt_gpu.sh stash
#   N.      carry=[".dwN"]  command: PARTS=5 bash bench/isaaclab3_pbt_gpu.sh outcome  # install, warm-up, both arms
#   N+1.                    command: PARTS=5 bash bench/isaaclab3_pbt_gpu.sh cost
#        (2026-12-06 on an H100: outcome 357 s with the install and warm-up, 222 s without; cost 166 s with
#        COST_ARGS="--rounds 1 --num-envs 256 --interval 300 --exploits 2 --round-limit 170")
# On a warm machine that installed already (/tmp/il3h200/installed, ~/.cache/warp: another bench's calls) the stash
# calls are skipped. A call after the first that reports warm: false ran on a new machine: start again from 1.
# PBT_ARGS: more bench/pbt_vs_independent.py flags (e.g. "--seeds 8 --max-iterations 120"); COST_ARGS likewise for
# bench/pbt_exploit_cost.py; BUDGET (575 s) is what the call may take. Each call writes $OUT/pbt-gpu.log
# (timestamped), the arms' JSON and text, and -state.tar.gz of the newest work dir (journals, shim events; no
# checkpoints, no TensorBoard). Results: bench/results/issue40-pbt-vs-independent-gpu.*, issue40-exploit-cost-gpu.*.
set -uo pipefail
MODE=${1:-outcome}
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-/tmp/isaaclab3-pbt-gpu-out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/pbt-gpu.log") 2>&1
TEE=$!
trap 'exec 1>&- 2>&-; wait "$TEE" 2>/dev/null' EXIT
T0=$(date +%s); BUDGET=${BUDGET:-575}
export PARTS=${PARTS:-5}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
log() { printf '\n=== [%s +%ss] %s\n' "$(date +%T)" "$(( $(date +%s) - T0 ))" "$*"; }
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
PY=$(command -v python3)
W=/var/tmp/il3pbt; mkdir -p "$W"

log "isaaclab3_pbt_gpu.sh $MODE in $REPO; OUT=$OUT; PARTS=$PARTS"
nvidia-smi --query-gpu=index,name,memory.total,memory.used,driver_version --format=csv,noheader 2>&1 | head -2

ready() {  # installed and warmed up here (this call or an earlier one on this warm machine)
  if [ ! -f /tmp/il3h200/installed ] || [ ! -d "$HOME/.cache/warp" ]; then
    BUDGET=$(( $(left) - 200 )) OUT=$OUT/h200 bash "$REPO/bench/isaaclab3_h200.sh" prepare || return 1
  fi
  [ -f /tmp/il3h200/installed ] || { echo "FATAL: not installed"; return 1; }
}

keep_state() {  # $1 a work dir prefix, $2 a name: the newest run's state as a tarball into $OUT
  local last; last=$(ls -dt "$1"* 2>/dev/null | head -1)
  [ -n "$last" ] && tar -C "$last" --exclude='*.pt' --exclude='events.out.tfevents.*' -czf "$OUT/$2-state.tar.gz" . \
    2>/dev/null
}

case "$MODE" in
  stash)
    BUDGET=60 OUT=$OUT/h200 bash "$REPO/bench/isaaclab3_h200.sh" stash ;;
  outcome)
    ready || exit 1
    n=$(echo ${ARMS:-pbt independent} | wc -w)
    per=$(( ($(left) - 60) / n ))  # each arm's deadline: past it the sweep is cancelled and reported so far
    log "bench/pbt_vs_independent.py, both arms, deadline $per s each; ${PBT_ARGS:-}"
    $PY "$REPO/bench/pbt_vs_independent.py" --python "$PY" --device cuda --arms ${ARMS:-pbt independent} \
      --deadline "$per" --workdir "$W" --out "$OUT/issue40-pbt-gpu.json" ${PBT_ARGS:-} 2>&1 \
      | tee "$OUT/issue40-pbt-gpu.txt"
    rc=${PIPESTATUS[0]}
    keep_state "$W/isaacd-il3-process-" issue40-pbt-gpu-last
    nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader
    ;;
  cost)
    ready || exit 1
    # tests/helpers.py's SupervisorProc starts <python's bin>/isaacd, which the device's image has not (isaacd lives
    # in /tmp/site): a two-line wrapper there
    B=$(dirname "$PY")
    [ -e "$B/isaacd" ] || { printf '#!/bin/sh\nexec %s -m isaacd "$@"\n' "$PY" > "$B/isaacd" && chmod +x "$B/isaacd"; }
    log "bench/pbt_exploit_cost.py on the GPU; ${COST_ARGS:-}"
    script=${COST_SCRIPT:-$REPO/bench/pbt_exploit_cost.py}  # another copy of it: COST_SCRIPT (results beside it)
    $PY "$script" --python "$PY" --device cuda --gpu-source nvml \
      --out issue40-exploit-cost-gpu ${COST_ARGS:-} 2>&1 | tee "$OUT/issue40-exploit-cost-gpu.log"
    rc=${PIPESTATUS[0]}
    cp "$(dirname "$script")"/results/issue40-exploit-cost-gpu.* "$OUT"/ 2>/dev/null
    ;;
  *) echo "usage: $0 stash|outcome|cost"; exit 2 ;;
esac
rc=${rc:-$?}
log "done ($MODE) rc $rc; $OUT: $(ls "$OUT" | tr '\n' ' ')"
exit "$rc"
