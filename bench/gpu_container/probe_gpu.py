"""What a container sees of the GPUs: device nodes, NVML, CUDA (and one matmul when there is a GPU)."""
import glob
import json
import os

out = {"dev_nvidia": sorted(glob.glob("/dev/nvidia*")), "NVIDIA_VISIBLE_DEVICES": os.environ.get("NVIDIA_VISIBLE_DEVICES"),
       "CapEff": next((ln.split()[1] for ln in open("/proc/self/status") if ln.startswith("CapEff:")), None)}
try:
    import pynvml

    pynvml.nvmlInit()
    out["nvml"] = [pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))
                   for i in range(pynvml.nvmlDeviceGetCount())]
except Exception as exc:  # noqa: BLE001
    out["nvml"] = f"error: {exc}"
import torch

out["cuda_available"] = torch.cuda.is_available()
out["cuda_devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
if torch.cuda.is_available():
    x = torch.randn(4096, 4096, device="cuda:0")
    out["matmul_ok"] = bool(torch.isfinite((x @ x).sum()).item())
print("PROBE " + json.dumps(out))
