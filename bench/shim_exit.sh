#!/bin/bash
# How long a trained real Isaac Lab 3.0 process takes to exit after its training ends (the shim's learn_finished
# event to the process's end): the shim as it is (gc.freeze() in its last exit handler) against a copy without
# it, N runs each, alternating, on the CPU. A paused sweep trial's GPU is free only when its trainer has exited.
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
one() {  # $1: shim; prints the seconds from learn_finished to the process's end
  rm -rf "$WORK/logs" "$WORK/ev.jsonl"
  (cd "$WORK" && ISAACD_SHIM_EVENTS="$WORK/ev.jsonl" "$REPO/.venv-isaaclab3/bin/python" "$1" "$WORK/train.py" \
     --rl_library rsl_rl --task Isaac-Cartpole-Direct --num_envs 16 --device cpu --max_iterations 2 \
     agent.device=cpu > "$WORK/out.log" 2>&1)
  local end; end=$(date +%s.%N)
  python3 -c "import json,sys; t=[json.loads(l)['time'] for l in open('$WORK/ev.jsonl') if '\"learn_finished\"' in l]; print(f'{$end - t[-1]:.2f}')"
}
with=(); without=()
for i in $(seq "$N"); do
  with+=("$(one "$REPO/trainer/shim.py")"); without+=("$(one "$WORK/nofreeze/shim.py")")
done
python3 - "${with[*]}" "${without[*]}" <<'PY'
import statistics, sys
w, wo = [float(x) for x in sys.argv[1].split()], [float(x) for x in sys.argv[2].split()]
print(f"exit after training (s): with gc.freeze {w}, without {wo}")
print(f"median {statistics.median(w):.2f} s against {statistics.median(wo):.2f} s: "
      f"{statistics.median(wo) / statistics.median(w):.1f}x sooner")
PY
