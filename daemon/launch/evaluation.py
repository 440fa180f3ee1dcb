"""An evaluation's launch (issue 41; /work/notes/eval-design.md B): what it evaluates and how, as one context field
(`LaunchContext.evaluation`, an `EvalLaunch`: context.py), and the one prepare step that turns it into the
evaluation process's variables.

The evaluation runs the job's own cold-start command line (no resume, no W&B run) through the shim in eval mode; the
shim reads these variables. Set after the environment's scrub (an owner's process keeps them) and after the job's own
`environment`, so a job's CUDA_VISIBLE_DEVICES never puts a CPU evaluation on a GPU, nor a GPU one on another GPU."""

from __future__ import annotations

from .context import LaunchContext
from .contributions import Contribution, Env

EVAL_ENV = "ISAACD_EVAL"  # "1": the shim runs the play path on a checkpoint instead of training
EVAL_CHECKPOINT_ENV = "ISAACD_EVAL_CHECKPOINT"
EVAL_ITERATION_ENV = "ISAACD_EVAL_ITERATION"
EVAL_EPISODES_ENV = "ISAACD_EVAL_EPISODES"
EVAL_NUM_ENVS_ENV = "ISAACD_EVAL_NUM_ENVS"
EVAL_SEED_ENV = "ISAACD_EVAL_SEED"
EVAL_DEVICE_ENV = "ISAACD_EVAL_DEVICE"
EVAL_RESULT_ENV = "ISAACD_EVAL_RESULT"
EVAL_TB_DIR_ENV = "ISAACD_EVAL_TB_DIR"
EVAL_VIDEO_ENV = "ISAACD_EVAL_VIDEO"
EVAL_VIDEO_DIR_ENV = "ISAACD_EVAL_VIDEO_DIR"
EVAL_NICE_ENV = "ISAACD_EVAL_NICE"  # the niceness the shim gives the evaluation (trainer/shim_eval.py)
# beside a GPU training, the training's pids: the evaluation keeps off the CPUs they run on and those CPUs' SMT
# siblings (nice only orders one CPU's queue; a sibling shares the trainer's core), set by the shim before its imports
EVAL_BESIDE_PIDS_ENV = "ISAACD_EVAL_BESIDE_PIDS"
# beside a GPU training, whose trainer is bound by one CPU core while the host has many idle ones (an H100: 1.00 core,
# GPU 24-28 % busy; an evaluation's start-up took it to 0.975x: bench/results/issue41-eval-beside-gpu.txt), the
# evaluation yields the CPU at once: nice 19. Beside a CPU training, which keeps every core busy, nice 19 would starve
# the evaluation (about 1.5 % of a contended core): it keeps the trainer's priority and its one thread.
NICE_BESIDE_GPU_TRAINING = 19


def eval_environment(ctx: LaunchContext, oscalls: object) -> Contribution:
    """An evaluation's variables (the design's table B); nothing for any other launch."""
    e = ctx.evaluation
    if e is None:
        return None
    beside_gpu = ctx.cfg.device != "cpu"
    return Env({EVAL_ENV: "1", EVAL_CHECKPOINT_ENV: e.checkpoint, EVAL_ITERATION_ENV: str(e.iteration),
                EVAL_EPISODES_ENV: str(e.episodes), EVAL_NUM_ENVS_ENV: str(e.num_envs), EVAL_SEED_ENV: str(e.seed),
                # the one GPU it may see is its cuda:0; a CPU evaluation sees none (torch cannot pick one by itself)
                "CUDA_VISIBLE_DEVICES": "" if e.gpu is None else e.gpu,
                EVAL_DEVICE_ENV: "cpu" if e.gpu is None else "cuda:0",
                EVAL_RESULT_ENV: e.result, EVAL_TB_DIR_ENV: e.tb_dir, EVAL_VIDEO_ENV: str(e.video),
                EVAL_VIDEO_DIR_ENV: e.video_dir,
                # never hold training back: one CPU thread for its math (torch's intra-op pool would take every core
                # for its start-up burst); the shim also lowers its priority beside a GPU training (EVAL_NICE_ENV)
                "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                EVAL_NICE_ENV: str(NICE_BESIDE_GPU_TRAINING if beside_gpu else 0)}
               # beside a CPU training every core is the trainer's: no core to keep off
               | ({EVAL_BESIDE_PIDS_ENV: " ".join(map(str, e.beside_pids))} if beside_gpu and e.beside_pids else {}))
