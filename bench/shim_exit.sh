#!/bin/bash
# How long a trained real Isaac Lab 3.0 process takes to exit, on the CPU, N runs of each arm, alternating.
# A paused sweep trial's GPU is free, and a PBT member's spare takes over, only once its trainer has exited.
#  1. after a stop (SIGTERM after the first iteration; the shim's `stopped` event to the process's end): the shim's
#     quick exit (trainer/shim_exit.py) against ISAACD_SHIM_FAST_EXIT=0 (Isaac Lab's own cleanup after learn(),
#     then the interpreter's exit with gc.freeze);
#  2. after a completed training (`learn_finished` to the process's end, --max_iterations 2): the shim as it is
#     (gc.freeze() in its last exit handler) against a copy without it.
#   bench/shim_exit.sh [N]          (needs .venv-isaaclab3: scripts/isaaclab3-venv.sh)
set -euo pipefail
N=${1:-3}
REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d /tmp/isaacd-shim-exit.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
mkdir "$WORK/nofreeze"
cp "$REPO"/trainer/shim*.py "$WORK/nofreeze/"
sed -i 's/^    atexit.register(_freeze_before_finalizing)  # first registered, last run$/    pass/' "$WORK/nofreeze/shim.py"
printf 'import sys\nfrom isaaclab_rl.entrypoints import run_train_cli\nsys.exit(run_train_cli(sys.argv[1:]))\n' > "$WORK/train.py"
export ISAACSIM_ASSET_ROOT="$REPO/tests/isaaclab3/asset_root" WARP_CACHE_PATH="$HOME/.cache/warp"
PY="$REPO/.venv-isaaclab3/bin/python"
ARGS=(--rl_library rsl_rl --task Isaac-Cartpole-Direct --num_envs 16 --device cpu agent.device=cpu)
stop() {  # $1: ISAACD_SHIM_FAST_EXIT; prints the seconds from `stopped` to the process's end (reaped)
  rm -rf "$WORK/logs" "$WORK/ev.jsonl"
  (cd "$WORK" && ISAACD_SHIM_FAST_EXIT="$1" python3 - "$WORK/ev.jsonl" "$PY" "$REPO/trainer/shim.py" "$WORK/train.py" \
     "${ARGS[@]}" --max_iterations 100000 <<'PY'
import json, os, signal, subprocess, sys, time
ev, cmd = sys.argv[1], sys.argv[2:]
p = subprocess.Popen(cmd, env=dict(os.environ, ISAACD_SHIM_EVENTS=ev), stdout=open("out.log", "w"),
                     stderr=subprocess.STDOUT, start_new_session=True)  # its own group, as isaacd starts it
def evs():
    return [json.loads(l) for l in open(ev)] if os.path.exists(ev) else []
while not any(e["event"] == "first_iteration" for e in evs()):
    if p.poll() is not None:
        sys.exit(f"the trainer ended before its first iteration: {open('out.log').read()[-2000:]}")
    time.sleep(0.05)
os.killpg(p.pid, signal.SIGTERM)
rc = p.wait()
end = time.time()
(st,) = [e for e in evs() if e["event"] == "stopped"]
assert rc == 0 and st["checkpoint"], (rc, st)
print(f"{end - st['time']:.2f} {st.get('exit_now')}")
PY
  )
}
done_() {  # $1: shim; prints the seconds from learn_finished to the process's end
  rm -rf "$WORK/logs" "$WORK/ev.jsonl"
  (cd "$WORK" && ISAACD_SHIM_EVENTS="$WORK/ev.jsonl" "$PY" "$1" "$WORK/train.py" "${ARGS[@]}" --max_iterations 2 \
     > "$WORK/out.log" 2>&1)
  local end; end=$(date +%s.%N)
  python3 -c "import json,sys; t=[json.loads(l)['time'] for l in open('$WORK/ev.jsonl') if '\"learn_finished\"' in l]; print(f'{$end - t[-1]:.2f}')"
}
quick=(); cleanup=(); with=(); without=()
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq "$N"); do
  quick+=("$(stop 1)"); cleanup+=("$(stop 0)")
  with+=("$(done_ "$REPO/trainer/shim.py")"); without+=("$(done_ "$WORK/nofreeze/shim.py")")
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "${quick[*]}" "${cleanup[*]}" "${with[*]}" "${without[*]}" <<'PY'
import statistics, sys
q, c = ([x for x in s.split() if x not in ("True", "False", "None")] for s in sys.argv[1:3])
flags = [x for x in sys.argv[1].split() if x in ("True", "False", "None")]
q, c = [float(x) for x in q], [float(x) for x in c]
w, wo = [float(x) for x in sys.argv[3].split()], [float(x) for x in sys.argv[4].split()]
print(f"exit after a stop's save (s): quick exit {q} (exit_now {flags}), the script's cleanup {c}")
print(f"  median {statistics.median(q):.2f} s against {statistics.median(c):.2f} s: "
      f"{statistics.median(c) / statistics.median(q):.1f}x sooner")
print(f"exit after training (s): with gc.freeze {w}, without {wo}")
print(f"  median {statistics.median(w):.2f} s against {statistics.median(wo):.2f} s: "
      f"{statistics.median(wo) / statistics.median(w):.1f}x sooner")
PY
