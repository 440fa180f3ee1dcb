"""The systemd runtime's unit files: where a job's unit lives on this host, rendering and writing it, finding it again.

Podman >= 4.4 has Quadlet: the unit is `<quadlet_dir>/<base>.container` (default /etc/containers/systemd), which
systemd's generator turns into `<base>.service`. Without it (Podman 4.3), the unit is the `.service` Quadlet would
make, in `<unit_dir>` (default /etc/systemd/system). What goes in the file is quadlet.py's; this module only places
it. Every file isaacd writes carries its launch token in its header (`quadlet.launch_token_of`), which is how a unit
file of isaacd's is told from an operator's, and one attempt's from another's.
"""

from __future__ import annotations

import os
from pathlib import Path

from .container_spec import ContainerSpec, spare_name_prefix
from .host import run_cmd
from .quadlet import (launch_token_of, quadlet_binary, render_quadlet, render_service, spare_unit_base, unit_base,
                      unit_name)


def write_atomic(path: Path, text: str) -> None:
    """The whole file or none of it (a unit half written would be loaded by the next daemon-reload)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


class UnitFiles:
    """The unit files of this host's mode (`quadlet`): a job's, and its warm spares' of their own."""

    def __init__(self, quadlet: bool, podman: str | None):
        self.quadlet = quadlet
        self.podman = podman
        self.quadlet_dir = Path(os.environ.get("ISAACD_QUADLET_DIR", "/etc/containers/systemd"))
        self.unit_dir = Path(os.environ.get("ISAACD_UNIT_DIR", "/etc/systemd/system"))

    @property
    def mode(self) -> str:
        return "quadlet" if self.quadlet else "service"

    def path(self, job: str, spare_token: str | None = None) -> Path:
        """The job's unit file, or with `spare_token` the file of that warm spare's unit of its own."""
        base = spare_unit_base(job, spare_token) if spare_token else unit_base(job)
        return self.quadlet_dir / f"{base}.container" if self.quadlet else self.unit_dir / f"{base}.service"

    def render(self, spec: ContainerSpec) -> str:
        return render_quadlet(spec) if self.quadlet else render_service(spec, self.podman or "/usr/bin/podman")

    def drop_other_mode(self, job: str) -> None:
        """The job's unit file of the other mode, when isaacd wrote it (Podman was upgraded, or downgraded): two
        units of one job would be two containers of it."""
        other = (self.unit_dir / unit_name(job)) if self.quadlet else (self.quadlet_dir / f"{unit_base(job)}.container")
        if launch_token_of(other) is not None:
            other.unlink(missing_ok=True)

    def job_files(self, job: str) -> tuple[Path, ...]:
        """Where the job's own unit file may be: this mode's, then both modes' (`find` looks in each)."""
        return (self.path(job), self.quadlet_dir / f"{unit_base(job)}.container", self.unit_dir / unit_name(job))

    def spare_files_of(self, job: str, token: str) -> tuple[Path, ...]:
        """Where the file of the job's warm spare with `token` may be, in both modes."""
        base = spare_unit_base(job, token)
        return (self.quadlet_dir / f"{base}.container", self.unit_dir / f"{base}.service")

    def spare_files(self, job: str) -> list[Path]:
        """The job's spare unit files, in both modes, that isaacd wrote (they carry a launch token)."""
        prefix = spare_name_prefix(job)
        found = []
        for d, suffix in ((self.quadlet_dir, ".container"), (self.unit_dir, ".service")):
            try:
                names = sorted(e.name for e in os.scandir(d))
            except OSError:
                continue
            found += [d / n for n in names if n.startswith(prefix) and n.endswith(suffix)
                      and launch_token_of(d / n) is not None]
        return found

    def why_not_loaded(self, unit: str, path: Path, load_state: str) -> str:
        """A unit that did not load after daemon-reload, and what Quadlet's dry run says about it."""
        msg = f"{unit} is {load_state or 'not loaded'} after daemon-reload (written to {path})"
        q = quadlet_binary()
        if self.quadlet and q:
            r = run_cmd([q, "-dryrun", "-no-kmsg-log"], check=False, timeout=60)
            errs = [ln for ln in r.stderr.splitlines() if unit_base(unit.removesuffix(".service")) in ln
                    or "error" in ln.lower() or "unsupported" in ln.lower()]
            if errs:
                msg += "; quadlet says: " + " | ".join(errs[-5:])
        return msg
