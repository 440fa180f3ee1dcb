#!/usr/bin/env bash
# Issue 41's GPU benchmark on the device machine (H100 or H200): the real Isaac Lab 3.0 cart-pole trained by a real
# `isaacd run` ([gpu] source = "nvml"), checkpoint evaluations beside it on the same GPU (gpu_memory) or on the host's
# CPUs, against none, arms alternated in one run by `isaacd reload` (bench/eval_beside.py's docstring says how).
# The wheels travel as bench/isaaclab3_sweep_gpu.sh's header says (device-wheels.sh -> .dw1 .. .dw5, PARTS=5 since
# 2026-12-06 11:01: 5 parts of 48 MB), then `run` calls back to back on one warm machine (timeout_s = 600):
#   1..4. carry=[".dwK"]  command: PARTS=5 bash bench/isaaclab3_eval_gpu.sh stash
#   5.    carry=[".dw5"]  command: PARTS=5 bash bench/isaaclab3_eval_gpu.sh bench   # install, warm-up, the bench
# `bench`: none / gpu / cpu windows x 3 and a last none, then one more gpu window with [jobs.eval] video = true (not a
# measured arm): whether Isaac Lab 3.0 kit-less renders here (an MP4 and GIF in the result JSON) or why not
# (video_reason). `video` (a later call on the warm machine): that probe alone, with a longer window.
# (2026-12-06 on an H100: calls 1-4 ~5 s each, the first with the machine's start ~26 s of device time; call 5
# 425 s: install 17 s, warm-up 96 s, the bench 312 s with --window 25, 3 repeats, a 40 s video window.) On a machine that installed already (/tmp/il3h200/installed,
# ~/.cache/warp: another bench's calls) the stash calls are skipped. A call after the first that reports warm: false
# ran on a new machine: start again from 1.
# EVAL_ARGS: more bench/eval_beside.py flags for `bench` (e.g. "--window 40 --repeats 4"); VIDEO_ARGS for `video`;
# BUDGET (575 s) is what the call may take. Each call writes $OUT/eval-gpu.log (timestamped) and the bench's
# issue41-eval-beside-gpu{,-video}.{txt,json}. Results: bench/results/issue41-eval-beside-gpu.{txt,json}.
set -uo pipefail
MODE=${1:-bench}
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-/tmp/isaaclab3-eval-gpu-out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/eval-gpu.log") 2>&1
TEE=$!
trap 'exec 1>&- 2>&-; wait "$TEE" 2>/dev/null' EXIT
T0=$(date +%s); BUDGET=${BUDGET:-575}
export PARTS=${PARTS:-5}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
log() { printf '\n=== [%s +%ss] %s\n' "$(date +%T)" "$(( $(date +%s) - T0 ))" "$*"; }
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
PY=$(command -v python3)

log "isaaclab3_eval_gpu.sh $MODE in $REPO ($(git -C "$REPO" log -1 --format='%h' 2>/dev/null)); OUT=$OUT; PARTS=$PARTS"
nvidia-smi --query-gpu=index,name,memory.total,memory.used,driver_version --format=csv,noheader 2>&1 | head -2
nproc; uptime

ready() {  # installed and warmed up here (this call or an earlier one on this warm machine)
  if [ ! -f /tmp/il3h200/installed ] || [ ! -d "$HOME/.cache/warp" ]; then
    BUDGET=$(( $(left) - 200 )) OUT=$OUT/h200 bash "$REPO/bench/isaaclab3_h200.sh" prepare || return 1
  fi
  [ -f /tmp/il3h200/installed ] || { echo "FATAL: not installed"; return 1; }
  # tests/helpers.py's SupervisorProc starts <python's bin>/isaacd, which the device's image has not (isaacd lives in
  # /tmp/site): a two-line wrapper there
  local b; b=$(dirname "$PY")
  [ -e "$b/isaacd" ] || { printf '#!/bin/sh\nexec %s -m isaacd "$@"\n' "$PY" > "$b/isaacd" && chmod +x "$b/isaacd"; }
}

eval_bench() {  # $1 the result name, then bench/eval_beside.py flags
  local name=$1; shift
  log "bench/eval_beside.py --out $OUT/$name $*"
  (cd "$REPO" && $PY bench/eval_beside.py --isaaclab --python "$PY" --device cuda:0 --gpu-source nvml \
     --num-envs "${NUM_ENVS:-4096}" --out "$OUT/$name" "$@" 2>&1)
  local rc=$?
  log "eval_beside rc $rc"
  nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader
  return "$rc"
}

videos() {  # an MP4 / GIF an evaluation wrote, back in $OUT (small ones), then the work dirs go
  local f
  for f in $(find /tmp/eval-beside-* \( -name '*.mp4' -o -name '*.gif' \) 2>/dev/null | head -4); do
    ls -la "$f"; [ "$(stat -c %s "$f")" -lt 8000000 ] && cp "$f" "$OUT/"
  done
  rm -rf /tmp/eval-beside-*
}

case "$MODE" in
  stash)
    BUDGET=60 OUT=$OUT/h200 bash "$REPO/bench/isaaclab3_h200.sh" stash ;;
  bench)  # (the last part,) the install and warm-up, then none / gpu / cpu x 3, none, and a last gpu window with video
    ready || exit 1
    eval_bench issue41-eval-beside-gpu --arms gpu cpu --repeats 3 --window 25 --save-interval 50 --video-window 40 \
      --video-length 100 --keep ${EVAL_ARGS:-}
    videos ;;
  video)  # only the video probe: none, a gpu window with video = true, none
    ready || exit 1
    eval_bench issue41-eval-beside-gpu-video --arms gpu --repeats 1 --window 45 --none-window 5 --save-interval 50 \
      --video --video-length 100 --keep ${VIDEO_ARGS:-}
    videos ;;
  *) echo "usage: $0 stash|bench|video"; exit 2 ;;
esac
rc=$?
log "done ($MODE) rc $rc; $OUT: $(ls "$OUT" | tr '\n' ' ')"
exit "$rc"
