#!/usr/bin/env bash
# Issue 41's GPU benchmark on the device machine (H100 or H200): the real Isaac Lab 3.0 cart-pole trained by a real
# `isaacd run` ([gpu] source = "nvml"), checkpoint evaluations beside it on the same GPU (gpu_memory) or on the host's
# CPUs, against none, arms alternated in one run by `isaacd reload` (bench/eval_beside.py's docstring says how).
# The wheels travel as bench/isaaclab3_sweep_gpu.sh's header says (device-wheels.sh -> .dw1 .. .dw5, PARTS=5 since
# 2026-12-06 11:01: 5 parts of 48 MB), then `run` calls back to back on one warm machine (timeout_s = 600):
#   1..4. carry=[".dwK"]  command: PARTS=5 bash bench/isaaclab3_eval_gpu.sh stash
#   5.    carry=[".dw5"]  command: PARTS=5 bash bench/isaaclab3_eval_gpu.sh bench   # install, warm-up, the bench
# `bench` (since session 23): `gpu` at the default pacing (0.005 since session 23), each window one whole pacing
# cycle (--cycles 1; 48 s on session 22's H100, ~170 s on session 23's), 2 repeats, no eval window started that
# could not end within the call's BUDGET (--time-limit). At ~170 s a cycle the install and warm-up (~165 s) leave too
# little in the same call: then call 6 is `prepare` (carrying .dw6) and call 7 `bench` on the warm machine; session 23 ran the form below with EVAL_ARGS="--repeats 2" (runs 1-2) and
# "--arms gpu --repeats 4" (run 3): bench/results/issue41-eval-pacing-gpu.txt.
# Before (session 22): at [jobs.eval]'s default every = 1, `gpu@0` (max_training_cost = 0: no pacing, an
# evaluation beside training ~all the time at the cart-pole's save_interval 50, the worst case; 30 s windows) against
# `gpu` (the default pacing, 1 % on the GPU; 62 s windows, each holding a few evaluations), a none window before each
# and a last one, 3 repeats, the trainer pinned to vCPU 6 once it trains (--pin-trainer: session 19's unpinned windows
# moved +-5-7 %, session 22's pinned ones 0.4 %); no video window. Session 22 ran EVAL_ARGS="--arms gpu gpu5
# --repeats 3 --pin-trainer 6" before the pacing existed (gpu was then unpaced: its run 9). A call with the install
# and warm-up holds 2 repeats (EVAL_ARGS="--repeats 2"), a warm machine's 3. `video` (a later call on
# the warm machine): a gpu window with video = true. `video-newton` (carrying .dw6: the wheels Newton's GL viewer and
# Isaac Lab's recorder need, which the kit-less install lacks: pyglet, moviepy 1.0.3, imageio, imageio-ffmpeg,
# proglog, decorator, tqdm): whether EGL opens here, then one evaluation through the shim on the warm-up's checkpoint
# with ISAACD_EVAL_VIDEO (the shim names --viz newton_gl itself), then, if BUDGET leaves the time, `video` with them.
# The device's copy of the tree has a stale .git (on 2026-12-06 its HEAD said 61c78b1 while the files were those of
# abcc020): the results' "checkout" names that stale commit; write the local HEAD at the call into the results by hand.
# The copy also holds the other engineers' uncommitted edits of the shared working tree (say which in the results).
# Session 19 on a warm H100 (one machine, no refused start): calls 1-4 ~0.3 s each (the first with the start ~87 s of
# device time), bench 458 s (install 22 s, warm-up 101 s, the bench 333 s with 2 repeats; EVAL_ARGS="--repeats 3" on
# the warm machine: 474 s), video-newton 37 s (the shim's evaluation alone) or 102 s with the daemon's video window.
# video-newton also needs EGL's loader: the device image has NVIDIA's EGL vendor library (libEGL_nvidia.so.0,
# /usr/share/glvnd/egl_vendor.d/10_nvidia.json, NVIDIA_DRIVER_CAPABILITIES with graphics) but not glvnd's libEGL.so.1 /
# libGL.so.1 that pyglet loads: .dw6/lib carries Debian 12's libEGL.so.1, libGL.so.1, libGLX.so.0, libGLdispatch.so.0
# and libOpenGL.so.0 (vendor-neutral), put on LD_LIBRARY_PATH here. .dw6 (git-ignored, ~31 MB) is made here with:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 --platform any \
#     -d .dw6 "pyglet>=2.1.6,<3" "imageio<3" imageio-ffmpeg "proglog<=1.0.0" "decorator<5" tqdm
#   pip wheel --no-deps -w .dw6 moviepy==1.0.3; mkdir .dw6/lib; cp -L /lib/x86_64-linux-gnu/lib{EGL.so.1,GL.so.1,\
#     GLX.so.0,GLdispatch.so.0,OpenGL.so.0} .dw6/lib/
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
lscpu 2>/dev/null | grep -E '^(Thread|Core|Socket|NUMA node\(s\)|Model name)' | tr -s ' '
echo "SMT siblings: $(cat /sys/devices/system/cpu/cpu{0,1,2,3}/topology/thread_siblings_list 2>/dev/null | tr '\n' ' ')"

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

newton_video() {
  log "the wheels for Newton's GL viewer and the recorder (.dw6) into /tmp/vsite"
  ls "$REPO"/.dw6/*.whl >/dev/null 2>&1 || { echo "FATAL: carry .dw6"; return 1; }
  $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/vsite "$REPO"/.dw6/*.whl 2>&1 | tail -3
  export PYTHONPATH=/tmp/vsite:$PYTHONPATH
  [ -d "$REPO/.dw6/lib" ] && export LD_LIBRARY_PATH=$REPO/.dw6/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  echo "EGL: $(ldconfig -p | grep -c -i egl) libEGL entries: $(ldconfig -p | grep -i -E 'libEGL(_nvidia)?\.so' | awk '{print $1}' | tr '\n' ' ')"
  ls /usr/share/glvnd/egl_vendor.d/ 2>&1 | head -3; echo "NVIDIA_DRIVER_CAPABILITIES=${NVIDIA_DRIVER_CAPABILITIES:-unset} DISPLAY=${DISPLAY:-unset}"
  unset DISPLAY
  timeout 30 $PY - <<'PYEOF' 2>&1 | tail -4
import pyglet
pyglet.options["headless"] = True
w = pyglet.window.Window(64, 64, visible=False)
from pyglet import gl
print("pyglet headless window ok; GL_RENDERER:", gl.gl_info.get_renderer(), "| GL_VERSION:", gl.gl_info.get_version())
w.close()
PYEOF
  local ck; ck=$(ls -t /var/tmp/il3h200/warmup/logs/rsl_rl/*/*/model_*.pt 2>/dev/null | head -1)
  [ -n "$ck" ] || { echo "FATAL: no warm-up checkpoint under /var/tmp/il3h200/warmup"; return 1; }
  local run it; run=$(dirname "$ck"); it=$(basename "$ck" .pt); it=${it#model_}; log "one evaluation with video through the shim: $ck (100 episodes on 100 envs, 100 steps)"
  (cd /var/tmp/il3h200/warmup && ISAACSIM_ASSET_ROOT="$REPO/tests/isaaclab3/asset_root" ISAACD_EVAL=1 \
    ISAACD_EVAL_CHECKPOINT="$ck" ISAACD_EVAL_ITERATION="$it" ISAACD_EVAL_EPISODES=100 ISAACD_EVAL_NUM_ENVS=100 \
    ISAACD_EVAL_SEED=42 ISAACD_EVAL_DEVICE=cuda:0 ISAACD_EVAL_RESULT="$ck.eval.json" ISAACD_EVAL_TB_DIR="$run/eval" \
    ISAACD_EVAL_VIDEO=100 ISAACD_EVAL_VIDEO_DIR="$run/eval/videos" OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 \
    timeout "${VIDEO_TIMEOUT:-100}" $PY "$REPO/trainer/shim.py" -m isaaclab train --rl_library rsl_rl \
      --task Isaac-Cartpole-Direct --num_envs 1024 --max_iterations 2 --device cuda:0 agent.device=cuda:0 \
      > "$OUT/video-newton-eval.log" 2>&1)
  log "evaluation rc $?"
  grep -E 'isaacd-eval|Video|video|Visualizer|EGL|pyglet|Error|error:|Traceback' "$OUT/video-newton-eval.log" | grep -v ALSA | head -30
  tail -5 "$OUT/video-newton-eval.log"
  $PY -c "import json,sys; d=json.load(open(sys.argv[1])); print({k: d.get(k) for k in ('return_mean','episodes','duration_seconds','device','video','gif','video_reason','error')})" "$ck.eval.json"
  ls -la "$run/eval/videos" 2>&1; cp "$run"/eval/videos/*.mp4 "$run"/eval/videos/*.gif "$OUT/" 2>/dev/null
  if [ "$(left)" -gt "${DAEMON_VIDEO_MIN:-110}" ] && ls "$run"/eval/videos/*.mp4 >/dev/null 2>&1; then
    eval_bench issue41-eval-beside-gpu-video --arms gpu --repeats 1 --window 45 --none-window 5 --save-interval 50 \
      --video --video-length 100 --keep ${VIDEO_ARGS:-}
    videos
  else echo "no time left for the daemon's video window (left $(left) s)"; fi
}

case "$MODE" in
  stash)
    BUDGET=60 OUT=$OUT/h200 bash "$REPO/bench/isaaclab3_h200.sh" stash ;;
  bench)  # (the last part,) the install and warm-up, then (none, gpu) x 2, none, the trainer pinned; gpu's windows
    # are whole pacing cycles (--cycles 1: an evaluation and its pause, 48-180 s on the H100s of sessions 22-23)
    ready || exit 1
    eval_bench issue41-eval-beside-gpu --arms gpu --cycles 1 --cycle-limit 240 --repeats 2 --window 30 \
      --none-window 25 --save-interval 50 --video-window 0 --pin-trainer 6 --time-limit $(( $(left) - 60 )) \
      ${EVAL_ARGS:-}
    videos ;;
  prepare)  # (the last part,) only the install and warm-up: then `bench` has a whole call for its windows
    ready ;;
  video)  # only the video probe: none, a gpu window with video = true, none
    ready || exit 1
    eval_bench issue41-eval-beside-gpu-video --arms gpu --repeats 1 --window 45 --none-window 5 --save-interval 50 \
      --video --video-length 100 --keep ${VIDEO_ARGS:-}
    videos ;;
  video-newton)  # carrying .dw6: Newton's GL viewer headless (EGL) records an evaluation's clip, through the shim
    ready || exit 1
    newton_video ;;
  *) echo "usage: $0 stash|prepare|bench|video|video-newton"; exit 2 ;;
esac
rc=$?
log "done ($MODE) rc $rc; $OUT: $(ls "$OUT" | tr '\n' ' ')"
exit "$rc"
