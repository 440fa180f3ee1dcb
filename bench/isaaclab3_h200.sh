#!/usr/bin/env bash
# The real Isaac Lab 3.0 (pip form) under isaacd on the H200, device = "cuda:0": bench/isaaclab3_recovery.py in the
# process runtime, then in Podman with CDI (nvidia.com/gpu=0, image "/:O"). Issue 19, item 4.
#
# The H200 has no network and takes at most 64 MiB per call (working tree + carry), so the wheels travel in four
# parts (the workplace's device-wheels.sh, from its shared tools, run as `device-wheels.sh
# bench/isaaclab3-h200-wheels.txt .il3whl`; the list is the one that worked on 2026-12-04, and .il3whl
# holds isaacd's own deps: pydantic, pydantic_core, annotated-types, typing-inspection, typing_extensions,
# structlog, prometheus_client, nvidia-ml-py, podman, requests, urllib3, idna, charset-normalizer, certifi) and
# Podman as Debian 12 .debs (.il3deb, the list in bench/gpu_container/README.md). /tmp on the H200 keeps what
# earlier calls left while the machine stays warm. Five calls, back to back, same kind (nvidia-h200), each
# timeout_s = 600 (this script keeps to BUDGET = 540 s per call):
#
#   1. run carry=[".dw1"]    command: bash bench/isaaclab3_h200.sh stash
#   2. run carry=[".dw2"]    command: bash bench/isaaclab3_h200.sh stash
#   3. run carry=[".dw3"]    command: bash bench/isaaclab3_h200.sh stash
#   4. run carry=[".dw4"]    command: bash bench/isaaclab3_h200.sh process   (installs into /tmp/site; process bench)
#   5. run carry=[".il3deb"] command: bash bench/isaaclab3_h200.sh podman    (Podman + CDI; podman bench)
#
# Issue 21's figures, after the three stash calls: `booted` (process runtime, kill -9 with a booted spare), `cpu`
# (the same on the host's CPUs, 16 envs), `throughput` (off / booted alternating, three repeats: the ratio), and
# with .il3deb carried `containers` (Podman + CDI, the job's own compile cache: no spare, then a booted spare
# container). The first of them carries .dw4 and installs.
# `throughput` takes TP_IT (iterations per window, 40), TP_FIRST..TP_LAST (repeats, 1..3) and TP_MODES (arm order,
# "off booted"); its first run pays Warp's kernel compile (~2 min on a new machine), the rest ~50 s each, so three
# repeats fit one call only with BUDGET raised (565 worked, 397 s). MIN_LEFT (120 s) is what a run needs to start.
#
# Issue 31's figures, after the three stash calls, carrying .dw4 (or on a warm machine that installed already):
# `queue` runs bench/queue_h200.py --device cuda ([gpu] source = "nvml"): job a alone (gpu_memory 40GiB), then a, b and
# c packed on the one GPU (3 x 40 GiB fit its 140 GiB, a 4th does not), then a priority-10 job that preempts one of
# them; every job to the end. QMAX_IT (500: a must still train when b and c are measured) and QWINDOW (40 iterations
# per rate window); extra arguments go to the bench. Results $OUT/isaaclab3-h200-queue.{json,txt} and -state.tar.gz.
# `prepare` (carrying .dw4, before `queue`) installs and runs Isaac Lab for 2 iterations once, so the queue bench
# times warm launches (Warp's kernel cache, bytecode), as on a server that has run Isaac Lab before.
#
# If a call after the first reports warm: false, the machine is new and /tmp is empty: start again from call 1.
# Each call writes $OUT/log (everything, timestamped); calls 4 and 5 also $OUT/isaaclab3-h200-<runtime>.json
# (the bench's results, rewritten after every phase), .txt (its table) and -state.tar.gz (the supervisor's journal,
# logs and shim events). `bash bench/isaaclab3_h200.sh all` with every part carried does 4 and 5 in one call
# (only if one call could carry everything: it cannot here).
set -uo pipefail
MODE=${1:-process}
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-/tmp/isaaclab3-h200-out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/log") 2>&1
TEE=$!
trap 'exec 1>&- 2>&-; wait "$TEE" 2>/dev/null' EXIT   # $OUT/log complete before the call returns
T0=$(date +%s); BUDGET=${BUDGET:-540}
PARTS=${PARTS:-4}                  # how many .dwN parts device-wheels.sh made (it printed "in 4 parts")
NUM_ENVS=${NUM_ENVS:-1024}; MAX_IT=${MAX_IT:-160}; KILLS=${KILLS:-2}; SAVE=${SAVE:-25}
DW=/tmp/dw; SITE=/tmp/site; ST=/tmp/il3h200; W=/var/tmp/il3h200
mkdir -p "$DW" "$ST" "$W"
log() { printf '\n=== [%s +%ss] %s\n' "$(date +%T)" "$(( $(date +%s) - T0 ))" "$*"; }
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
PY=$(command -v python3)

log "isaaclab3_h200.sh $MODE in $REPO ($(git -C "$REPO" log -1 --format='%h %s' 2>/dev/null | cut -c1-80)); OUT=$OUT"
uname -r; nproc; free -g | head -2; df -h /tmp /var/tmp 2>/dev/null | tail -2
nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.used --format=csv,noheader 2>&1 | head -2
echo "python3: $PY ($($PY -V 2>&1)); /tmp on $(findmnt -T /tmp -no TARGET,FSTYPE); repo on $(findmnt -T "$REPO" -no TARGET,FSTYPE)"

stash() {
  local n=0 d
  for d in "$REPO"/.dw[0-9]*; do
    [ -d "$d" ] || continue
    cp -n "$d"/* "$DW"/ && n=$((n + 1)) && echo "stashed $(ls "$d") from $(basename "$d")"
  done
  if [ -d "$REPO/.il3deb" ]; then
    mkdir -p "$ST/deb" && cp -n "$REPO"/.il3deb/*.deb "$ST/deb/" && echo "stashed $(ls "$ST/deb" | wc -l) .debs"
  fi
  echo "in $DW now: $(ls "$DW" 2>/dev/null | grep -c '^part') of $PARTS parts ($(du -sh "$DW" | cut -f1)); debs: $(ls "$ST/deb" 2>/dev/null | wc -l)"
}

install() {
  if [ -f "$ST/installed" ]; then echo "already installed into $SITE ($(cat "$ST/installed"))"; return 0; fi
  local have; have=$(ls "$DW" 2>/dev/null | grep -c '^part')
  if [ "$have" -lt "$PARTS" ]; then
    echo "FATAL: $have of $PARTS wheel parts in $DW: a new machine (warm: false)? Start again from call 1."; return 1
  fi
  log "unpacking and installing the wheels into $SITE"
  mkdir -p "$DW/whl" && cat "$DW"/part* | tar -x -C "$DW/whl" || { echo "FATAL: the wheel parts do not make a tar"; return 1; }
  echo "$(ls "$DW"/whl/*.whl | wc -l) wheels"
  $PY -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$DW"/whl/*.whl 2>&1 | grep -v -i warning | tail -5
  log "isaacd from this checkout into $SITE"
  $PY -m pip install -q --no-index --no-deps --no-build-isolation --target "$SITE" "$REPO" 2>&1 | tail -5
  if ! $PY -c 'import isaacd, isaacd_trainer, isaacd.workflows' 2>/dev/null; then
    echo "pip could not install the checkout (no setuptools?): linking its packages instead"
    rm -rf "$SITE/isaacd" "$SITE/isaacd_trainer"
    ln -s "$REPO/daemon" "$SITE/isaacd"; ln -s "$REPO/trainer" "$SITE/isaacd_trainer"
  fi
  # what `pip install` does by default (device-wheels' --no-compile saved the time here): bytecode, in parallel
  log "bytecode for $SITE (as pip install would write it)"
  timeout 120 $PY -m compileall -q -j 0 "$SITE" >/dev/null 2>&1; echo "compileall rc $?"
  $PY - <<'PYEOF' || echo "WARNING: an import failed (above); going on, the bench will say what breaks"
import importlib, importlib.metadata as m
for mod in ("isaacd", "isaacd_trainer", "isaaclab", "isaaclab_rl", "isaaclab_tasks", "rsl_rl", "warp", "newton",
            "mujoco", "pxr", "hydra", "pydantic", "structlog", "prometheus_client", "pynvml", "podman", "tensorboard",
            "torch"):
    importlib.import_module(mod)
import torch, isaacd
print("imports ok; isaaclab", m.version("isaaclab"), "torch", torch.__version__, "cuda", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-", "isaacd at", isaacd.__file__)
PYEOF
  date +%FT%T > "$ST/installed"
}

bench() {  # $1 runtime, then extra args; TAG names the result files (default: the runtime)
  local rt=$1; shift
  local tag=${TAG:-$rt}
  local budget; budget=$(( $(left) - 25 ))
  if [ "$budget" -lt "${MIN_LEFT:-120}" ]; then echo "SKIP $rt: only $budget s left in this call"; return 1; fi
  log "bench/isaaclab3_recovery.py --runtime $rt --device ${DEVICE:-cuda:0} --num-envs $NUM_ENVS --max-iterations $MAX_IT --kills $KILLS $* (deadline $budget s)"
  $PY "$REPO/bench/isaaclab3_recovery.py" --python "$PY" --device "${DEVICE:-cuda:0}" --runtime "$rt" --num-envs "$NUM_ENVS" \
    --max-iterations "$MAX_IT" --save-interval "$SAVE" --kills "$KILLS" --asset-root "$REPO/tests/isaaclab3/asset_root" \
    --workdir "$W" --deadline "$budget" --out "$OUT/isaaclab3-h200-$tag.json" "$@" 2>&1 | tee "$OUT/isaaclab3-h200-$tag.txt"
  local rc=${PIPESTATUS[0]}
  log "$rt bench rc $rc"
  keep_state "$W/isaacd-il3-$rt" "$tag"
  nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader
  return "$rc"
}

keep_state() {  # $1 a bench's work dir prefix, $2 the tag: its newest run's state, as a tarball into $OUT
  local last; last=$(ls -dt "$1"-* 2>/dev/null | head -1)
  if [ -n "$last" ]; then  # the supervisor's journal, logs, shim events and config; no checkpoints
    tar -C "$last" --exclude='*.pt' --exclude='events.out.tfevents.*' -czf "$OUT/isaaclab3-h200-$2-state.tar.gz" . 2>/dev/null
    ls -la "$OUT/isaaclab3-h200-$2-state.tar.gz"
  fi
}

queue() {  # issue 31: bench/queue_h200.py on the GPU: a alone, a+b+c packed by gpu_memory, urgent preempts one
  local budget; budget=$(( $(left) - 25 ))
  if [ "$budget" -lt "${MIN_LEFT:-120}" ]; then echo "SKIP queue: only $budget s left in this call"; return 1; fi
  mkdir -p "$W/queue"
  log "bench/queue_h200.py --device cuda --num-envs $NUM_ENVS --max-iterations ${QMAX_IT:-500} --window ${QWINDOW:-40} $* (deadline $budget s)"
  $PY "$REPO/bench/queue_h200.py" --python "$PY" --device cuda --num-envs "$NUM_ENVS" --max-iterations "${QMAX_IT:-500}" \
    --window "${QWINDOW:-40}" --asset-root "$REPO/tests/isaaclab3/asset_root" --workdir "$W/queue" --deadline "$budget" \
    --out "$OUT/isaaclab3-h200-queue.json" "$@" 2>&1 | tee "$OUT/isaaclab3-h200-queue.txt"
  local rc=${PIPESTATUS[0]}
  log "queue bench rc $rc"
  keep_state "$W/queue/isaacd-il3-process" queue
  nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader
  return "$rc"
}

podman_up() {
  if command -v podman >/dev/null && podman info >/dev/null 2>&1 && [ -f /etc/cdi/nvidia.yaml ]; then
    echo "podman already set up: $(podman --version)"; return 0
  fi
  [ -d "$ST/deb" ] || { echo "FATAL: no .debs in $ST/deb: carry .il3deb"; return 1; }
  log "Podman from Debian 12 packages + the CDI spec (bench/gpu_container/setup-podman.sh)"
  bash "$REPO/bench/gpu_container/setup-podman.sh" "$ST/deb" || { echo "FATAL: podman setup failed"; return 1; }
  cp /etc/cdi/nvidia.yaml "$OUT/nvidia.yaml" 2>/dev/null
  log "the GPU in a container (--device nvidia.com/gpu=0, --rootfs /:O)"
  local vols=() p
  for p in "$SITE" "$REPO"; do [ "$(findmnt -T "$p" -no TARGET)" != / ] && vols+=(-v "$p:$p:ro"); done
  (cd /tmp && timeout 120 podman run --rm "${vols[@]}" -e PYTHONPATH="$SITE" --device nvidia.com/gpu=0 --rootfs /:O \
     "$PY" -c 'import torch, warp; print("in the container: torch.cuda", torch.cuda.is_available(), torch.cuda.device_count(), torch.cuda.get_device_name(0)); warp.init()' 2>&1 | tail -4)
}

case "$MODE" in
  stash)
    stash ;;
  process)
    stash; install || exit 1
    bench process ;;
  podman)
    stash; install || exit 1
    podman_up || exit 1
    bench podman --gpus 0 ;;
  booted)  # issue 21: kill -9 with a booted spare parked at the runner's learn()
    stash; install || exit 1
    TAG=booted bench process --spare booted ;;
  throughput)  # issue 21: training speed with a booted spare parked beside the trainer vs no spare, alternating
    stash; install || exit 1
    for i in $(seq "${TP_FIRST:-1}" "${TP_LAST:-3}"); do   # a second warm call can add repeats: TP_FIRST=3 TP_LAST=5
      for m in ${TP_MODES:-off booted}; do   # TP_MODES="booted off": the booted arm first (a short call)
        TAG=throughput-$m-$i bench process --spare "$m" --throughput-iterations "${TP_IT:-40}" --max-iterations 400
      done
    done
    $PY "$REPO/bench/throughput_ratio.py" "$OUT" isaaclab3-h200-throughput
    ;;
  containers)  # issue 21: Podman + CDI with the job's own compile cache (compile_cache = "job", --warp-cache ""):
    # cold container restarts (spare off), then a booted spare container (item 3)
    stash; install || exit 1
    podman_up || exit 1
    TAG=podman-nospare bench podman --gpus 0 --spare off --warp-cache ""
    TAG=podman-booted bench podman --gpus 0 --spare booted --warp-cache "" ;;
  containers-booted)  # issue 21 item 3 again after the podman exit-report fix: the job's compile cache (the default),
    # then Warp's cache at the host's own ~/.cache/warp, mounted at the same path (as session 5 did by hand)
    stash; install || exit 1
    podman_up || exit 1
    KILLS=3 TAG=podman-booted bench podman --gpus 0 --spare booted --warp-cache ""
    TAG=podman-booted-hostwarp bench podman --gpus 0 --spare booted ;;
  prepare)  # install, then one 2-iteration Isaac Lab run on the GPU: Warp's kernels (~/.cache/warp), bytecode and
    # CUDA caches warm, as on a server that has run Isaac Lab before; a later call's bench then times warm launches
    stash; install || exit 1
    log "warm-up: Isaac-Cartpole-Direct, 2 iterations on cuda:0"
    mkdir -p "$W/warmup" && (cd "$W/warmup" && ISAACSIM_ASSET_ROOT="$REPO/tests/isaaclab3/asset_root" timeout "$(( $(left) - 20 ))" \
      $PY -m isaaclab train --rl_library rsl_rl --task Isaac-Cartpole-Direct --num_envs 1024 --max_iterations 2 \
      --device cuda:0 agent.device=cuda:0 2>&1 | tail -5)
    log "warm-up rc ${PIPESTATUS[0]}; ~/.cache/warp: $(du -sh ~/.cache/warp 2>/dev/null | cut -f1)" ;;
  queue)  # issue 31: the host's queue on the GPU (bench/queue_h200.py)
    stash; install || exit 1
    queue ${QARGS:-} ;;   # QARGS: more bench arguments, e.g. QARGS="--gpu-memory 24GiB" on an 80 GB H100
  cpu)  # issue 21: the CPU goal (16 envs, booted spare) on this host's 16 cores, no GPU used
    stash; install || exit 1
    DEVICE=cpu NUM_ENVS=16 KILLS=${KILLS_CPU:-3} TAG=cpu-booted bench process --spare booted --max-iterations 300 ;;
  all)
    stash; install || exit 1
    bench process
    podman_up && bench podman --gpus 0 ;;
  *) echo "usage: $0 stash|prepare|process|podman|booted|throughput|containers|cpu|queue|all"; exit 2 ;;
esac
rc=$?
# At most 8 files come back from a call: past 7, everything but the log travels as one tar (unpack it here).
if [ "$(ls "$OUT" | wc -l)" -gt 7 ]; then
  (cd "$OUT" && tar -cf "isaaclab3-h200-$MODE-results.tar" --exclude=log --exclude='*-results.tar' . \
     && find . -maxdepth 1 -type f ! -name log ! -name '*-results.tar' -delete)
fi
log "done ($MODE) rc $rc; $OUT: $(ls "$OUT" | tr '\n' ' ')"
exit $rc
