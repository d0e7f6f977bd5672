"""Record what NVML and torch report for GPU 0, as JSON (a fixture for device discovery).

Usage: python3 benchmarks/gpu_nvml_probe.py OUT.json
"""
from __future__ import annotations

import datetime
import json
import sys


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


def nvml_facts() -> dict:
    import pynvml

    facts: dict = {"module": getattr(pynvml, "__file__", None)}
    pynvml.nvmlInit()
    try:
        facts["device_count"] = pynvml.nvmlDeviceGetCount()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        facts["name"] = _text(pynvml.nvmlDeviceGetName(handle))
        facts["cuda_compute_capability"] = list(pynvml.nvmlDeviceGetCudaComputeCapability(handle))
        facts["memory_total_bytes"] = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
        if hasattr(pynvml, "nvmlDeviceGetNumGpuCores"):
            try:
                facts["num_gpu_cores"] = int(pynvml.nvmlDeviceGetNumGpuCores(handle))
            except pynvml.NVMLError as exc:  # not supported on every driver
                facts["num_gpu_cores_error"] = str(exc)
        else:
            facts["num_gpu_cores_error"] = "nvmlDeviceGetNumGpuCores not in this pynvml"
        facts["driver_version"] = _text(pynvml.nvmlSystemGetDriverVersion())
        facts["nvml_version"] = _text(pynvml.nvmlSystemGetNVMLVersion())
    finally:
        pynvml.nvmlShutdown()
    return facts


def torch_facts() -> dict:
    import torch

    p = torch.cuda.get_device_properties(0)
    return {"torch_version": torch.__version__, "cuda_version": torch.version.cuda, "name": p.name,
            "major": p.major, "minor": p.minor, "multi_processor_count": p.multi_processor_count,
            "total_memory": int(p.total_memory)}


def main(path: str) -> None:
    record = {"measured_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    for key, probe in (("nvml", nvml_facts), ("torch", torch_facts)):
        try:
            record[key] = probe()
        except Exception as exc:  # record the failure, keep the other half
            record[key] = {"error": repr(exc)}
    with open(path, "w") as f:
        json.dump(record, f, indent=1)
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "nvml_h200.json")
