"""Recognising a CUDA out-of-memory in a trainer's last output (daemon/gpu/oom_message.py) and in its exit (attempt/exit_tail.py).

The texts are the ones upstream prints (sources named in daemon/gpu/oom_message.py), as they reach the job's log.
"""

from __future__ import annotations

import signal

import pytest

from isaacd.gpu.oom_message import find_cuda_oom
from isaacd.attempt.exit_tail import exit_with_log_tail
from isaacd.runtimes.base import ExitStatus, Handle

TORCH = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB. GPU 0 has a total capacity of "
         "79.15 GiB of which 1.58 GiB is free. Process 2493055 has 70.02 GiB memory in use. Including non-PyTorch "
         "memory, this process has 7.50 GiB memory in use. Of the allocated memory 6.80 GiB is allocated by PyTorch, "
         "and 33.93 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try "
         "setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
         "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
HYDRA_TAIL = ["", "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace."]


@pytest.mark.parametrize("line, kind", [
    (TORCH, "torch"),
    ("RuntimeError: CUDA out of memory. Tried to allocate 36.00 MiB (GPU 0; 7.93 GiB total capacity; ...)", "torch"),
    ("  what():  CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 79.15 GiB", "torch"),
    ("torch.AcceleratorError: CUDA error: out of memory", "cuda"),
    # seen on the H200 (bench/results/issue23-h200-cuda-oom-before.txt): a nearly full GPU failed cuBLAS's handle
    # before torch's allocator said "out of memory"; isaacd read it as a plain crash and looped with backoff
    ("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`", "cuda"),
    ("RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED", "cuda"),
    ("Warp CUDA error 2: out of memory (in function wp_alloc_device_default, /builds/warp/native/warp.cu:781)",
     "warp"),
    ("RuntimeError: Failed to allocate 4294967296 bytes on device 'cuda:0'", "warp"),
    ("[Error] [omni.physx.plugin] PhysX error: PxgCudaDeviceMemoryAllocator failed to allocate memory 1073741824 "
     "bytes! Result = 2, FILE /builds/physx/source/gpucommon/src/PxgCudaMemoryAllocator.cpp, LINE 140", "physx"),
    ("[Error] [omni.physx.plugin] PhysX error: PxGpuDynamicsMemoryConfig::collisionStackSize buffer overflow "
     "detected, please increase its size to at least 123456 in the scene desc! Contacts have been dropped.",
     "physx_buffer"),
    ("PhysX error: The application needs to increase PxGpuDynamicsMemoryConfig::foundLostPairsCapacity to 2097152, "
     "otherwise, the simulation will miss interactions", "physx_buffer"),
])
def test_each_upstream_form_is_recognised(line, kind):  # noqa: ANN001
    found = find_cuda_oom(["[INFO] Logging experiment in directory: /x", line, *HYDRA_TAIL])
    assert found is not None and found.kind == kind and found.line == line.strip()


@pytest.mark.parametrize("line", [
    "RuntimeError: Failed to allocate 4096 bytes on device 'cpu'",  # Warp's host allocation: not the GPU
    "RuntimeError: [enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory",
    "OSError: [Errno 28] No space left on device",
    "ValueError: rewards are not finite",
    "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling `cublasGemmEx(handle, ...)`",
])
def test_other_failures_are_not_cuda_oom(line):  # noqa: ANN001
    assert find_cuda_oom(["Traceback (most recent call last):", line, *HYDRA_TAIL]) is None


def test_the_allocation_failure_wins_over_an_earlier_buffer_overflow():
    overflow = "PhysX error: Patch buffer overflow detected, please increase its size to at least 9 in the scene desc!"
    found = find_cuda_oom([overflow, TORCH, overflow])
    assert found is not None and found.kind == "torch"


def test_buffer_overflow_fix_names_isaac_labs_physx_field():
    found = find_cuda_oom(["PhysX error: The application needs to increase "
                           "PxGpuDynamicsMemoryConfig::foundLostAggregatePairsCapacity to 7, otherwise ..."])
    assert found is not None and found.physx_field == "gpu_found_lost_aggregate_pairs_capacity"
    assert "env.sim.physx.gpu_found_lost_aggregate_pairs_capacity=<larger>" in found.fix()
    assert find_cuda_oom([TORCH]).fix().startswith("free the GPU memory")  # type: ignore[union-attr]


# ---- the exit -----------------------------------------------------------------------------------
def _exit(tmp_path, lines: list[str], status: ExitStatus, before: list[str] = ()):  # noqa: ANN001, ANN202
    log = tmp_path / "job.log"
    earlier = "".join(f"{ln}\n" for ln in before).encode()
    log.write_bytes(earlier + "".join(f"{ln}\n" for ln in lines).encode())
    return exit_with_log_tail(status, Handle("process", "j", {"log_path": str(log), "log_offset": len(earlier)}))


def test_exit_with_a_torch_oom_traceback_is_the_cuda_oom_class(tmp_path):
    noise = [f"[INFO] kit shutdown step {i}" for i in range(30)]  # more than the 8 quoted lines after it
    st = _exit(tmp_path, ["Traceback (most recent call last):", '  File "train.py", line 9', TORCH, *HYDRA_TAIL,
                          *noise], ExitStatus(code=1))
    assert st.reason_class == "cuda_oom"
    assert st.describe().startswith("exited with code 1: torch.OutOfMemoryError: CUDA out of memory.")
    assert st.as_json()["cuda_oom"] == {"kind": "torch", "line": TORCH}


def test_exit_with_another_error_keeps_its_class(tmp_path):
    st = _exit(tmp_path, ["OSError: [Errno 28] No space left on device"], ExitStatus(code=1))
    assert st.reason_class == "exit_code" and "cuda_oom" not in st.as_json()


def test_an_earlier_attempts_oom_is_not_this_attempts(tmp_path):
    st = _exit(tmp_path, ["ValueError: bad config"], ExitStatus(code=1), before=[TORCH])
    assert st.reason_class == "exit_code"


def test_abort_after_an_uncaught_cxx_oom_is_read(tmp_path):
    st = _exit(tmp_path, ["terminate called after throwing an instance of 'c10::OutOfMemoryError'",
                          "  what():  CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity"],
               ExitStatus(signal=signal.SIGABRT))
    assert st.reason_class == "cuda_oom"


@pytest.mark.parametrize("status", [ExitStatus(signal=signal.SIGKILL), ExitStatus(code=137, oom_killed=True),
                                    ExitStatus(code=0)])
def test_kills_and_clean_exits_are_not_read_for_an_oom(tmp_path, status):  # noqa: ANN001
    st = _exit(tmp_path, [TORCH], status)
    assert st.reason_class != "cuda_oom"
