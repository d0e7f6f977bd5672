"""`--device auto`: ask NVML (nvidia-ml-py) for GPU 0; fall back to torch only if it is already installed."""
from __future__ import annotations

import importlib.util
import sys
from typing import Any, Callable, Optional

from nsa_policy.catalog.store import Catalog
from nsa_policy.engine.facts import DeviceFacts
from nsa_policy.errors import DeviceDiscoveryError


def _choices(catalog: Catalog) -> str:
    return ", ".join(catalog.device_choices)


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def facts_from_nvml_reading(reading: dict[str, Any], catalog: Catalog) -> DeviceFacts:
    """Turn what NVML reported (name, compute capability, memory, SM count) into device facts."""
    name = reading["name"]
    major, minor = reading["compute_capability"]
    cls = catalog.class_for_capability(major, minor)
    if cls is None:
        raise DeviceDiscoveryError(
            f"NVML found {name!r} with compute capability {major}.{minor}, which nsa-policy does not know; "
            f"pass --device with one of: {_choices(catalog)}")
    entry = catalog.device_for_product(name)
    mem = reading.get("memory_total_bytes")
    base = catalog.device(entry) if entry else None
    return DeviceFacts(
        name=entry or name, device_class=cls, vendor="nvidia", compute_capability=(major, minor), product_name=name,
        memory_gb=round(mem / 1e9, 1) if mem else (base.memory_gb if base else None),
        sm_count=reading.get("sm_count") or (base.sm_count if base else None), source=reading.get("source", "nvml"))


def read_nvml(nvml: Any = None, index: int = 0) -> dict[str, Any]:
    """Read GPU `index` through NVML. Raises DeviceDiscoveryError with the reason when NVML is unusable."""
    if nvml is None:
        try:
            import pynvml as nvml  # type: ignore[no-redef]  # provided by nvidia-ml-py
        except ImportError as exc:
            raise DeviceDiscoveryError(f"NVML bindings missing (pip install nvidia-ml-py): {exc}") from None
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, _DriverNotLoaded, …
        raise DeviceDiscoveryError(f"NVML unavailable ({type(exc).__name__}: {_text(exc)}): "
                                   "no NVIDIA driver or libnvidia-ml on this machine") from None
    try:
        count = nvml.nvmlDeviceGetCount()
        if count < 1:
            raise DeviceDiscoveryError("NVML reports no NVIDIA GPU")
        h = nvml.nvmlDeviceGetHandleByIndex(index)
        name = _text(nvml.nvmlDeviceGetName(h))
        major, minor = nvml.nvmlDeviceGetCudaComputeCapability(h)
        reading = {"name": name, "compute_capability": [int(major), int(minor)], "device_count": int(count),
                   "source": "nvml"}
        try:
            reading["memory_total_bytes"] = int(nvml.nvmlDeviceGetMemoryInfo(h).total)
        except Exception:
            pass
        try:
            reading["driver_version"] = _text(nvml.nvmlSystemGetDriverVersion())
        except Exception:
            pass
        return reading
    except DeviceDiscoveryError:
        raise
    except Exception as exc:
        raise DeviceDiscoveryError(f"NVML query failed ({type(exc).__name__}: {_text(exc)})") from None
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def read_torch() -> Optional[dict[str, Any]]:
    """Only when torch is installed already (never installed or imported on the NVML path)."""
    if importlib.util.find_spec("torch") is None:
        return None
    import torch  # noqa: PLC0415 - deliberate lazy import, fallback only

    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    hip = getattr(torch.version, "hip", None)
    return {"name": props.name, "compute_capability": [props.major, props.minor],
            "memory_total_bytes": int(props.total_memory), "sm_count": int(props.multi_processor_count),
            "hip": bool(hip), "gcn_arch": getattr(props, "gcnArchName", None), "source": "torch"}


def _facts_from_torch(reading: dict[str, Any], catalog: Catalog) -> DeviceFacts:
    if reading.get("hip"):
        arch = (reading.get("gcn_arch") or "").split(":")[0]
        cls = catalog.vendor_class(arch, "amd")  # ROCm classes are named by their gfx arch
        if cls is None:
            raise DeviceDiscoveryError(f"torch (ROCm) reports {reading['name']!r} ({arch or 'unknown arch'}), "
                                       f"not a device class of the catalog; pass --device with one of: {_choices(catalog)}")
        base = catalog.device(cls)
        return DeviceFacts(name=reading["name"], device_class=cls, vendor="amd",
                           compute_capability=base.compute_capability, product_name=reading["name"],
                           memory_gb=round(reading["memory_total_bytes"] / 1e9, 1), sm_count=reading.get("sm_count"),
                           source="torch")
    return facts_from_nvml_reading(reading, catalog)


def discover(catalog: Catalog, *, nvml: Any = None,
             torch_reader: Callable[[], Optional[dict[str, Any]]] = read_torch) -> DeviceFacts:
    try:
        return facts_from_nvml_reading(read_nvml(nvml), catalog)
    except DeviceDiscoveryError as nvml_error:
        first = str(nvml_error)
    try:
        reading = torch_reader()
    except Exception as exc:  # a broken torch install must not hide the NVML reason
        reading = None
        first += f"; torch fallback failed: {type(exc).__name__}: {exc}"
    if reading:
        return _facts_from_torch(reading, catalog)
    torch_note = "" if "torch" in sys.modules or importlib.util.find_spec("torch") else " (torch not installed)"
    raise DeviceDiscoveryError(
        f"--device auto found no GPU: {first}; torch fallback found none{torch_note}. "
        f"Resolve offline with --device NAME, one of: {_choices(catalog)}")
