"""The config a job the queue placed launches with (issue 31): the job as written, with the GPUs it was given named
as if it had pinned them, so every part downstream (the launch spec, CDI devices, CUDA_VISIBLE_DEVICES, torchrun, the
watchdogs, the status) reads the one spelling it already knows (gpu/assign.py)."""

from __future__ import annotations

from .schema import JobConfig


def placed_config(written: JobConfig, gpus: tuple[int, ...]) -> JobConfig:
    """`written` with `gpus` named. One rank trains on `cuda:<its GPU>` (Isaac Lab's --device; a container sees it
    renumbered, gpu/assign.container_device); several ranks get `cuda` and CUDA_VISIBLE_DEVICES (torchrun's
    LOCAL_RANK picks each one's GPU). device = "cpu" stays on the CPU (a CPU trainer on a scripted host)."""
    if not written.placed_by_isaacd or not gpus:
        return written
    device = written.device
    if device.startswith("cuda"):
        device = f"cuda:{gpus[0]}" if len(gpus) == 1 else "cuda"
    # model_copy skips validation on purpose: `gpus` as a list beside `gpu_memory` is refused in a file (it would
    # mean pinned and placed at once), yet it is exactly what a placed job is
    return written.model_copy(update={"gpus": list(gpus), "device": device,
                                      "nproc_per_node": written.ranks if written.ranks > 1 else None})
