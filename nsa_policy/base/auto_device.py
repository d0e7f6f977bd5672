"""`--device auto`: the spelling, apart from discovery, so that resolving a named device never
imports the NVML reader (integration/discovery.py)."""
from __future__ import annotations

from typing import Any

AUTO = "auto"


def is_auto(device: Any) -> bool:
    """'auto' or 'auto:N' (without raising on a malformed index: the resolver reports that)."""
    return isinstance(device, str) and (device.strip().lower() == AUTO or device.strip().lower().startswith(AUTO + ":"))
