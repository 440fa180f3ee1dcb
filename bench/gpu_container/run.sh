#!/usr/bin/env bash
# End to end on a GPU machine without Podman or systemd (the project's H200): Podman 4.3.1 from
# carried Debian 12 packages, a CDI spec, then `isaacd run` with a runtime = "podman" built-in job on
# gpus = [0], device = "cuda:0": GPU seen in the container (and not without the CDI device), training
# on it (fps, NVML utilisation, cgroup attribution), kill -9 of the trainer and `podman kill` of the
# container each resumed from the newest checkpoint, no --privileged, and the `.service` fallback's
# `podman run` line run by hand.
#
#   bench/gpu_container/run.sh BUNDLE      BUNDLE: deb/ (Debian 12 .debs), whl/ (wheels), src/ (isaacd source)
# Results: $OUT/log (tee it), $OUT/results.tar.gz, $OUT/summary.json, $OUT/nvidia.yaml.
set -uo pipefail
B=$(cd "$1" && pwd); HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/isaacd-gpu-container}; mkdir -p "$OUT"
W=/var/tmp/isaacd-gpu15; rm -rf "$W"; mkdir -p "$W/res"; R=$W/res
JOB=cartpole-podman; CTR=isaaclab-job-$JOB
NUM_ENVS=${NUM_ENVS:-4096}
T_START=$(date +%s)
sec() { printf '\n=== [%s +%ss] %s\n' "$(date +%T)" "$(( $(date +%s) - T_START ))" "$*"; }
finish() {
  cp "$W"/*.toml "$W"/supervisor.log "$W"/state/logs/*.log "$R/" 2>/dev/null
  cp /etc/containers/containers.conf "$R/" 2>/dev/null
  [ -f /etc/cdi/nvidia.yaml ] && cp /etc/cdi/nvidia.yaml "$OUT/nvidia.yaml"
  tar -C "$W" -czf "$OUT/results.tar.gz" res 2>/dev/null
}
trap finish EXIT

sec "the machine"
uname -a; grep PRETTY /etc/os-release; nproc; free -g | head -2
PY=$(command -v python3); VBIN=$(dirname "$PY"); echo "python3: $PY ($($PY -V))"
ls -la /dev/nvidia* ; ls /usr/local/nvidia /usr/local/nvidia/lib64 2>&1 | head -40
ldconfig -p | grep -E 'libcuda\.so|libnvidia-ml\.so'; echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
nvidia-smi -L; nvidia-smi --query-gpu=index,uuid,driver_version,pci.bus_id,power.limit --format=csv
findmnt -rn -o TARGET,SOURCE,FSTYPE | grep -vE '^/(proc|sys)/' | head -40
echo "PID 1: $(cat /proc/1/comm)  my cgroup: $(cat /proc/self/cgroup)"
echo "cgroup2 controllers: $(cat /sys/fs/cgroup/cgroup.controllers)  subtree: $(cat /sys/fs/cgroup/cgroup.subtree_control)"
grep -E '^Cap(Bnd|Eff)' /proc/self/status; echo "ulimit -n $(ulimit -n)/$(ulimit -Hn) -l $(ulimit -l)"
unshare -m -p -f --mount-proc true && echo "unshare: ok"
findmnt -T /opt -no TARGET; findmnt -T "$PY" -no TARGET; findmnt -T "$HERE" -no TARGET; pwd

sec "Podman from Debian 12 packages"
bash "$HERE/setup-podman.sh" "$B/deb" || { echo "FATAL: podman setup failed"; exit 1; }
podman info --format '{{.Host.OCIRuntime.Name}} {{.Host.OCIRuntime.Version}} cgroup {{.Host.CgroupsVersion}} {{.Host.CgroupManager}} {{.Store.GraphDriverName}}' 2>&1 | head -3

sec "isaacd (this branch's source) + wheels into the torch venv"
$PY -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir "$B"/whl/*.whl "$B/src" 2>&1 | grep -v WARNING | tail -5
ln -sf "$VBIN/isaacd-train" /usr/local/bin/isaacd-train; ln -sf "$VBIN/isaacd" /usr/local/bin/isaacd
isaacd --help >/dev/null && echo "isaacd: $(command -v isaacd)"; $PY -c 'import isaacd, isaacd_trainer, rsl_rl, podman; print("imports ok", isaacd.__file__)'

# paths the containers need that an overlay of / does not show (separate mounts)
VOLS=()
for p in "$VBIN/.." "$HERE"; do p=$(readlink -f "$p"); [ "$(findmnt -T "$p" -no TARGET)" != / ] && VOLS+=("$p:$p:ro"); done
VARGS=(); for v in "${VOLS[@]}"; do VARGS+=(-v "$v"); done; echo "extra volumes: ${VOLS[*]:-none}"

sec "the GPU in a container: CDI device nvidia.com/gpu=0, no --privileged"
# (podman run options go before `--rootfs PATH`: the first word after it is the command)
probe() { timeout 180 podman run --rm "${VARGS[@]}" "$@" --rootfs /:O "$PY" "$HERE/probe_gpu.py" 2>&1 | tail -3; }
echo "--- --device nvidia.com/gpu=0"; probe --device nvidia.com/gpu=0 | tee "$R/probe-gpu0.txt"
UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0)
echo "--- --device nvidia.com/gpu=$UUID"; probe --device "nvidia.com/gpu=$UUID" | tee "$R/probe-uuid.txt"
echo "--- no CDI device (negative case)"; probe | tee "$R/probe-none.txt"
echo "--- --device nvidia.com/gpu=1 (no such GPU here)"; probe --device nvidia.com/gpu=1 | tee "$R/probe-gpu1.txt"
echo "--- nvidia-smi -L inside, with the device"
timeout 60 podman run --rm --device nvidia.com/gpu=0 --rootfs /:O /usr/local/nvidia/bin/nvidia-smi -L 2>&1 | tail -3
echo "--- nvidia-smi inside, without it"
timeout 60 podman run --rm --rootfs /:O /usr/local/nvidia/bin/nvidia-smi -L 2>&1 | tail -3

sec "isaacd run: runtime = \"podman\", gpus = [0], device = \"cuda:0\""
VTOML=$(printf '"%s", ' "${VOLS[@]}"); VTOML="[${VTOML%, }]"; [ ${#VOLS[@]} -eq 0 ] && VTOML="[]"
cat > "$W/isaacd.toml" <<TOML
[supervisor]
state_dir = "$W/state"
control_socket = "$W/isaacd.sock"
log_format = "json"
[metrics]
listen = "127.0.0.1:9835"
[gpu]
source = "nvml"
sample_interval = 1.0
[[jobs]]
name = "$JOB"
runtime = "podman"
num_envs = $NUM_ENVS
max_iterations = 100000
save_interval = 20
device = "cuda:0"
gpus = [0]
log_root = "$W/logs"
stop_timeout = 20.0
launcher = ["$PY"]                  # the torch python of the overlaid root runs the bind-mounted shim
[jobs.restart]
backoff_initial = 1.0
[jobs.container]
image = "/:O"
shm_size = "2g"
volumes = $VTOML
TOML
cat "$W/isaacd.toml"
isaacd check-config "$W/isaacd.toml" || exit 1
(cd "$W" && exec isaacd run --config "$W/isaacd.toml" > "$W/supervisor.log" 2>&1) &
SUP=$!
st() { isaacd --config "$W/isaacd.toml" status --json 2>/dev/null; }
field() { st | $PY -c "import json,sys; j=json.load(sys.stdin)['jobs'][0]; print($1)" 2>/dev/null; }
metrics() { $PY -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:9835/metrics", timeout=5).read().decode())'; }
T0=$(date +%s.%N)
for i in $(seq 1 240); do [ "$(field "j['checkpoint'] is not None and j['state']=='running'")" = True ] && break; sleep 0.5; done
echo "first checkpoint after $($PY -c "print(round($(date +%s.%N)-$T0,1))") s"
sleep 15
isaacd --config "$W/isaacd.toml" status | tee "$R/status-training.txt"
st > "$R/status-training.json"; metrics > "$R/metrics-training.txt"
grep -E '^isaacd_(gpu_(job_info|utilization_ratio|power_watts|process_memory_used_bytes|memory_used)|job_(env_steps_per_second|iteration|info|gpu_assigned))' "$R/metrics-training.txt"
PID=$(field "j['pid']"); CG=$(field "j['cgroup']")
echo "trainer host pid $PID, job cgroup $CG; /proc/$PID/cgroup: $(cat /proc/$PID/cgroup)"
echo "process tree in the container:"; ps -o pid,ppid,comm,args --forest -g "$(ps -o sid= -p "$PID" | tr -d ' ')" 2>/dev/null | cut -c1-200 | head
$PY - "$R/status-training.json" <<'PYEOF'
import json, sys, pynvml
from isaacd.metrics.attribution import attribute_pids
j = json.load(open(sys.argv[1]))["jobs"][0]
pynvml.nvmlInit(); h = pynvml.nvmlDeviceGetHandleByIndex(0)
pids = [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)]
print("NVML compute processes on GPU 0:", pids)
print("attributed by the job's cgroup alone (no pid given):", attribute_pids(pids, [{"name": j["name"], "cgroup": j["cgroup"]}]))
PYEOF
echo "--- podman inspect $CTR"
podman inspect "$CTR" --format 'privileged={{.HostConfig.Privileged}} devices={{.HostConfig.Devices}} cgroup={{.HostConfig.CgroupParent}} caps_add={{.HostConfig.CapAdd}} netmode={{.HostConfig.NetworkMode}} entrypoint={{.Config.Entrypoint}}' | tee "$R/inspect.txt"
podman inspect "$CTR" > "$R/inspect.json"
echo "--- inside the job's container: /dev/nvidia*, nvidia-smi -L"
podman exec "$CTR" sh -c 'ls /dev/nvidia*; /usr/local/nvidia/bin/nvidia-smi -L; /usr/local/nvidia/bin/nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv'

resume_check() {  # $1 label, $2 old pid, $3 old run dir, $4 kill time
  local t1 t2
  for i in $(seq 1 600); do p=$(field "j['pid']"); [ -n "$p" ] && [ "$p" != None ] && [ "$p" != "$2" ] && break; sleep 0.05; done
  t1=$(date +%s.%N)
  for i in $(seq 1 1200); do [ "$(field "j['run_dir'] not in (None, '$3') and j['state']=='running' and (j['iteration'] or 0) > 0")" = True ] && break; sleep 0.1; done
  t2=$(date +%s.%N)
  echo "$1: new trainer pid $(field "j['pid']") after $($PY -c "print(round($t1-$4,2))") s; first iteration of the new run after $($PY -c "print(round($t2-$4,2))") s"
  echo "$1 $($PY -c "print(round($t1-$4,2), round($t2-$4,2))")" >> "$R/restart-times.txt"
}
sec "kill -9 of the trainer (host pid of the container's trainer process)"
sleep 5
RUN=$(field "j['run_dir']"); IT=$(field "j['iteration']"); CK=$(field "j['checkpoint']['iteration']"); PID=$(field "j['pid']")
echo "before: pid $PID iteration $IT, newest checkpoint model_$CK.pt in $RUN"
echo "kill9 newest_checkpoint_before=$CK iteration_before=$IT" >> "$R/restart-times.txt"
TK=$(date +%s.%N); kill -9 "$PID"; echo "kill9 kill_at=$TK" >> "$R/restart-times.txt"
resume_check kill9 "$PID" "$RUN" "$TK"
sleep 12
st > "$R/status-after-kill9.json"
sec "podman kill of the container"
RUN=$(field "j['run_dir']"); IT=$(field "j['iteration']"); CK=$(field "j['checkpoint']['iteration']"); PID=$(field "j['pid']")
echo "before: pid $PID iteration $IT, newest checkpoint model_$CK.pt in $RUN"
echo "podmankill newest_checkpoint_before=$CK iteration_before=$IT" >> "$R/restart-times.txt"
TK=$(date +%s.%N); podman kill "$CTR"; echo "podmankill kill_at=$TK" >> "$R/restart-times.txt"
resume_check podmankill "$PID" "$RUN" "$TK"
sleep 12
isaacd --config "$W/isaacd.toml" status | tee "$R/status-after.txt"
st > "$R/status-after.json"; metrics > "$R/metrics-after.txt"
grep -E '^isaacd_(gpu_(job_info|utilization_ratio)|job_restarts)' "$R/metrics-after.txt"
podman events --stream=false --since 10m --filter "container=$CTR" --filter event=died --format json > "$R/podman-died.json" 2>&1
isaacd --config "$W/isaacd.toml" events "$JOB" | tee "$R/events.txt" | tail -25
isaacd --config "$W/isaacd.toml" events "$JOB" --json > "$R/events.json" 2>/dev/null || true
$PY - "$W/state" "$JOB" <<'PYEOF'
import json, sys, pathlib
h = json.loads((pathlib.Path(sys.argv[1]) / "jobs" / f"{sys.argv[2]}.json").read_text())
for a in h.get("attempts", []):
    print("attempt", a.get("number"), "|", a.get("reason"), "| resume_from", (a.get("resume_from") or {}).get("path"),
          "| run_dir", a.get("run_dir"), "| exit", (a.get("exit") or {}).get("description"), "| checkpoint_at_exit", a.get("checkpoint_at_exit"))
PYEOF

sec "isaacd stop, then the supervisor"
isaacd --config "$W/isaacd.toml" stop "$JOB"
for i in $(seq 1 120); do [ "$(field "j['state']")" = stopped ] && break; sleep 0.5; done
echo "state: $(field "j['state']") ($(field "j['state_reason']"))"
isaacd --config "$W/isaacd.toml" events "$JOB" --json 2>/dev/null | $PY -c "
import json, sys
evs = json.load(sys.stdin)
for e in evs:
    if e['event'] in ('trainer_saved_on_stop', 'started', 'exited'):
        print(e['event'], {k: e.get(k) for k in ('attempt', 'iteration', 'checkpoint', 'code', 'contract')})
print('shim in the container command:', any('/opt/isaacd/isaacd_shim.py' in (e.get('argv') or []) for e in evs))
" | tee "$R/stop-save.txt"
kill -TERM $SUP; wait $SUP; echo "supervisor exit $?"
podman rm -f -i "$CTR" >/dev/null 2>&1

sec "the .service fallback's podman run line, by hand (systemd's part played by the script)"
$PY "$HERE/fallback_by_hand.py" "$W/isaacd.toml" "$JOB" "$R" --seconds 30 2>&1 | tail -60
echo "fallback rc ${PIPESTATUS[0]}"

sec "isaacd doctor"
isaacd doctor --config "$W/isaacd.toml" 2>&1 | tee "$R/doctor.txt" | head -30
sec "summary"
$PY "$HERE/summarize.py" "$R" | tee "$OUT/summary.txt"
sec "done"
