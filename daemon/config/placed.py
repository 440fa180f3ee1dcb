"""The config a job the queue placed launches with (issue 31): the job as written, with the GPUs it was given named
as if it had pinned them, so every part downstream (the launch spec, CDI devices, CUDA_VISIBLE_DEVICES, torchrun, the
watchdogs, the status) reads the one spelling it already knows (gpu/assign.py).

A MIG instance (issue 42) is named by its key "p:j" (`gpus = ["0:1"]`: CDI's `nvidia.com/gpu=0:1` for a container);
a trainer that runs on the host is told it by CUDA_VISIBLE_DEVICES=MIG-<uuid>, the only spelling CUDA takes for a MIG
device, and trains on `cuda:0`, the one device it then sees."""

from __future__ import annotations

from collections.abc import Mapping

from .schema import JobConfig


def placed_config(written: JobConfig, gpus: tuple[int | str, ...],
                  mig_uuids: Mapping[str, str] | None = None) -> JobConfig:
    """`written` with `gpus` named. One rank trains on `cuda:<its GPU>` (Isaac Lab's --device; a container sees it
    renumbered, gpu/assign.container_device); several ranks get `cuda` and CUDA_VISIBLE_DEVICES (torchrun's
    LOCAL_RANK picks each one's GPU). device = "cpu" stays on the CPU (a CPU trainer on a scripted host).
    `mig_uuids`: a MIG place's UUID (from the GPU inventory), for CUDA_VISIBLE_DEVICES."""
    if not written.placed_by_isaacd or not gpus:
        return written
    device = written.device
    mig = [g for g in gpus if isinstance(g, str)]
    update: dict[str, object] = {}
    if device.startswith("cuda"):
        device = "cuda:0" if mig else f"cuda:{gpus[0]}" if len(gpus) == 1 else "cuda"
    if mig and not written.in_container:
        uuids = [(mig_uuids or {}).get(k) for k in mig]
        if all(uuids):  # not known yet (no inventory): JobSetting.place asks again each tick before the launch
            update["environment"] = {**written.environment, "CUDA_VISIBLE_DEVICES": ",".join(u for u in uuids if u)}
    # model_copy skips validation on purpose: `gpus` as a list beside `gpu_memory` is refused in a file (it would
    # mean pinned and placed at once), yet it is exactly what a placed job is
    return written.model_copy(update={"gpus": list(gpus), "device": device,
                                      "nproc_per_node": written.ranks if written.ranks > 1 else None, **update})
