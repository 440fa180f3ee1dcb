"""How a job's train script is started: launcher, the save-on-stop shim, script, torchrun.

Upstream Isaac Lab runs `isaaclab.sh -p <script> <flags>`; isaacd runs
`isaaclab.sh -p <shim.py> <script> <flags>` so that the unmodified script runs in the same process
with rsl_rl's runner hooked (trainer/isaacd_trainer/shim.py). The built-in trainer goes through
the same shim (`python shim.py -m isaacd_trainer ...`), so every end-to-end test exercises it.
Isaac Lab 3.x installed with pip or uv (no checkout) runs as `<python> <shim.py> -m isaaclab train
--rl_library <lib> <flags>`: the shim runs the module exactly as `python -m` would.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

from isaacd_trainer.shim_protocol import SHIM_FILE, SHIM_FILES, SHIM_IN_CONTAINER

from ..config.schema import JobConfig
from .base import Generation, WorkflowError
from .detect import isaaclab_dir

# the faithful built-in trainer speaks each generation's contract from its own entry point
BUILTIN_MODULES = {"2.0": "isaacd_trainer.isaaclab20", "2.3": "isaacd_trainer", "3": "isaacd_trainer.isaaclab30"}

_UPSTREAM_SCRIPTS = {
    # (library, generation line) -> script relative to the Isaac Lab checkout
    ("rsl_rl", 1): "source/standalone/workflows/rsl_rl/train.py",
    ("rsl_rl", 2): "scripts/reinforcement_learning/rsl_rl/train.py",
    ("rl_games", 1): "source/standalone/workflows/rl_games/train.py",
    ("rl_games", 2): "scripts/reinforcement_learning/rl_games/train.py",
    ("skrl", 1): "source/standalone/workflows/skrl/train.py",
    ("skrl", 2): "scripts/reinforcement_learning/skrl/train.py",
}
UNIFIED_SCRIPT = "scripts/reinforcement_learning/train.py"  # 3.x: one entry point, --rl_library
# 3.x installed as a package (pip / uv, no checkout): `python -m isaaclab train` is the console script `isaaclab
# train` (isaaclab-3.0.0.dist-info/entry_points.txt: isaaclab = isaaclab.__main__:main; isaaclab/cli/__init__.py
# cli() dispatches sys.argv[1] == "train" to isaaclab_rl.entrypoints.run_train_cli(sys.argv[2:])).
PACKAGE_ENTRY = ("-m", "isaaclab", "train")


def pip_installed(job: JobConfig) -> bool:
    """Isaac Lab lives in the launcher's Python as a package: the job names that Python and no checkout or script.

    Containers count too (NVIDIA's kit-less 3.x image has its venv at /opt/isaaclab-venv, on PATH, beside the
    checkout at /workspace/isaaclab); there the generation comes from the image tag or isaaclab_version.
    """
    return (job.workflow != "builtin" and not job.command and bool(job.launcher) and job.isaaclab_dir is None
            and job.train_script is None)


def shim_source() -> Path:
    """The shim file shipped in the isaacd_trainer package (found without importing it: no torch)."""
    spec = importlib.util.find_spec("isaacd_trainer")
    if spec is None or not spec.submodule_search_locations:
        raise WorkflowError("shim", "isaacd's launcher shim (isaacd_trainer/shim.py) is not installed; reinstall "
                                    "isaacd, or set shim = false for this job")
    return Path(list(spec.submodule_search_locations)[0]) / SHIM_FILE


def shim_mounts() -> list[tuple[str, str]]:
    """(host file, path in the container) of each file the shim needs there: itself, the protocol and its own parts,
    which it loads from beside itself (isaacd_trainer/shim_protocol.py: SHIM_FILES)."""
    package = shim_source().parent
    return [(str(package / name), inside) for name, inside in SHIM_FILES]


def builtin_module(gen: Generation) -> str:
    if gen.major >= 3:
        return BUILTIN_MODULES["3"]
    return BUILTIN_MODULES["2.0"] if (gen.major, gen.minor) <= (2, 0) else BUILTIN_MODULES["2.3"]


def train_script(job: JobConfig, library: str, gen: Generation, in_container: bool) -> str:
    """The absolute train script path (on the host, or in the container)."""
    rel = job.train_script
    if rel is None:
        rel = UNIFIED_SCRIPT if gen.major >= 3 else _UPSTREAM_SCRIPTS[(library, min(gen.major, 2))]
    if rel.startswith("/"):
        path = Path(rel)
    else:
        root = isaaclab_dir(job)
        if root is None:
            raise WorkflowError("isaaclab_dir", f"train_script {rel!r} is relative: set isaaclab_dir (the Isaac Lab "
                                                "checkout) or give an absolute train_script")
        path = root / rel
    if not in_container and not path.is_file():
        raise WorkflowError("train_script", f"{path} does not exist (an Isaac Lab train script, e.g. "
                                            f"{_UPSTREAM_SCRIPTS[(library, 2)]} or your extension's "
                                            "scripts/rsl_rl/train.py)")
    return str(path)


def is_unified(script: str) -> bool:
    return script.endswith("/" + UNIFIED_SCRIPT) or script == UNIFIED_SCRIPT


@dataclass(frozen=True)
class Program:
    """argv = prefix + trainer flags + suffix."""

    prefix: list[str]
    suffix: list[str]
    shim: bool
    # a single-rank program run through the shim can have a warm spare: `spare_head` + ["--isaacd-spare"]
    # starts it, and `target` + flags + suffix is the command line it is handed at a crash (daemon/attempt/spare.py)
    spare_head: list[str] | None = None
    target: tuple[str, ...] = ()
    # the trainer runs without the shim (skrl, rl_games): the spare only hosts the state-free start-up in the shim
    # file and, at go, runs the target as plain Python would (no rsl_rl hook, Python's own signal handling)
    plain_spare: bool = False

    def argv(self, args: list[str]) -> list[str]:
        return self.prefix + args + self.suffix

    def go_argv(self, args: list[str]) -> list[str]:
        return list(self.target) + args + self.suffix


def build_program(job: JobConfig, library: str, gen: Generation, *, in_container: bool,
                  python: str | None = None) -> Program:
    if job.command:
        return Program(list(job.command), ["--distributed"] if job.ranks > 1 else [], shim=False)
    # The shim hooks rsl_rl's runners only: for rl_games and skrl it could neither save on a stop nor report the
    # run dir (the runner would then never find it), so those run the script directly and the run dir is found
    # by its exact name (Workflow.run_dir_re), as with shim = false.
    shim = [SHIM_IN_CONTAINER if in_container else str(shim_source())] if job.shim and library == "rsl_rl" else []
    if job.workflow == "builtin":
        py = python or ("python" if in_container else sys.executable)
        launcher = list(job.launcher) if job.launcher else [py]  # e.g. a venv's python inside a rootfs container
        target = ["-m", builtin_module(gen)] + (["--rl_library", library] if gen.major >= 3 else [])
    elif pip_installed(job):
        if gen.major < 3:
            raise WorkflowError("isaaclab_dir", f"Isaac Lab {gen.label} ({gen.source}) has no `python -m isaaclab "
                                                "train` entry point (it came with 3.0): set isaaclab_dir to the "
                                                "checkout, or train_script to your train.py")
        launcher = list(job.launcher or [])
        target = [*PACKAGE_ENTRY, "--rl_library", library]
    else:
        launcher = list(job.launcher) if job.launcher else [_default_launcher(job, in_container)]
        if not job.launcher:
            launcher.append("-p")
        script = train_script(job, library, gen, in_container)
        target = [script] + (["--rl_library", library] if is_unified(script) else [])
    if job.ranks > 1:
        # One job, several ranks: torchrun starts them; with its default max_restarts = 0 one rank's death
        # takes the others down and isaacd restarts the whole job from rank 0's checkpoint.
        torchrun = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={job.ranks}"]
        if not shim and target[0] == "-m":
            target = ["--module", *target[1:]]  # torchrun's own flag for "the script is a module"
        return Program(launcher + torchrun + shim + target, ["--distributed"], shim=bool(shim))
    if shim:
        return Program(launcher + shim + target, [], shim=True, spare_head=launcher + shim, target=tuple(target))
    # skrl / rl_games: no shim in the trainer's command, but a warm spare can still do the imports and the CUDA
    # context ahead (process runtime; the shim file hosts it, as for rsl_rl)
    plain = job.shim and not in_container
    return Program(launcher + target, [], shim=False, spare_head=launcher + [str(shim_source())] if plain else None,
                   target=tuple(target), plain_spare=plain)


def _default_launcher(job: JobConfig, in_container: bool) -> str:
    root = isaaclab_dir(job)
    if root is None:
        raise WorkflowError("isaaclab_dir", f'workflow = "{job.workflow}" needs isaaclab_dir (the Isaac Lab checkout '
                                            "with isaaclab.sh) or launcher = [\"/path/to/python\"]")
    sh = root / "isaaclab.sh"
    if not in_container and not sh.is_file():
        raise WorkflowError("isaaclab_dir", f"{sh} does not exist; point isaaclab_dir at the Isaac Lab checkout, or "
                                            "set launcher = [\"/path/to/python\"]")
    return str(sh)
