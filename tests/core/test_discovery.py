"""`--device auto`: NVML through nvidia-ml-py, the torch fallback, and the no-GPU path, for real and faked."""
from __future__ import annotations

import json
from pathlib import Path

import pynvml
import pytest
from typer.testing import CliRunner

from nsa_policy import DeviceDiscoveryError, resolve
from nsa_policy.catalog.store import load_catalog
from nsa_policy.integration.discovery import discover, read_nvml

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


class FakeNVML:
    """Stands in for the pynvml module, replaying a reading; raises pynvml's own error types."""

    def __init__(self, name: str | bytes, cc: tuple[int, int], total: int = 150_000_000_000, fail_init=None):
        self.name, self.cc, self.total, self.fail_init = name, cc, total, fail_init
        self.shutdown_called = False

    def nvmlInit(self):
        if self.fail_init:
            raise self.fail_init

    def nvmlShutdown(self):
        self.shutdown_called = True

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, i):
        return object()

    def nvmlDeviceGetName(self, h):
        return self.name

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return self.cc

    def nvmlDeviceGetMemoryInfo(self, h):
        return type("Mem", (), {"total": self.total})()

    def nvmlSystemGetDriverVersion(self):
        return "580.159.03"


def test_nvml_reading_maps_to_catalog_device() -> None:
    fake = FakeNVML(b"NVIDIA B200", (10, 0), total=191_000_000_000)
    dev = discover(load_catalog(), nvml=fake)
    assert (dev.name, dev.device_class, dev.source, dev.product_name) == ("b200", "sm100", "nvml", "NVIDIA B200")
    assert dev.memory_gb == 191.0 and dev.sm_count == 148  # SM count from the catalog entry
    assert fake.shutdown_called


def test_unknown_product_with_known_capability() -> None:
    dev = discover(load_catalog(), nvml=FakeNVML("NVIDIA Future 9000", (10, 3)))
    assert dev.device_class == "sm103" and dev.name == "NVIDIA Future 9000"


def test_sm120_is_its_own_class_not_blackwell_datacenter() -> None:
    dev = discover(load_catalog(), nvml=FakeNVML("NVIDIA RTX PRO 6000 Blackwell Server Edition", (12, 0)))
    assert (dev.name, dev.device_class) == ("rtx-pro-6000", "sm120")


def test_unknown_capability_is_explained() -> None:
    with pytest.raises(DeviceDiscoveryError, match="compute capability 7.5"):
        discover(load_catalog(), nvml=FakeNVML("Tesla T4", (7, 5)))


@pytest.mark.parametrize("error", [pynvml.NVMLError_LibraryNotFound, pynvml.NVMLError_DriverNotLoaded])
def test_nvml_errors_are_caught_and_choices_listed(error) -> None:
    fake = FakeNVML("x", (9, 0), fail_init=error())
    with pytest.raises(DeviceDiscoveryError) as exc:
        discover(load_catalog(), nvml=fake, torch_reader=lambda index: None)
    text = str(exc.value)
    assert "NVML unavailable" in text and "--device" in text and "h200" in text and "mi300x" in text


def test_torch_fallback_used_when_nvml_fails() -> None:
    reading = {"name": "NVIDIA H100 80GB HBM3", "compute_capability": [9, 0], "memory_total_bytes": 85_000_000_000,
               "sm_count": 132, "hip": False, "source": "torch"}
    dev = discover(load_catalog(), nvml=FakeNVML("x", (0, 0), fail_init=pynvml.NVMLError_LibraryNotFound()),
                   torch_reader=lambda index: reading)
    assert (dev.name, dev.device_class, dev.source) == ("h100", "sm90", "torch")


def test_torch_fallback_rocm() -> None:
    reading = {"name": "AMD Instinct MI300X", "compute_capability": [9, 4], "memory_total_bytes": 205_000_000_000,
               "sm_count": 304, "hip": True, "gcn_arch": "gfx942:sramecc+:xnack-", "source": "torch"}
    dev = discover(load_catalog(), nvml=FakeNVML("x", (0, 0), fail_init=pynvml.NVMLError_LibraryNotFound()),
                   torch_reader=lambda index: reading)
    assert (dev.device_class, dev.vendor) == ("gfx942", "amd")


def test_torch_fallback_rocm_gfx1250_is_its_own_amd_class() -> None:
    # gfx1250 reports compute capability (12, 5): the class comes from the gfx arch, never from 12.x
    reading = {"name": "AMD Radeon gfx1250", "compute_capability": [12, 5], "memory_total_bytes": 32_000_000_000,
               "sm_count": 64, "hip": True, "gcn_arch": "gfx1250", "source": "torch"}
    dev = discover(load_catalog(), nvml=FakeNVML("x", (0, 0), fail_init=pynvml.NVMLError_LibraryNotFound()),
                   torch_reader=lambda index: reading)
    assert (dev.device_class, dev.vendor, dev.compute_capability) == ("gfx1250", "amd", (12, 5))


def test_nvml_thor_is_sm110() -> None:
    dev = discover(load_catalog(), nvml=FakeNVML("NVIDIA Thor", (11, 0)))
    assert (dev.device_class, dev.vendor, dev.compute_capability) == ("sm110", "nvidia", (11, 0))


def test_real_no_gpu_path_on_this_machine() -> None:
    """This machine (and CI) has nvidia-ml-py but no driver: the real NVML call fails and is explained."""
    try:
        reading = read_nvml()
    except DeviceDiscoveryError as exc:
        assert "NVML" in str(exc)
    else:  # pragma: no cover - only on a machine with a GPU
        pytest.skip(f"this machine has a GPU ({reading['name']}); the no-GPU path cannot be exercised here")
    with pytest.raises(DeviceDiscoveryError) as exc:
        resolve({}, model="deepseek-ai/DeepSeek-V3.2")  # device="auto" is the default
    assert "--device" in str(exc.value) and "b200" in str(exc.value)
    from nsa_policy.cli import app

    result = CliRunner().invoke(app, ["resolve", "--model", "deepseek-ai/DeepSeek-V3.2"])
    assert result.exit_code == 2 and "found no GPU" in result.output and "Traceback" not in result.output


def test_h200_nvml_fixture_recorded_on_the_lent_gpu() -> None:
    """What NVML printed on the lent NVIDIA H200 (benchmarks/gpu_runtime_check.py), replayed through discovery."""
    path = FIXTURES / "nvml_h200.json"
    assert path.is_file(), f"missing fixture {path}: it is recorded on the H200 by the GPU check script"
    rec = json.loads(path.read_text())
    nv = rec["nvml"] if "nvml" in rec else rec
    name = nv["name"]
    cc = tuple(nv.get("compute_capability") or nv.get("cuda_compute_capability"))
    total = nv.get("memory_total_bytes") or nv.get("memory_total")
    dev = discover(load_catalog(), nvml=FakeNVML(name, cc, total=int(total)))
    assert (dev.name, dev.device_class, dev.vendor) == ("h200", "sm90", "nvidia")
    assert 139 <= dev.memory_gb <= 152
