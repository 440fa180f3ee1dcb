"""Is this trainer's last output a CUDA out-of-memory? The forms upstream prints, and what to do about each.

A trainer that ran out of GPU memory exits like any crash (Python: code 1 after the traceback; a C++ abort:
SIGABRT). Only its output says why, so the exit's output tail (attempt/exit_tail.py) is matched against the texts the
libraries under an Isaac Lab trainer really print. Each form names the source it was read from:

torch (``kind = "torch"``)
    The caching allocator's ``TORCH_CHECK_WITH(OutOfMemoryError, ...)``, pytorch/pytorch
    c10/cuda/CUDACachingAllocator.cpp ``DeviceCachingAllocator::malloc`` (read at commit 001074d2): "CUDA out of
    memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of ... of which ... is free. Process 4242 has
    ... memory in use. ...". Uncaught, Python prints ``torch.OutOfMemoryError: CUDA out of memory. ...`` and exits
    1 (checked on torch 2.13: ``torch.cuda.OutOfMemoryError is torch.OutOfMemoryError``); torch 1.x said
    ``RuntimeError: CUDA out of memory.``; escaping in C++, ``what():  CUDA out of memory. ...`` then SIGABRT.
CUDA runtime (``kind = "cuda"``)
    Allocations outside the caching allocator (the CUDA context itself, cuBLAS handles) fail through
    ``C10_CUDA_CHECK``: c10/cuda/CUDAException.cpp ``c10_cuda_check_implementation`` (commit 0e4c6cd6) raises
    ``torch.AcceleratorError: CUDA error: out of memory`` (``cudaGetErrorString(cudaErrorMemoryAllocation)``).
    The CUDA math libraries' handles fail the same way with their own status names, through aten's
    ``TORCH_CUDABLAS_CHECK`` (aten/src/ATen/cuda/Exceptions.h: "CUDA error: " + ``_cublasGetErrorEnum`` + " when
    calling `...`"). **Seen on the H200** (bench/cuda_oom_h200.py, torch 2.11, a neighbour holding all but 2 GiB):
    the first matmul of the policy died with ``RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling
    `cublasCreate(handle)``` before torch's allocator ever said "out of memory"; cuDNN, cuSOLVER and cuSPARSE
    name the same failure ``*_STATUS_ALLOC_FAILED``, cuFFT ``CUFFT_ALLOC_FAILED``.
Warp (``kind = "warp"``)
    NVIDIA/warp v1.16.0 (86ec8b78): ``wp_alloc_device_default`` does ``check_cuda(cudaMalloc(...))``, whose
    ``check_cuda_result`` (warp/native/cuda_util.cpp) prints "Warp CUDA error 2: out of memory (in function
    ...)" to stderr; then ``CudaDefaultAllocator.allocate`` (warp/_src/context.py; warp/context.py in v1.9.1)
    raises ``RuntimeError: Failed to allocate N bytes on device 'cuda:0'``. The same text for device 'cpu' is
    host memory, not this.
PhysX device memory (``kind = "physx"``)
    NVIDIA-Omniverse/PhysX tag 107.3-physx-5.6.1 (5ca9f472), physx/source/gpucommon/src/PxgCudaMemoryAllocator.cpp:
    "PxgCudaDeviceMemoryAllocator failed to allocate memory N bytes! Result = 2", "PxDeviceAllocatorCallback
    failed to allocate memory N bytes!"; physx/source/cudamanager/src/CudaContextManager.cpp: "Mem allocation
    failed with error code 2!". Isaac Sim logs them as ``[Error] [omni.physx.plugin] PhysX error: ...``.
PhysX GPU buffers (``kind = "physx_buffer"``)
    Fixed-size GPU buffers sized from the scene config, not device memory, but they run out for the same reason
    (too many environments for the configured capacity): physx/source/gpunarrowphase/src/PxgNarrowphaseCore.cpp
    "Contact buffer overflow detected, please increase its size to at least N in the scene desc!", "Patch buffer
    overflow detected, ...", "PxGpuDynamicsMemoryConfig::collisionStackSize buffer overflow detected, please
    increase its size to at least N in the scene desc! Contacts have been dropped."; gpubroadphase
    PxgCudaBroadPhaseSap.cpp / PxgAABBManager.cpp: "The application needs to increase
    PxGpuDynamicsMemoryConfig::foundLostPairsCapacity to N, otherwise, the simulation will miss interactions".
    PhysX reports these and simulates on with contacts dropped; they count here only when the trainer then exited.

Pure: text in, a verdict out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

KINDS = ("torch", "cuda", "warp", "physx", "physx_buffer")

# (kind, pattern), most specific first; all are searched in every line
_FORMS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("torch", re.compile(r"\bCUDA out of memory\b")),
    ("cuda", re.compile(r"\bCUDA error: out of memory\b"
                        r"|\b(CUBLAS|CUBLASLT|CUDNN|CUSOLVER|CUSPARSE)_STATUS_ALLOC_FAILED\b|\bCUFFT_ALLOC_FAILED\b")),
    ("warp", re.compile(r"\bWarp CUDA error 2: out of memory\b"
                        r"|\bFailed to allocate \d+ bytes on device 'cuda(:\d+)?'")),
    ("physx", re.compile(r"\b(PxgCudaDeviceMemoryAllocator|PxDeviceAllocatorCallback) failed to allocate memory\b"
                         r"|\bMem allocation failed with error code\b")),
    ("physx_buffer", re.compile(r"\bbuffer overflow detected, please increase\b"
                                r"|\bThe application needs to increase PxG\w*DynamicsMemoryConfig::")),
)
# A buffer overflow is reported and simulated past; an allocation failure is what ended the process. When both
# are in the tail, the allocation failure is the cause.
_RANK = {"torch": 0, "cuda": 0, "warp": 0, "physx": 0, "physx_buffer": 1}
# the PhysX config field a buffer message names -> Isaac Lab's PhysxCfg field (isaaclab/sim/simulation_cfg.py)
_PHYSX_FIELDS = {
    "Contact buffer": "gpu_max_rigid_contact_count",
    "Patch buffer": "gpu_max_rigid_patch_count",
    "collisionStackSize": "gpu_collision_stack_size",
    "foundLostPairsCapacity": "gpu_found_lost_pairs_capacity",
    "foundLostAggregatePairsCapacity": "gpu_found_lost_aggregate_pairs_capacity",
    "totalAggregatePairsCapacity": "gpu_total_aggregate_pairs_capacity",
}


@dataclass(frozen=True)
class CudaOomLine:
    """The line that says the trainer ran out of GPU memory, and which library said it."""

    kind: str  # one of KINDS
    line: str

    @property
    def physx_field(self) -> str | None:
        """For a PhysX buffer overflow: the Isaac Lab ``sim.physx`` field to raise, when the message names one."""
        if self.kind != "physx_buffer":
            return None
        # the longest name first: "foundLostAggregatePairsCapacity" before "foundLostPairsCapacity"
        for name in sorted(_PHYSX_FIELDS, key=len, reverse=True):
            if name in self.line:
                return _PHYSX_FIELDS[name]
        return None

    def fix(self) -> str:
        """What the operator can do, in a clause."""
        if self.kind == "physx_buffer":
            field = self.physx_field
            knob = f"env.sim.physx.{field}=<larger>" if field else "the env.sim.physx.gpu_* buffer it names"
            return f"raise {knob} (a Hydra override in extra_args) or lower num_envs"
        return "free the GPU memory other processes hold, lower num_envs"


def find_cuda_oom(lines: Iterable[str]) -> CudaOomLine | None:
    """The CUDA out-of-memory line of a trainer's last output, or None when it is something else.

    Of several, the last allocation failure wins (the one that ended the process); a PhysX buffer overflow only
    when no allocation failed."""
    best: CudaOomLine | None = None
    for raw in lines:
        line = raw.strip()
        for kind, pattern in _FORMS:
            if pattern.search(line):
                if best is None or _RANK[kind] <= _RANK[best.kind]:
                    best = CudaOomLine(kind, line)
                break
    return best
