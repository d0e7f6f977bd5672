"""`--device auto` on a multi-GPU node: the rank's GPU via LOCAL_RANK and CUDA_VISIBLE_DEVICES, mapped onto
NVML by PCI bus id; explicit indices; the mixed-node report; bad variables. NVML is a fake module with
nvidia-ml-py's function names, replaying tests/fixtures (nvml_h200.json: a real reading; nvml_mixed_node.json:
a synthetic 4-GPU node, see its note)."""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import pynvml
import pytest
from typer.testing import CliRunner

from nsa_policy import resolve
from nsa_policy.base.errors import InputError
from nsa_policy.catalog.store import load_catalog
from nsa_policy.engines.sglang import startup
from nsa_policy.integration.discovery import auto_index, discover, mixed_node, read_node

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
MODEL = "deepseek-ai/DeepSeek-V3.2"


class FakeNVML:
    """The pynvml calls discovery makes, answering from a list of recorded devices (NVML index order)."""

    NVMLError_NotSupported = pynvml.NVMLError_NotSupported

    def __init__(self, devices: list[dict], driver: str = "580.159.04"):
        self.devices, self.driver = devices, driver
        self.inits = self.shutdowns = 0

    @classmethod
    def from_fixture(cls, name: str) -> FakeNVML:
        rec = json.loads((FIXTURES / name).read_text())["nvml"]
        if "devices" in rec:
            return cls(rec["devices"], rec["driver_version"])
        # the single-GPU recording (nvml_h200.json) has no PCI id/UUID: give it the ones a lone GPU would have
        return cls([{"name": rec["name"], "cuda_compute_capability": rec["cuda_compute_capability"],
                     "memory_total_bytes": rec["memory_total_bytes"], "pci_bus_id": "00000000:19:00.0",
                     "uuid": "GPU-00000000-0000-0000-0000-000000000000", "mig": []}], rec["driver_version"])

    def nvmlInit(self):
        self.inits += 1

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetCount(self):
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i):
        if not 0 <= i < len(self.devices):
            raise pynvml.NVMLError_InvalidArgument()
        return ("gpu", i)

    def _dev(self, h):
        return self.devices[h[1]]

    def nvmlDeviceGetName(self, h):
        return self._dev(h)["name"]

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return tuple(self._dev(h)["cuda_compute_capability"])

    def nvmlDeviceGetMemoryInfo(self, h):
        return type("c_nvmlMemory_t", (), {"total": self._dev(h)["memory_total_bytes"]})()

    def nvmlDeviceGetPciInfo(self, h):
        return type("nvmlPciInfo_t", (), {"busId": self._dev(h)["pci_bus_id"].encode()})()

    def nvmlDeviceGetUUID(self, h):
        if h[0] == "mig":
            return self._dev(h)["mig"][h[2]].encode()
        return self._dev(h)["uuid"].encode()

    def nvmlDeviceGetMaxMigDeviceCount(self, h):
        if not self._dev(h)["mig"]:
            raise pynvml.NVMLError_NotSupported()
        return len(self._dev(h)["mig"])

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, i):
        return ("mig", h[1], i)

    def nvmlSystemGetDriverVersion(self):
        return self.driver


@pytest.fixture
def mixed() -> FakeNVML:
    return FakeNVML.from_fixture("nvml_mixed_node.json")


def names(node) -> list[tuple[int, str, str]]:
    return [(g.cuda_index, g.name, g.pci_bus_id) for g in node.gpus]


# ---- CUDA's order and CUDA_VISIBLE_DEVICES -------------------------------------------------------------

def test_pci_bus_id_order_sorts_nvml_devices_by_bus(mixed) -> None:
    node = read_node(mixed, env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert [g.nvml_index for g in node.gpus] == [1, 2, 3, 0]  # buses 19, 3B, 9A, DB
    assert [g.pci_bus_id for g in node.gpus] == sorted(g.pci_bus_id for g in node.gpus)
    assert node.order == "PCI_BUS_ID" and node.notes == ()  # exact mapping: no caveat
    assert mixed.shutdowns == mixed.inits == 1


def test_default_order_is_nvml_order_with_a_caveat_on_a_mixed_node(mixed) -> None:
    node = read_node(mixed, env={})
    assert [g.nvml_index for g in node.gpus] == [0, 1, 2, 3] and node.order == "FASTEST_FIRST"
    assert len(node.notes) == 1 and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in node.notes[0]


def test_cuda_visible_devices_reorders_and_hides(mixed) -> None:
    env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "3,1", "LOCAL_RANK": "1"}
    node = read_node(mixed, env=env)
    # CUDA index 3 in PCI order = bus DB (NVML 0, B200); CUDA index 1 = bus 3B (NVML 2, H200)
    assert names(node) == [(0, "NVIDIA B200", "00000000:DB:00.0"), (1, "NVIDIA H200", "00000000:3B:00.0")]
    assert node.rank_index == 1 and node.rank_source == "LOCAL_RANK=1" and node.rank_gpu.nvml_index == 2


def test_uuid_entries_and_unique_prefixes(mixed) -> None:
    env = {"CUDA_VISIBLE_DEVICES": "GPU-h200bbbb-1111-2222-3333-444455556666, GPU-b200a"}
    node = read_node(mixed, env=env)
    assert [(g.nvml_index, g.name) for g in node.gpus] == [(2, "NVIDIA H200"), (0, "NVIDIA B200")]
    assert node.rank_gpu.uuid == "GPU-h200bbbb-1111-2222-3333-444455556666"
    assert node.notes == ()  # UUIDs name GPUs whatever CUDA's order: no fastest-first caveat


def test_mig_ids_resolve_to_the_parent_gpu(mixed) -> None:
    node = read_node(mixed, env={"CUDA_VISIBLE_DEVICES": "MIG-5c1a7e2f-0000-5a5a-8d8d-000000000002"})
    assert [(g.nvml_index, g.name, g.mig) for g in node.gpus] == [
        (2, "NVIDIA H200", "MIG-5c1a7e2f-0000-5a5a-8d8d-000000000002")]
    old = read_node(mixed, env={"CUDA_VISIBLE_DEVICES": "MIG-GPU-h200bbbb-1111-2222-3333-444455556666/1/0"})
    assert old.rank_gpu.nvml_index == 2
    dev = discover(load_catalog(), nvml=mixed, env={"CUDA_VISIBLE_DEVICES": "MIG-5c1a7e2f-0000-5a5a-8d8d-000000000001"})
    assert (dev.name, dev.device_class) == ("h200", "sm90")


# ---- which GPU is the rank's ----------------------------------------------------------------------------

@pytest.mark.parametrize(("local_rank", "expected"), [(None, "b200"), ("0", "b200"), ("1", "h200"), ("2", "h200"),
                                                      ("3", "b200")])
def test_local_rank_selects_the_gpu(mixed, local_rank, expected) -> None:
    env = {} if local_rank is None else {"LOCAL_RANK": local_rank}
    dev = discover(load_catalog(), nvml=mixed, env=env)
    assert dev.name == expected and dev.source == "nvml"


def test_explicit_index_wins_over_local_rank(mixed) -> None:
    env = {"LOCAL_RANK": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert discover(load_catalog(), nvml=mixed, env=env).name == "h200"  # cuda:0 = bus 19
    assert discover(load_catalog(), nvml=mixed, env=env, device_index=3).name == "b200"  # bus DB
    assert auto_index("auto:3") == (True, 3) and auto_index(" AUTO ") == (True, None) and auto_index("h200") == (False, None)


def test_library_device_auto_n_and_local_rank(mixed, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", mixed)
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert resolve({}, model=MODEL, device="auto").device_class == "sm100"  # cuda:3 = B200 on bus DB
    assert resolve({}, model=MODEL, device="auto:0").device_class == "sm90"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    with pytest.raises(InputError, match="LOCAL_RANK: '3' is not valid.*only 1 GPU visible"):
        resolve({}, model=MODEL, device="auto")


def test_startup_apply_uses_the_ranks_gpu(mixed, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", mixed)
    # LOCAL_RANK and CUDA_* are read from the process environment (os.environ), like CUDA does
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    monkeypatch.setenv("LOCAL_RANK", "2")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    args2 = argparse.Namespace(model_path=MODEL, dsa_prefill_backend=None, dsa_decode_backend=None)
    rank2 = startup.apply(args2, env={}, sglang_version="0.5.23")
    assert (rank2.decision.device, rank2.decision.device_class) == ("b200", "sm100")  # cuda:2 = bus 9A
    args0 = argparse.Namespace(model_path=MODEL, dsa_prefill_backend=None, dsa_decode_backend=None)
    rank0 = startup.apply(args0, env={}, sglang_version="0.5.23", device_index=0)
    assert rank0.decision.device_class == "sm90"
    # what is written follows the rank's device (the catalog's answer for each class, not a constant here)
    assert (args2.dsa_prefill_backend, args0.dsa_prefill_backend) == (
        resolve({}, model=MODEL, device="b200").prefill_backend, resolve({}, model=MODEL, device="h200").prefill_backend)
    assert args2.dsa_prefill_backend != args0.dsa_prefill_backend
    with pytest.raises(InputError, match="device_index.*only with device='auto'"):
        startup.apply(argparse.Namespace(model_path=MODEL), device="h200", device_index=1, env={})
    with pytest.raises(InputError, match="device_index: 9 is not valid"):
        startup.apply(argparse.Namespace(model_path=MODEL), device_index=9, env={}, sglang_version="0.5.23")


# ---- the mixed-node report ------------------------------------------------------------------------------

def test_mixed_node_report_resolves_each_kind_when_no_rank_is_chosen(mixed) -> None:
    notes, devices = mixed_node(load_catalog(), "auto", nvml=mixed, env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert [d.name for d in devices] == ["h200", "b200"]
    assert notes[0].startswith("mixed node: 4 visible GPUs of 2 kinds") and "PCI 00000000:DB:00.0" in notes[0]
    assert "as a fleet" in notes[-1]
    notes, devices = mixed_node(load_catalog(), "auto", nvml=mixed, env={"LOCAL_RANK": "1"})
    assert devices == () and "LOCAL_RANK=1" in notes[-1] and any("CUDA_DEVICE_ORDER" in n for n in notes)
    # visible GPUs of one kind: not mixed, nothing to say
    notes, devices = mixed_node(load_catalog(), "auto", nvml=mixed, env={"CUDA_VISIBLE_DEVICES": "1,2"})
    assert devices == () and not any(n.startswith("mixed node") for n in notes)


def test_single_gpu_recording_is_not_mixed() -> None:
    fake = FakeNVML.from_fixture("nvml_h200.json")
    assert mixed_node(load_catalog(), "auto", nvml=fake, env={}) == ([], ())
    assert discover(load_catalog(), nvml=fake, env={"LOCAL_RANK": "0"}).name == "h200"


def test_cli_resolve_auto_on_a_mixed_node(mixed, monkeypatch) -> None:
    from nsa_policy.cli import app

    monkeypatch.setitem(sys.modules, "pynvml", mixed)
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    result = CliRunner().invoke(app, ["resolve", "--model", MODEL, "--json"])
    report = json.loads(result.stdout)
    assert set(report["devices"]) == {"h200", "b200"} and report["decisions"]["b200"]["device_class"] == "sm100"
    assert "mixed node" in result.stderr
    assert result.exit_code == (0 if report["agrees"] else 1)
    monkeypatch.setenv("LOCAL_RANK", "3")
    one = CliRunner().invoke(app, ["resolve", "--model", MODEL, "--json"])
    assert one.exit_code == 0 and json.loads(one.stdout)["device"] == "b200" and "LOCAL_RANK=3" in one.stderr
    explicit = CliRunner().invoke(app, ["resolve", "--model", MODEL, "--json", "--device", "auto:0"])
    assert explicit.exit_code == 0 and json.loads(explicit.stdout)["device"] == "h200"


# ---- bad values -----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("env", "pattern"), [
    ({"CUDA_VISIBLE_DEVICES": "7"}, r"CUDA_VISIBLE_DEVICES: '7' is not valid \(index 7 is not one of the 4 GPUs"),
    ({"CUDA_VISIBLE_DEVICES": "0,,1"}, r"CUDA_VISIBLE_DEVICES: '0,,1' is not valid \(an empty entry"),
    ({"CUDA_VISIBLE_DEVICES": ""}, r"CUDA_VISIBLE_DEVICES: '' is not valid \(empty: it hides every GPU"),
    ({"CUDA_VISIBLE_DEVICES": "-1"}, r"index -1 is not one of"),
    ({"CUDA_VISIBLE_DEVICES": "1,1"}, r"'1' names a device listed before"),
    ({"CUDA_VISIBLE_DEVICES": "gpu0"}, r"'gpu0' is neither an index nor a UUID"),
    ({"CUDA_VISIBLE_DEVICES": "GPU-deadbeef"}, r"'GPU-deadbeef' names no GPU.*valid: GPU-b200aaaa"),
    ({"CUDA_VISIBLE_DEVICES": "GPU-h200"}, r"'GPU-h200' is a prefix of more than one UUID"),
    ({"CUDA_VISIBLE_DEVICES": "MIG-GPU-h200bbbb"}, r"needs the instance ids"),
    ({"LOCAL_RANK": "4"}, r"LOCAL_RANK: '4' is not valid \(this rank's GPU would be cuda:4, but only 4 GPUs visible.*0\.\.3"),
    ({"LOCAL_RANK": "two"}, r"LOCAL_RANK: 'two' is not valid \(an integer 0\.\.3"),
    ({"LOCAL_RANK": "-1"}, r"LOCAL_RANK: '-1' is not valid"),
    ({"CUDA_DEVICE_ORDER": "SLOWEST_FIRST"}, r"CUDA_DEVICE_ORDER: 'SLOWEST_FIRST' is not valid.*PCI_BUS_ID"),
])
def test_bad_variables_are_one_line_input_errors(mixed, env, pattern) -> None:
    with pytest.raises(InputError, match=pattern) as exc:
        discover(load_catalog(), nvml=mixed, env=env, torch_reader=lambda i: pytest.fail("no torch fallback"))
    assert "\n" not in str(exc.value)


def test_bad_explicit_index(mixed, monkeypatch) -> None:
    with pytest.raises(InputError, match=r"device_index: 4 is not valid \(a CUDA device index 0\.\.1.*'0,1'"):
        discover(load_catalog(), nvml=mixed, env={"CUDA_VISIBLE_DEVICES": "0,1"}, device_index=4)
    with pytest.raises(InputError, match=r"--device: 'auto:x' is not valid"):
        auto_index("auto:x")
    from nsa_policy.cli import app

    monkeypatch.setitem(sys.modules, "pynvml", mixed)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "9")
    result = CliRunner().invoke(app, ["resolve", "--model", MODEL])
    assert result.exit_code == 2 and "CUDA_VISIBLE_DEVICES: '9' is not valid" in result.output
    assert "Traceback" not in result.output


def test_discovery_notes_are_logged(mixed, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="nsa_policy.integration.discovery"):
        discover(load_catalog(), nvml=mixed, env={"LOCAL_RANK": "1"})
    assert any("CUDA_DEVICE_ORDER=PCI_BUS_ID" in r.getMessage() for r in caplog.records)


def test_torch_fallback_is_asked_for_the_ranks_index() -> None:
    """Without NVML, torch (which applies CUDA_VISIBLE_DEVICES itself) is asked for cuda:LOCAL_RANK."""

    class NoDriver(FakeNVML):
        def nvmlInit(self):
            raise pynvml.NVMLError_DriverNotLoaded()

    asked: list[int] = []

    def torch_reader(index: int) -> dict:
        asked.append(index)
        return {"name": "NVIDIA H200", "compute_capability": [9, 0], "memory_total_bytes": 150_109_880_320,
                "sm_count": 132, "hip": False, "source": "torch"}

    dev = discover(load_catalog(), nvml=NoDriver([]), env={"LOCAL_RANK": "5"}, torch_reader=torch_reader)
    discover(load_catalog(), nvml=NoDriver([]), env={"LOCAL_RANK": "5"}, torch_reader=torch_reader, device_index=2)
    assert asked == [5, 2] and (dev.name, dev.source) == ("h200", "torch")
    with pytest.raises(InputError, match="LOCAL_RANK: 'x' is not valid"):
        discover(load_catalog(), nvml=NoDriver([]), env={"LOCAL_RANK": "x"}, torch_reader=torch_reader)


def test_same_class_different_products_is_a_mixed_node() -> None:
    """An H100 next to an H200: one device class (sm90), two catalog devices; both are resolved."""
    h200 = FakeNVML.from_fixture("nvml_h200.json").devices[0]
    h100 = {**h200, "name": "NVIDIA H100 80GB HBM3", "pci_bus_id": "00000000:3B:00.0",
            "uuid": "GPU-h100aaaa-1111-2222-3333-444455556666", "memory_total_bytes": 85_520_809_984}
    notes, devices = mixed_node(load_catalog(), "auto", nvml=FakeNVML([h200, h100]), env={})
    assert [(d.name, d.device_class) for d in devices] == [("h200", "sm90"), ("h100", "sm90")]
    assert "2 visible GPUs of 2 kinds" in notes[0]
