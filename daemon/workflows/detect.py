"""Which Isaac Lab generation a job drives, and which `--resume` flavour its cli_args.py declares.

Order: the explicit `isaaclab_version` key; the install's `VERSION` file (process runtime); the
unified 3.x entry point's presence; the `isaaclab` distribution installed in the launcher's Python
(pip / uv installs, no checkout: `installed.py`); the image tag (`isaac-lab:2.3.2`, container runtimes). A job
isaacd cannot place is a clear error naming the key, never a guess: a wrong guess means a Hydra
error after Isaac Sim booted, on every restart.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..config.schema import JobConfig
from .base import Generation, WorkflowError
from .installed import installed_isaaclab

CONTAINER_ISAACLAB_DIR = Path("/workspace/isaaclab")  # NVIDIA's isaac-lab images
_VERSION_RE = re.compile(r"^\s*(\d+)\.(\d+)")
_IMAGE_TAG_RE = re.compile(r"isaac-?lab[\w.-]*:v?(\d+)\.(\d+)", re.IGNORECASE)
# cli_args.add_rsl_rl_args: `--resume` is type=bool up to 2.0, action="store_true" from 2.1 (PR #2299)
_RESUME_DECL_RE = re.compile(r"""["']--resume["']\s*,(?P<rest>[^)]*)\)""", re.S)

SUPPORTED_MAJORS = (1, 2, 3)


def parse_version(text: str, source: str) -> Generation:
    m = _VERSION_RE.match(text)
    if not m:
        raise WorkflowError("isaaclab_version", f"{source}: {text.strip()!r} is not a version such as 2.3.2")
    return Generation(int(m.group(1)), int(m.group(2)), source)


def isaaclab_dir(job: JobConfig) -> Path | None:
    if job.isaaclab_dir is not None:
        return job.isaaclab_dir
    return CONTAINER_ISAACLAB_DIR if job.in_container else None


def detect_generation(job: JobConfig, *, wait_probe: bool = True) -> Generation:
    if job.isaaclab_version is not None:
        gen = parse_version(job.isaaclab_version, "isaaclab_version")
    elif job.workflow == "builtin":
        gen = Generation(2, 3, "the built-in trainer; isaaclab_version picks another generation")
    elif not job.in_container:
        gen = _from_install(job, wait_probe)
    else:
        gen = _from_image(job.container.image)
    if gen.major not in SUPPORTED_MAJORS:
        raise WorkflowError("isaaclab_version", f"Isaac Lab {gen.label} ({gen.source}) is not a generation isaacd "
                                                "knows (1.x, 2.x, 3.x); set isaaclab_version to the contract it "
                                                "follows, e.g. \"3.0\"")
    return gen


def _from_install(job: JobConfig, wait_probe: bool = True) -> Generation:
    root = job.isaaclab_dir
    if root is None and job.launcher:
        # pip / uv: the package installed in the job's Python is the install
        launcher = " ".join(job.launcher)
        return parse_version(installed_isaaclab(job.launcher, job.owner, wait=wait_probe),
                             f"isaaclab installed in {launcher}")
    if root is None:
        raise WorkflowError("isaaclab_dir", f'workflow = "{job.workflow}" with the process runtime needs either '
                                            'launcher = ["/path/to/venv/bin/python"] (Isaac Lab 3.x installed with '
                                            'pip or uv) or isaaclab_dir = "/path/to/IsaacLab" (a checkout)')
    if not root.is_dir():
        raise WorkflowError("isaaclab_dir", f"{root} is not a directory (the Isaac Lab checkout with isaaclab.sh)")
    version_file = root / "VERSION"
    try:
        return parse_version(version_file.read_text(encoding="utf-8"), str(version_file))
    except OSError:
        pass
    if (root / "scripts" / "reinforcement_learning" / "train.py").is_file():
        return Generation(3, 0, f"{root}/scripts/reinforcement_learning/train.py (the 3.x unified entry point)")
    if (root / "scripts" / "reinforcement_learning" / "rsl_rl" / "train.py").is_file():
        flavour = resume_flavour(root / "scripts" / "reinforcement_learning" / "rsl_rl" / "cli_args.py")
        if flavour is not None:
            return Generation(2, 0 if flavour == "bool" else 3, f"{root}: --resume declared {flavour}")
    raise WorkflowError("isaaclab_version", f"cannot tell which Isaac Lab generation {root} is (no VERSION file, "
                                            'no known train script); set isaaclab_version = "2.3" or "3.0"')


def _from_image(image: str) -> Generation:
    m = _IMAGE_TAG_RE.search(image)
    if m:
        return Generation(int(m.group(1)), int(m.group(2)), f"image tag {image}")
    raise WorkflowError("isaaclab_version", f"cannot tell the Isaac Lab generation of image {image!r} from its tag; "
                                            'set isaaclab_version = "2.3" or "3.0" for this job')


def resume_flavour(cli_args: Path) -> str | None:
    """"store_true" or "bool" as declared in a cli_args.py (upstream's or an extension project's copy)."""
    try:
        text = cli_args.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    m = _RESUME_DECL_RE.search(text)
    if m is None:
        return None
    rest = m.group("rest")
    if "store_true" in rest:
        return "store_true"
    if re.search(r"type\s*=\s*bool", rest):
        return "bool"
    return None
