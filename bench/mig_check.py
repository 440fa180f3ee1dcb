"""Read-only: what NVML and isaacd's NVML source say of this host's GPUs and MIG mode, and the places isaacd's queue
makes of them (issue 42: "if an H100/H200 you can use is already in MIG mode, run it there too; otherwise say so").
It changes no GPU setting. On the device machine, with the daemon's dependencies carried as wheels (.dwsmall: the
nvidia-ml-py, pydantic, pydantic-core, structlog, typing-extensions, typing-inspection, annotated-types and
prometheus-client wheels for Python 3.12, taken from the .dw/whl that the workplace's device-wheels.sh makes):
    run carry=[".dwsmall"]: nvidia-smi --query-gpu=index,name,mig.mode.current,mig.mode.pending --format=csv;
        python3 -m pip install -q --no-index --no-deps --target /tmp/s .dwsmall/*.whl; mkdir -p /tmp/pkg;
        ln -sfn "$PWD/daemon" /tmp/pkg/isaacd; PYTHONPATH=/tmp/pkg:/tmp/s python3 bench/mig_check.py"""
from isaacd.gpu.nvml import NvmlSource
from isaacd.gpu.sampler import GpuSampler
from isaacd.scheduling.room import places
import pynvml as nv
nv.nvmlInit()
for i in range(nv.nvmlDeviceGetCount()):
    h = nv.nvmlDeviceGetHandleByIndex(i)
    try:
        cur, pend = nv.nvmlDeviceGetMigMode(h)
    except nv.NVMLError as e:
        cur = pend = f"error: {e}"
    print(f"NVML GPU {i}: {nv.nvmlDeviceGetName(h)} uuid {nv.nvmlDeviceGetUUID(h)} MIG mode current {cur} "
          f"pending {pend} max MIG devices {nv.nvmlDeviceGetMaxMigDeviceCount(h)}")
src = NvmlSource(register_xid=False)
devs = src.open()
for d in devs:
    print("isaacd NvmlSource device:", {k: getattr(d, k) for k in ("key", "index", "model", "is_mig") if hasattr(d, k)})
sampler = GpuSampler(src)
sampler.poll_fast()
snap = sampler.snapshot()
for p in places(snap, 90.0):
    print("isaacd queue place:", p)
