#!/usr/bin/env bash
# Issue 42 on the device machine (H100 or H200): a preemption hands the GPU over at the victim's save, not at its
# exit. bench/queue_h200.py's phases (1)-(3) (--until preempt): a alone, then a, b and c packed on the one GPU by
# gpu_memory, then `urgent` (priority 10) preempts one of them; submit -> urgent's first iteration against urgent's own
# launch -> first iteration (goal: <= launch + 1 s). The arms, each a fresh `isaacd run`, real Isaac Lab 3.0:
#   kill   this checkout; the victims run with ISAACD_SHIM_FAST_EXIT=0 (Isaac Lab's own teardown after the save,
#          as a W&B logger, a live thread or Kit keep it): isaacd kills the victim at its save
#   quick  this checkout; the shim's quick exit (the default): the victim exits ~0.1 s after its save by itself
#   base   this checkout with the kill switched off (the issue 42 edge, jobs/machine.py `_stop_saved`, made a no-op in
#          a copy under /tmp/base), ISAACD_SHIM_FAST_EXIT=0: the hand-over waits for the teardown, as before issue 42
# The wheels travel as bench/isaaclab3_sweep_gpu.sh's header says (5 parts, PARTS=5). Calls back to back, one warm
# machine:  1-4. carry=[".dwN"] command: PARTS=5 bash bench/issue42_handover_gpu.sh stash
#           5.   carry=[".dw5"] command: PARTS=5 ARMS="kill base quick" bash bench/issue42_handover_gpu.sh arms
# Device time, 2026-12-06 on an H100 (counted from the machine's start): the start ~176 s, stash calls ~6 s each,
# install ~26 s, then Warp's first kernel compile ~100 s (the warm-up, if BUDGET leaves it the time, else the first
# arm's first launch), then ~75 s an arm (the preemption is reached ~50 s in): about 580 s for all three arms, so
# give call 5 BUDGET=575 (its default) and timeout_s 600. (5 installs and warms Isaac Lab up first.) QARGS: more
# bench/queue_h200.py arguments (default: 25 GiB each on an H100, 40 GiB on an H200, so 3 fit and a 4th does not;
# 10-iteration windows). Results: $OUT/issue42-<arm>.{json,txt}, the log $OUT/handover.log.
# Session 19 (2026-12-06, an H100 warm from bench/isaaclab3_eval_gpu.sh's calls: installed, Warp's cache warm): an arm
# took 54-61 s, and queue_h200.py skips the preemption when less than ~37 s of its --deadline are left ~43 s in, so
# give each arm >= 85 s: BUDGET = 30 + 85 x arms (ARMS="kill base" BUDGET=270 took 108 s). Return at most ~8 files
# from $OUT a call (the device returns a limited count): one or two arms a call.
set -uo pipefail
MODE=${1:-arms}
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-/tmp/issue42-out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/handover.log") 2>&1
TEE=$!
trap 'exec 1>&- 2>&-; wait "$TEE" 2>/dev/null' EXIT
T0=$(date +%s); BUDGET=${BUDGET:-575}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
log() { printf '\n=== [%s +%ss] %s\n' "$(date +%T)" "$(( $(date +%s) - T0 ))" "$*"; }
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
PY=$(command -v python3)
W=/var/tmp/il3h42; mkdir -p "$W"
# each job's ask: 3 fit the GPU, a 4th does not (25 GiB on an 80 GB H100, 40 GiB on a 141 GB H200)
MIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
ASK=25GiB; [ "${MIB:-0}" -gt 110000 ] && ASK=40GiB
QARGS=${QARGS:---gpu-memory $ASK --window 10 --max-iterations 400 --urgent-iterations 5}

log "issue42_handover_gpu.sh $MODE in $REPO; OUT=$OUT; uptime: $(uptime)"
nvidia-smi --query-gpu=index,name,memory.total,memory.used,driver_version --format=csv,noheader 2>&1 | head -2

base_site() {  # /tmp/base-site: isaacd and isaacd_trainer of a copy of this checkout with the issue 42 kill off
  rm -rf /tmp/base /tmp/base-site && mkdir -p /tmp/base /tmp/base-site
  cp -r "$REPO/daemon" "$REPO/trainer" /tmp/base/
  local edge='    if m.state != S.STOPPING or stop is None or stop.killed or not hands_over(stop):'
  grep -qF "$edge" /tmp/base/daemon/jobs/machine.py || { echo "FATAL: the edge's guard is not in machine.py"; return 1; }
  sed -i "s/^$edge\$/    if True:  # issue 42 switched off (bench base arm)/" /tmp/base/daemon/jobs/machine.py
  grep -n "issue 42 switched off" /tmp/base/daemon/jobs/machine.py
  ln -s /tmp/base/daemon /tmp/base-site/isaacd && ln -s /tmp/base/trainer /tmp/base-site/isaacd_trainer
}

arm() {  # $1 kill|quick|base
  local name=$1 budget fast=off pp=$PYTHONPATH; budget=$(( $(left) - 30 ))
  if [ "$budget" -lt "${MIN_ARM:-100}" ]; then echo "SKIP $name: only $budget s left in this call"; return 1; fi
  [ "$name" = quick ] && fast=on
  if [ "$name" = base ]; then base_site || return 1; pp=/tmp/base-site:$PYTHONPATH
  else  # this checkout as it is (pip's copy in /tmp/site holds only the packages pyproject lists)
    rm -rf /tmp/cur-site && mkdir -p /tmp/cur-site && ln -s "$REPO/daemon" /tmp/cur-site/isaacd \
      && ln -s "$REPO/trainer" /tmp/cur-site/isaacd_trainer && pp=/tmp/cur-site:$PYTHONPATH
  fi
  log "arm $name: bench/queue_h200.py --until preempt --fast-exit $fast $QARGS (deadline $budget s)"
  PYTHONPATH=$pp $PY -c 'import isaacd, isaacd_trainer; print("isaacd at", isaacd.__file__, isaacd_trainer.__file__)'
  PYTHONPATH=$pp $PY "$REPO/bench/queue_h200.py" --python "$PY" --device cuda --until preempt --fast-exit "$fast" \
    --asset-root "$REPO/tests/isaaclab3/asset_root" --workdir "$W/$name" --deadline "$budget" \
    --out "$OUT/issue42-$name.json" $QARGS 2>&1 | tee "$OUT/issue42-$name.txt"
  log "arm $name rc ${PIPESTATUS[0]}"
  nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader
}

case "$MODE" in
  stash) BUDGET=60 OUT=$OUT/h200 bash "$REPO/bench/isaaclab3_h200.sh" stash ;;
  arms)
    if [ ! -f /tmp/il3h200/installed ] || [ ! -d "$HOME/.cache/warp" ]; then
      BUDGET=$(( $(left) - 200 )) OUT=$OUT/h200 bash "$REPO/bench/isaaclab3_h200.sh" prepare || exit 1
    fi
    for a in ${ARMS:-kill base quick}; do arm "$a"; done ;;
  *) echo "usage: $0 stash|arms"; exit 2 ;;
esac
log "done ($MODE); $OUT: $(ls "$OUT" | tr '\n' ' ')"
