"""Which device class the adapter is actually running on (sm90, sm100, sm120, gfx942, cpu)."""
from __future__ import annotations

from typing import Union

import torch

DeviceLike = Union[str, int, torch.device, None]


def as_device(device: DeviceLike) -> torch.device:
    if device is None:
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() \
            else torch.device("cpu")
    if isinstance(device, int):
        return torch.device("cuda", device)
    return torch.device(device)


def detect_device_class(device: torch.device) -> str:
    """'sm{major}{minor}' for NVIDIA (sm90, sm100, sm103, sm120, sm121), the gfx arch on ROCm,
    'cpu' for the CPU."""
    if device.type == "cpu":
        return "cpu"
    if device.type != "cuda":
        return device.type
    if not torch.cuda.is_available():
        raise RuntimeError(f"device {device} was requested but torch sees no CUDA device")
    from nsa_policy.catalog.store import load_catalog  # the one owner of device classes (as discovery reads them)

    catalog = load_catalog()
    if getattr(torch.version, "hip", None):
        # ROCm: the gfx arch is the class; its reported capability (gfx1250: 12.5) is never read as NVIDIA's
        arch = torch.cuda.get_device_properties(device).gcnArchName.split(":")[0]
        return catalog.vendor_class(arch, "amd") or arch
    major, minor = torch.cuda.get_device_capability(device)
    return catalog.class_for_capability(major, minor) or f"sm{major}{minor}"
