#!/usr/bin/env python3
"""Write the CDI spec `nvidia-ctk cdi generate` would write, for hosts without NVIDIA's toolkit.

NVIDIA's container toolkit (nvidia-ctk) is not packaged in Debian, and the GPU test machine cannot
reach NVIDIA's repository, so this stands in for it there. It writes the same layout
(`kind: nvidia.com/gpu`; one device per index, one per UUID, and `all`; the control nodes,
/dev/nvidia-uvm*, and the driver's files as read-only bind mounts in `containerEdits`) with two
differences, both stated in the spec's header:

- no OCI hooks: nvidia-ctk adds `nvidia-ctk hook create-symlinks` / `update-ldcache` createContainer
  hooks, which need the nvidia-ctk binary. Here the driver's library directories are mounted whole
  (soname links included) and put on LD_LIBRARY_PATH instead of into the container's ld.so.cache;
- cdiVersion 0.5.0, the newest Podman 4.3's vendored CDI library reads (nvidia-ctk also writes the
  lowest version its content needs, 0.5.0 for a spec like this one).

A real host runs `nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml` (and `isaacd doctor`
keeps saying so); this script is for the test machine only.

    cdi_generate.py [--driver-root /usr/local/nvidia] [--output /etc/cdi/nvidia.yaml]
"""

from __future__ import annotations

import argparse
import os
import sys

import pynvml


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--driver-root", default="/usr/local/nvidia")
    ap.add_argument("--output", default="/etc/cdi/nvidia.yaml")
    a = ap.parse_args(argv)

    pynvml.nvmlInit()
    driver = pynvml.nvmlSystemGetDriverVersion()
    driver = driver.decode() if isinstance(driver, bytes) else driver
    gpus = []
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        uuid = pynvml.nvmlDeviceGetUUID(h)
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        gpus.append((i, uuid, pynvml.nvmlDeviceGetMinorNumber(h)))
    pynvml.nvmlShutdown()

    control = [p for p in ("/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidiactl")
               if os.path.exists(p)]
    lib_dirs = [d for d in (f"{a.driver_root}/lib64", f"{a.driver_root}/lib") if os.path.isdir(d)]
    bin_dir = f"{a.driver_root}/bin"
    mounts = lib_dirs + ([bin_dir] if os.path.isdir(bin_dir) else [])
    ipc = [p for p in ("/run/nvidia-persistenced/socket",) if os.path.exists(p)]

    out = [
        "---",
        "# CDI spec for the NVIDIA driver, in the layout `nvidia-ctk cdi generate` writes.",
        f"# Written by isaacd's bench/gpu_container/cdi_generate.py (driver {driver}, {len(gpus)} GPU(s)):",
        "# nvidia-ctk is not available on this machine. Differences from nvidia-ctk's spec: no",
        "# create-symlinks/update-ldcache hooks (they need the nvidia-ctk binary); the driver's library",
        "# directories are bind-mounted whole and put on LD_LIBRARY_PATH instead.",
        "# On a real host: nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml",
        "cdiVersion: 0.5.0",
        "kind: nvidia.com/gpu",
        "devices:",
    ]
    for name, nodes in ([(str(i), [f"/dev/nvidia{m}"]) for i, _u, m in gpus]
                        + [(u, [f"/dev/nvidia{m}"]) for _i, u, m in gpus]
                        + [("all", [f"/dev/nvidia{m}" for _i, _u, m in gpus])]):
        out += [f"- name: {_q(name)}", "  containerEdits:", "    deviceNodes:"]
        out += [f"    - path: {n}" for n in nodes]
    out += ["containerEdits:", "  env:", "  - NVIDIA_VISIBLE_DEVICES=void"]
    if lib_dirs:
        out.append(f"  - LD_LIBRARY_PATH={':'.join(lib_dirs)}")
    out += ["  deviceNodes:"] + [f"  - path: {p}" for p in control]
    out.append("  mounts:")
    for p in mounts + ipc:
        out += [f"  - hostPath: {p}", f"    containerPath: {p}", "    options:",
                "    - ro", "    - nosuid", "    - nodev", "    - bind"]
    os.makedirs(os.path.dirname(a.output) or ".", exist_ok=True)
    with open(a.output, "w") as fh:
        fh.write("\n".join(out) + "\n")
    print(f"wrote {a.output}: devices {', '.join(str(i) for i, _u, _m in gpus)}, "
          f"{', '.join(u for _i, u, _m in gpus)}, all; {len(control)} control nodes; mounts {', '.join(mounts + ipc)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
