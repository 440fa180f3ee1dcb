#!/usr/bin/env bash
# A supervised built-in training run on a real GPU, end to end: NVML collector, GPU attribution,
# metrics, kill -9 of the trainer and resume, graceful stop. Prints what it saw; copies files to $OUT.
#   bench/gpu_supervised_run.sh            (on a GPU host with isaacd + isaacd-train on PATH)
set -uo pipefail
OUT=${OUT:-/tmp/isaacd-gpu-run}; mkdir -p "$OUT"
W=$(mktemp -d); cd "$W"
NUM_ENVS=${NUM_ENVS:-4096}
cat > isaacd.toml <<TOML
[supervisor]
state_dir = "state"
control_socket = "isaacd.sock"
log_format = "json"
[metrics]
listen = "127.0.0.1:9835"
[gpu]
source = "nvml"
sample_interval = 1.0
[[jobs]]
name = "cartpole-gpu"
num_envs = $NUM_ENVS
max_iterations = 100000
save_interval = 20
device = "cuda:0"
gpus = [0]
log_root = "logs"
stop_timeout = 20.0
TOML
isaacd check-config isaacd.toml || exit 1
isaacd run --config isaacd.toml > supervisor.log 2>&1 &
SUP=$!
st() { isaacd --config isaacd.toml status --json; }
field() { st | python3 -c "import json,sys; j=json.load(sys.stdin)['jobs'][0]; print(j$1)"; }
for i in $(seq 1 120); do
  [ "$(field "['checkpoint'] is not None and j['state']=='running'" 2>/dev/null)" = True ] && break; sleep 1
done
sleep 20  # let NVML see a steady training load
echo "=== status while training"; isaacd --config isaacd.toml status
st > "$OUT/status-training.json"
curl -s 127.0.0.1:9835/metrics > "$OUT/metrics-training.txt"
grep -E '^isaacd_gpu_(job_info|utilization_ratio|temperature_celsius|power_watts|process_memory)' "$OUT/metrics-training.txt" | head -20
PID=$(field "['pid']"); IT=$(field "['iteration']"); CK=$(field "['checkpoint']['iteration']")
echo "=== kill -9 trainer pid $PID at iteration $IT (newest checkpoint $CK)"
T0=$(date +%s.%N); kill -9 "$PID"
while [ "$(field "['pid']")" = "$PID" ] || [ "$(field "['pid']")" = None ]; do sleep 0.05; done
T1=$(date +%s.%N)
OLD_RUN=$(python3 -c "import json; print(json.load(open('$OUT/status-training.json'))['jobs'][0]['run_dir'])")
while [ "$(field "['run_dir'] != '$OLD_RUN' and j['state'] == 'running'")" != True ]; do sleep 0.05; done
T2=$(date +%s.%N)
python3 -c "print(f'restart after {$T1-$T0:.2f} s, first new iteration after {$T2-$T0:.2f} s')"
sleep 10
echo "=== status after the crash"; isaacd --config isaacd.toml status
isaacd --config isaacd.toml events cartpole-gpu | tail -12
st > "$OUT/status-after.json"
echo "=== SIGTERM to the supervisor"
T3=$(date +%s.%N); kill -TERM $SUP; wait $SUP; RC=$?; T4=$(date +%s.%N)
python3 -c "print(f'supervisor exited {$RC} after {$T4-$T3:.2f} s')"
tail -3 state/logs/cartpole-gpu.log
cp supervisor.log "$OUT/"; cp state/logs/cartpole-gpu.log "$OUT/trainer.log"
