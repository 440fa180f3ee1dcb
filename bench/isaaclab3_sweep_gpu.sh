#!/usr/bin/env bash
# Issue 39's GPU benchmark on the device machine (H100 or H200): a sweep of the real Isaac Lab 3.0 cart-pole, 8 trials
# packed by gpu_memory on the one GPU, run by a real `isaacd run` with [gpu] source = "nvml" (bench/sweep_gpu.py),
# with ASHA, then the same sweep file and seed with every trial to the end (kind = "none") for the GPU-seconds ratio.
#
# The wheels travel as issue 19/21/31 carried them (bench/isaaclab3_h200.sh's header): in this checkout's root,
#   echo /.il3whl/ >> .git/info/exclude; python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .il3whl \
#     pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
#     typing_extensions==4.16.0 structlog==26.1.0 prometheus_client==0.26.0 nvidia-ml-py==13.615.71
#   device-wheels.sh bench/isaaclab3-h200-wheels.txt .il3whl   # the workplace's shared tools; -> .dw1 .. .dw4
# A run call carries at most 64 MiB with the tracked tree (6.7 MB on 2026-12-06): 4 parts of 58 MB no longer fit, so
# the tar was split in 5 (split -d -a 2 -n 5 .dw/wheels.tar part -> part00..part04 into .dw1..dw5) and every call
# sets PARTS=5. Then `run` calls back to back on one warm machine (each timeout_s = 600; /tmp there keeps the parts):
#   1-4. carry=[".dwN"]  command: PARTS=5 bash bench/isaaclab3_sweep_gpu.sh stash
#   5.   carry=[".dw5"]  command: PARTS=5 bash bench/isaaclab3_sweep_gpu.sh asha    # install, warm-up, the ASHA arm
#   6.                   command: PARTS=5 bash bench/isaaclab3_sweep_gpu.sh none    # every trial to the end, ratios
# A call after the first that reports warm: false ran on a new machine (empty /tmp): start again from call 1.
# Each call writes $OUT/sweep-gpu.log (timestamped); the arms $OUT/issue39-gpu-sweep-<kind>.{json,txt} and
# -state.tar.gz (the supervisor's journals, sweep record, shim events and logs; no checkpoints, no TensorBoard).
# Sweep settings (bench/sweep_gpu.py's flags) through SWEEP_ARGS, e.g. SWEEP_ARGS="--max-iterations 200"; BUDGET (575 s)
# is what the call may take. On a warm, installed machine one call can run both arms of a repeat:
#   SWEEP_ARGS="--seed 8"; BUDGET=280 bash bench/isaaclab3_sweep_gpu.sh asha; BUDGET=285 bash ... none
# (2026-12-06 on an H100: 8 trials ~85 s ASHA, ~120 s none; 16 trials ~150 s / ~250 s; install + warm-up ~125-140 s;
# 27 trials, 108 iterations, SWEEP_ARGS="--trials 27 --concurrency 8 --eta 3 --max-iterations 108 --rungs 12,36
# --seed 1": ~130 s ASHA, ~275 s none.)
# Results: bench/results/issue39-gpu-sweep.{txt,json}, issue39-gpu-sweep-27t.txt (-asha.json, -none.json).
set -uo pipefail
MODE=${1:-asha}
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-/tmp/isaaclab3-sweep-gpu-out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/sweep-gpu.log") 2>&1
TEE=$!
trap 'exec 1>&- 2>&-; wait "$TEE" 2>/dev/null' EXIT
T0=$(date +%s); BUDGET=${BUDGET:-575}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
log() { printf '\n=== [%s +%ss] %s\n' "$(date +%T)" "$(( $(date +%s) - T0 ))" "$*"; }
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
PY=$(command -v python3)
W=/var/tmp/il3sweep; mkdir -p "$W"

log "isaaclab3_sweep_gpu.sh $MODE in $REPO ($(git -C "$REPO" log -1 --format='%h' 2>/dev/null)); OUT=$OUT"
nvidia-smi --query-gpu=index,name,memory.total,memory.used,driver_version --format=csv,noheader 2>&1 | head -2

arm() {  # $1 asha|none: bench/sweep_gpu.py, its deadline what this call has left less the collection's time
  local kind=$1 budget; budget=$(( $(left) - 45 ))
  if [ "$budget" -lt 120 ]; then echo "SKIP $kind: only $budget s left in this call"; return 1; fi
  log "bench/sweep_gpu.py --kind $kind ${SWEEP_ARGS:-} (deadline $budget s)"
  $PY "$REPO/bench/sweep_gpu.py" --python "$PY" --kind "$kind" --workdir "$W/$kind" --deadline "$budget" \
    --out "$OUT/issue39-gpu-sweep-$kind.json" ${SWEEP_ARGS:-} 2>&1 | tee "$OUT/issue39-gpu-sweep-$kind.txt"
  local rc=${PIPESTATUS[0]} last
  log "$kind arm rc $rc"
  last=$(ls -dt "$W/$kind"/isaacd-il3-* 2>/dev/null | head -1)
  [ -n "$last" ] && tar -C "$last" --exclude='*.pt' --exclude='events.out.tfevents.*' \
    -czf "$OUT/issue39-gpu-sweep-$kind-state.tar.gz" . 2>/dev/null
  nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader
  return "$rc"
}

case "$MODE" in
  stash)  # one wheel part into /tmp/dw (isaaclab3_h200.sh's own step)
    BUDGET=60 OUT=$OUT/h200 bash "$REPO/bench/isaaclab3_h200.sh" stash ;;
  asha)  # the last part, the install, a 2-iteration warm-up (Warp's kernel cache, bytecode: the trials' launches
    # are then those of a server that has run Isaac Lab before, in both arms alike), then the ASHA arm
    if [ ! -f /tmp/il3h200/installed ] || [ ! -d "$HOME/.cache/warp" ]; then
      BUDGET=$(( $(left) - 200 )) OUT=$OUT/h200 bash "$REPO/bench/isaaclab3_h200.sh" prepare || exit 1
    fi
    arm asha ;;
  none)
    [ -f /tmp/il3h200/installed ] || { echo "FATAL: not installed here (a new machine?): start again from call 1"; exit 1; }
    arm none
    if [ -f "$W/asha.json" ] && [ -f "$OUT/issue39-gpu-sweep-none.json" ]; then  # the ASHA arm of call 4, same machine
      $PY "$REPO/bench/sweep_gpu.py" --compare "$W/asha.json" "$OUT/issue39-gpu-sweep-none.json" \
        | tee "$OUT/issue39-gpu-sweep-compare.txt"
    fi ;;
  *) echo "usage: $0 stash|asha|none"; exit 2 ;;
esac
rc=$?
[ -f "$OUT/issue39-gpu-sweep-asha.json" ] && cp "$OUT/issue39-gpu-sweep-asha.json" "$W/asha.json"  # for `none`'s ratios
log "done ($MODE) rc $rc; $OUT: $(ls "$OUT" | tr '\n' ' ')"
exit $rc
