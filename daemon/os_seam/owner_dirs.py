"""What the root supervisor makes ready for a job that runs as its owner (issue 32), before a launch: the state dir
opened for the owner's trainer to reach its own files, and the job's directories and log file made and handed to the
owner. Which paths, and the key each refusal names, are decided here; every call to the kernel goes through the seam
(`OsCalls.open_state_dir`, `.make_owned_dir`, `.create_owned_file`: `HostOs` does them with `owned_dirs.py`, never
following a symlink the owner could have planted), so a launch's preparation runs on the fake kernel
(tests/os_fakes.FakeOs) as it does on the host (issue 38).

Who the owner is, is `access/owner.py`'s. It is handed paths, never a job's config: the seam imports nothing of
the daemon's folders above it (tests/test_import_graph.py: no loops between folders).
"""

from __future__ import annotations

import os
from pathlib import Path

from .owned_dirs import OwnershipRefused
from .oscalls import OsCalls, RunAs

STATE_PRIVATE = ("jobs",)  # the histories and journals: root's alone
STATE_REACHED = ("work", "shim", "spare", "caches", "logs")  # where an owner's trainer has files of its own


def open_state_dir(oscalls: OsCalls, state_dir: Path) -> None:
    """Let an owner's trainer reach its own files under the state dir (its workdir, events files, spare FIFO, caches):
    the folders of STATE_REACHED made, the state dir and those folders traversable but not listable (0711), the
    histories root's alone (STATE_PRIVATE, 0700), no file directly in the state dir or logs/ readable by others.
    Raises OSError."""
    oscalls.open_state_dir(Path(os.path.abspath(state_dir)), STATE_REACHED, STATE_PRIVATE)


def prepare_owned(oscalls: OsCalls, run_as: RunAs, state_dir: Path, log_root: Path, experiment_dir: Path,
                  workdir: Path, cache_dirs: list[Path], log_path: Path) -> str | None:
    """Make the job's directories the owner's (mode 0750 when made here): log_root and its experiment dir, the workdir
    (Hydra writes `outputs/` in the cwd), the compile caches' host dirs, the job log (`log_path`). The problem,
    naming the key, or None."""
    try:
        open_state_dir(oscalls, state_dir)
    except OSError as exc:
        return f"state_dir: cannot open {state_dir} for {run_as.name}'s trainer to reach its files: {exc}"
    log_root = Path(os.path.abspath(log_root))
    wanted: list[tuple[str, Path]] = [("log_root", log_root)]
    exp = Path(os.path.abspath(experiment_dir))
    if exp.is_relative_to(log_root):  # the library's dir and the experiment's, where the trainer makes its run dirs
        wanted += [("log_root", p) for p in reversed(exp.parents) if p.is_relative_to(log_root) and p != log_root]
        wanted.append(("log_root", exp))
    wanted += [("state_dir", workdir), ("state_dir", workdir / "outputs")]  # a container's outputs/ (container_spec)
    wanted += [("compile_cache", d) for d in cache_dirs]
    key, path = "log_root", log_root
    try:
        for key, path in wanted:
            oscalls.make_owned_dir(path, run_as)
        # the job's output file: a booted spare reopens it by name at its go (the process runtime passes it open)
        key, path = "state_dir", log_path
        oscalls.create_owned_file(path, run_as)
    except OwnershipRefused as exc:
        return f"{key}: {exc}"
    except OSError as exc:
        return f"{key}: cannot make {path} for {run_as.name}: {exc.strerror or exc}"
    return None
