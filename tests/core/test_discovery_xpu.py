"""`--device auto` on an Intel GPU: no NVML, no CUDA; torch.xpu is read (issue 11, XPU as a device vendor)."""
from __future__ import annotations

from types import SimpleNamespace

import pynvml
import pytest

from nsa_policy.base.errors import DeviceDiscoveryError, InputError
from nsa_policy.catalog.store import load_catalog
from nsa_policy.integration.discovery import _read_torch_xpu, discover

NO_NVML = pynvml.NVMLError_LibraryNotFound


class FakeNVML:
    """NVML that fails at init, as on a machine without an NVIDIA driver."""

    def nvmlInit(self) -> None:
        raise NO_NVML()

    def nvmlShutdown(self) -> None:  # pragma: no cover - init already failed
        pass


def _fake_torch(names: list[str], memory: int = 128_000_000_000) -> SimpleNamespace:
    props = [SimpleNamespace(name=n, total_memory=memory, gpu_subslice_count=128) for n in names]
    xpu = SimpleNamespace(is_available=lambda: bool(names), device_count=lambda: len(names),
                          get_device_properties=lambda i: props[i])
    return SimpleNamespace(xpu=xpu)


def test_torch_xpu_reading_names_the_catalog_device() -> None:
    reading = _read_torch_xpu(_fake_torch(["Intel(R) Data Center GPU Max 1550"]), 0)
    dev = discover(load_catalog(), nvml=FakeNVML(), torch_reader=lambda index: reading)
    assert (dev.name, dev.device_class, dev.vendor, dev.compute_capability, dev.source) == \
        ("max-1550", "xpu", "intel", None, "torch")
    assert dev.memory_gb == 128.0 and dev.sm_count == 128


def test_unknown_intel_product_falls_back_to_the_xpu_class() -> None:
    reading = _read_torch_xpu(_fake_torch(["Intel(R) Arc(TM) Pro B60 Graphics"], 24_000_000_000), 0)
    dev = discover(load_catalog(), nvml=FakeNVML(), torch_reader=lambda index: reading)
    assert (dev.name, dev.device_class, dev.vendor) == ("Intel(R) Arc(TM) Pro B60 Graphics", "xpu", "intel")


def test_no_xpu_means_no_reading() -> None:
    assert _read_torch_xpu(_fake_torch([]), 0) is None
    assert _read_torch_xpu(SimpleNamespace(), 0) is None  # a torch build without torch.xpu
    with pytest.raises(DeviceDiscoveryError, match="found no GPU"):
        discover(load_catalog(), nvml=FakeNVML(), torch_reader=lambda index: None)


def test_rank_index_beyond_the_xpus_is_an_input_error() -> None:
    with pytest.raises(InputError, match="XPU"):
        _read_torch_xpu(_fake_torch(["Intel(R) Data Center GPU Max 1550"]), 3)


def test_discovered_xpu_resolves_with_the_xpu_defaults() -> None:
    from nsa_policy import resolve

    reading = _read_torch_xpu(_fake_torch(["Intel(R) Data Center GPU Max 1550"]), 0)
    dev = discover(load_catalog(), nvml=FakeNVML(), torch_reader=lambda index: reading)
    d = resolve({}, device=dev, model="deepseek-ai/DeepSeek-V3.2")
    assert (d.kv_cache_dtype, d.prefill_backend, d.decode_backend, d.page_size) == \
        ("bfloat16", "intel_xpu", "intel_xpu", 128)
