"""`--device auto`: the GPU this process will run on, read through NVML (nvidia-ml-py); torch only as a fallback
(torch.cuda, which covers ROCm, then torch.xpu for Intel GPUs, which have no NVML and no CUDA capability).

Which GPU: the rank's. An explicit index (`--device auto:3`, `device_index=3`) wins; else LOCAL_RANK (set by
torchrun and most launchers); else 0. The index counts CUDA's *visible* devices, so it is mapped through
CUDA_VISIBLE_DEVICES onto NVML's devices:

* NVML numbers every GPU of the machine and ignores CUDA_VISIBLE_DEVICES; CUDA numbers only the visible
  ones, in its own order. Each NVML device is read with its PCI bus id (nvmlDeviceGetPciInfo) and UUID.
* CUDA's order before CUDA_VISIBLE_DEVICES applies: CUDA_DEVICE_ORDER=PCI_BUS_ID sorts by PCI bus id
  (domain, bus, device), which is implemented exactly. The driver's default, FASTEST_FIRST, is approximated
  by NVML index order (NVML enumerates by PCI bus id): exact on a node of identical GPUs, where CUDA breaks
  the speed tie by PCI bus id, but not on a mixed node, where CUDA puts its own notion of "fastest" first.
  There a note says so and recommends CUDA_DEVICE_ORDER=PCI_BUS_ID.
* CUDA_VISIBLE_DEVICES entries are indices into that order, GPU UUIDs (`GPU-…`, a unique prefix is
  enough, as CUDA allows) or MIG ids (`MIG-<uuid>`, `MIG-GPU-<uuid>/<gi>/<ci>`; the facts are the parent
  GPU's). CUDA silently stops at the first entry it cannot parse; here any such entry, a repeat, or an
  empty list is an InputError naming the variable, its value and what is valid: resolving for a device
  other than the one the process gets would be worse than stopping.
"""
from __future__ import annotations

import importlib.util
import logging
import re
import sys
from typing import Any, Callable, Literal, Mapping, Optional

from pydantic import Field

from nsa_policy.base.auto_device import AUTO
from nsa_policy.base.errors import DeviceDiscoveryError, InputError
from nsa_policy.catalog.store import Catalog
from nsa_policy.core.facts import DeviceFacts, Frozen

LOGGER = logging.getLogger(__name__)  # nsa_policy.integration.discovery
CUDA_ORDERS = ("FASTEST_FIRST", "PCI_BUS_ID")


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


def auto_index(device: Any, field: str = "--device") -> tuple[bool, Optional[int]]:
    """'auto' → (True, None); 'auto:3' → (True, 3); anything else → (False, None). 'auto:x' is an InputError."""
    if not isinstance(device, str):
        return False, None
    text = device.strip().lower()
    if text == AUTO:
        return True, None
    if not text.startswith(AUTO + ":"):
        return False, None
    tail = text[len(AUTO) + 1:].strip()
    if not _is_index(tail):
        raise InputError(field, device, hint="auto:N takes a CUDA-visible device index N >= 0, e.g. auto:0")
    return True, int(tail)


def _is_index(text: str) -> bool:
    """ASCII digits, few enough to be a device index (str.isdigit accepts '²', which int() refuses)."""
    return re.fullmatch(r"[0-9]{1,6}", text) is not None


class VisibleGpu(Frozen):
    """One GPU as NVML reads it, at its place in CUDA's visible order."""

    cuda_index: int = Field(description="index CUDA (torch.cuda, sglang's gpu_id) gives it in this process")
    nvml_index: int
    name: str
    compute_capability: tuple[int, int]
    pci_bus_id: Optional[str] = None
    uuid: Optional[str] = None
    memory_total_bytes: Optional[int] = None
    mig: Optional[str] = Field(default=None, description="the MIG id CUDA_VISIBLE_DEVICES named, if any")

    def reading(self, device_count: int, driver: Optional[str]) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "compute_capability": list(self.compute_capability),
                               "device_count": device_count, "cuda_index": self.cuda_index,
                               "nvml_index": self.nvml_index, "pci_bus_id": self.pci_bus_id, "uuid": self.uuid,
                               "source": "nvml"}
        if self.memory_total_bytes:
            out["memory_total_bytes"] = self.memory_total_bytes
        if driver:
            out["driver_version"] = driver
        return out

    def label(self) -> str:
        return f"cuda:{self.cuda_index} {self.name} (NVML {self.nvml_index}, PCI {self.pci_bus_id or '?'})"


class NodeReading(Frozen):
    """The GPUs this process can see, in CUDA's order, and which one is the rank's."""

    gpus: tuple[VisibleGpu, ...] = Field(description="visible GPUs, index = CUDA device index")
    rank_index: int = Field(description="the CUDA device index this process runs on")
    rank_source: str = Field(description="how rank_index was chosen: explicit, LOCAL_RANK=…, or the default 0")
    order: Literal["FASTEST_FIRST", "PCI_BUS_ID"]
    cuda_visible_devices: Optional[str] = None
    device_count: int = Field(description="GPUs NVML sees on the machine, visible or not")
    driver_version: Optional[str] = None
    notes: tuple[str, ...] = ()

    @property
    def rank_gpu(self) -> VisibleGpu:
        return self.gpus[self.rank_index]

    @property
    def mixed(self) -> bool:
        """Different products or capabilities among the visible GPUs."""
        return len({(g.name, g.compute_capability) for g in self.gpus}) > 1

    def distinct(self) -> tuple[VisibleGpu, ...]:
        """The first visible GPU of each distinct (product, capability), in CUDA order."""
        seen: dict[tuple[str, tuple[int, int]], VisibleGpu] = {}
        for g in self.gpus:
            seen.setdefault((g.name, g.compute_capability), g)
        return tuple(seen.values())

    def reading(self, index: Optional[int] = None) -> dict[str, Any]:
        gpu = self.rank_gpu if index is None else self.gpus[index]
        return gpu.reading(self.device_count, self.driver_version)


_PCI = re.compile(r"^(?:([0-9a-f]{1,8}):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})\.([0-9a-f])$", re.I)


def _pci_key(bus_id: Optional[str], nvml_index: int) -> tuple[int, ...]:
    """(domain, bus, device, function) of '00000000:19:00.0'; unreadable ids sort last, in NVML order."""
    m = _PCI.match((bus_id or "").strip())
    if not m:
        return (1 << 40, nvml_index)
    dom, bus, dev, fn = m.groups()
    return (int(dom or "0", 16), int(bus, 16), int(dev, 16), int(fn, 16))


def _read_gpu(nvml: Any, nvml_index: int) -> dict[str, Any]:
    h = nvml.nvmlDeviceGetHandleByIndex(nvml_index)
    major, minor = nvml.nvmlDeviceGetCudaComputeCapability(h)
    gpu: dict[str, Any] = {"nvml_index": nvml_index, "name": _text(nvml.nvmlDeviceGetName(h)),
                           "compute_capability": (int(major), int(minor)), "migs": []}
    try:
        gpu["pci_bus_id"] = _text(nvml.nvmlDeviceGetPciInfo(h).busId)
    except Exception:
        gpu["pci_bus_id"] = None
    try:
        gpu["uuid"] = _text(nvml.nvmlDeviceGetUUID(h))
    except Exception:
        gpu["uuid"] = None
    try:
        gpu["memory_total_bytes"] = int(nvml.nvmlDeviceGetMemoryInfo(h).total)
    except Exception:
        gpu["memory_total_bytes"] = None
    try:  # MIG instances, only where MIG is on; their UUIDs may be named in CUDA_VISIBLE_DEVICES
        for i in range(int(nvml.nvmlDeviceGetMaxMigDeviceCount(h))):
            try:
                gpu["migs"].append(_text(nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetMigDeviceHandleByIndex(h, i))))
            except Exception:
                continue
    except Exception:
        pass
    return gpu


def _cuda_order(env: Mapping[str, str]) -> Literal["FASTEST_FIRST", "PCI_BUS_ID"]:
    raw = env.get("CUDA_DEVICE_ORDER")
    if raw is None or not raw.strip():
        return "FASTEST_FIRST"
    value = raw.strip().upper()
    if value not in CUDA_ORDERS:
        raise InputError("CUDA_DEVICE_ORDER", raw, CUDA_ORDERS, hint="CUDA knows two orders")
    return "PCI_BUS_ID" if value == "PCI_BUS_ID" else "FASTEST_FIRST"


def _match_uuid(entry: str, gpus: list[dict[str, Any]], cvd: str) -> tuple[dict[str, Any], Optional[str]]:
    """A `GPU-…` / `MIG-…` entry (unique prefix, as CUDA allows) → (the GPU, the MIG id or None)."""
    key = entry.lower()
    hits: list[tuple[dict[str, Any], Optional[str]]]
    if key.startswith("mig-gpu-"):  # the pre-R470 MIG form: MIG-GPU-<gpu uuid>/<gi>/<ci>
        parent, _, rest = entry[4:].partition("/")
        if not rest:
            raise InputError("CUDA_VISIBLE_DEVICES", cvd, hint=f"{entry!r}: the MIG-GPU-<uuid>/<gi>/<ci> form needs "
                             "the instance ids")
        hits = [(g, entry) for g in gpus if (g.get("uuid") or "").lower().startswith(parent.lower())]
    elif key.startswith("mig-"):
        hits = [(g, m) for g in gpus for m in g["migs"] if m.lower().startswith(key)]
    else:
        hits = [(g, None) for g in gpus if (g.get("uuid") or "").lower().startswith(key)]
    known = [g["uuid"] for g in gpus if g.get("uuid")] + [m for g in gpus for m in g["migs"]]
    if not hits:
        raise InputError("CUDA_VISIBLE_DEVICES", cvd, known,
                         hint=f"{entry!r} names no GPU or MIG instance NVML sees; entries are indices 0..{len(gpus) - 1} "
                         "or these UUIDs")
    if len({(h[0]["nvml_index"], h[1]) for h in hits}) > 1:
        raise InputError("CUDA_VISIBLE_DEVICES", cvd, known, hint=f"{entry!r} is a prefix of more than one UUID")
    return hits[0]


def _visible(gpus: list[dict[str, Any]], cvd: Optional[str]) -> list[tuple[dict[str, Any], Optional[str]]]:
    """CUDA_VISIBLE_DEVICES applied to the GPUs in CUDA's order."""
    if cvd is None:
        return [(g, None) for g in gpus]
    valid = f"comma-separated indices 0..{len(gpus) - 1} (in CUDA's order) or GPU-/MIG- UUIDs, each once"
    entries = [e.strip() for e in cvd.split(",")]
    if not cvd.strip():
        raise InputError("CUDA_VISIBLE_DEVICES", cvd, hint=f"empty: it hides every GPU from CUDA; valid: {valid}")
    out: list[tuple[dict[str, Any], Optional[str]]] = []
    for entry in entries:
        if not entry:
            raise InputError("CUDA_VISIBLE_DEVICES", cvd, hint=f"an empty entry; valid: {valid}")
        if re.fullmatch(r"[+-]?\d+", entry):
            if not re.fullmatch(r"[+-]?[0-9]{1,6}", entry):  # "²", or more digits than any machine has GPUs
                raise InputError("CUDA_VISIBLE_DEVICES", cvd[:80], hint=f"entry {entry[:20]!r}… is not a GPU index; "
                                                                         f"valid: {valid}")
            i = int(entry)
            if not 0 <= i < len(gpus):
                raise InputError("CUDA_VISIBLE_DEVICES", cvd,
                                 hint=f"index {entry} is not one of the {len(gpus)} GPUs NVML sees; valid: {valid}")
            hit: tuple[dict[str, Any], Optional[str]] = (gpus[i], None)
        elif entry.lower().startswith(("gpu-", "mig-")):
            hit = _match_uuid(entry, gpus, cvd)
        else:
            raise InputError("CUDA_VISIBLE_DEVICES", cvd, hint=f"{entry!r} is neither an index nor a UUID; valid: {valid}")
        if any(h[0]["nvml_index"] == hit[0]["nvml_index"] and h[1] == hit[1] for h in out):
            raise InputError("CUDA_VISIBLE_DEVICES", cvd, hint=f"{entry!r} names a device listed before; valid: {valid}")
        out.append(hit)
    return out


def _rank_index(count: int, env: Mapping[str, str], device_index: Optional[int],
                cvd: Optional[str]) -> tuple[int, str]:
    shown = "unset" if cvd is None else repr(cvd)
    where = f"{count} GPU{'s' if count != 1 else ''} visible (CUDA_VISIBLE_DEVICES {shown})"
    if device_index is not None:
        if isinstance(device_index, bool) or not isinstance(device_index, int) or not 0 <= device_index < count:
            raise InputError("device_index", device_index, hint=f"a CUDA device index 0..{count - 1}: {where}")
        return device_index, f"explicit index {device_index}"
    raw = env.get("LOCAL_RANK")
    if raw is None or not raw.strip():
        return 0, "default 0 (LOCAL_RANK unset)"
    if not _is_index(raw.strip()):
        raise InputError("LOCAL_RANK", raw[:80], hint=f"an integer 0..{count - 1}: {where}")
    local = int(raw.strip())
    if local >= count:
        raise InputError("LOCAL_RANK", raw, hint=f"this rank's GPU would be cuda:{local}, but only {where}; "
                         f"valid 0..{count - 1}, or pass an explicit index (--device auto:N / device_index=N)")
    return local, f"LOCAL_RANK={local}"


def _nvml_module(nvml: Any) -> Any:
    if nvml is not None:
        return nvml
    try:
        import pynvml  # provided by nvidia-ml-py
    except ImportError as exc:
        raise DeviceDiscoveryError(f"NVML bindings missing (pip install nvidia-ml-py): {exc}") from None
    return pynvml


def read_node(nvml: Any = None, *, env: Optional[Mapping[str, str]] = None,
              device_index: Optional[int] = None) -> NodeReading:
    """Every visible GPU in CUDA's order, and the rank's (see the module doc for the mapping).

    env: where CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER and LOCAL_RANK are read (default os.environ).
    Raises DeviceDiscoveryError when NVML is unusable, InputError for a bad variable or index.
    """
    import os

    env = os.environ if env is None else env
    nvml = _nvml_module(nvml)
    order = _cuda_order(env)  # a bad value is the user's, whatever NVML says
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, _DriverNotLoaded, …
        raise DeviceDiscoveryError(f"NVML unavailable ({type(exc).__name__}: {_text(exc)}): "
                                   "no NVIDIA driver or libnvidia-ml on this machine") from None
    try:
        try:
            count = int(nvml.nvmlDeviceGetCount())
            if count < 1:
                raise DeviceDiscoveryError("NVML reports no NVIDIA GPU")
            gpus = [_read_gpu(nvml, i) for i in range(count)]
            driver: Optional[str] = None
            try:
                driver = _text(nvml.nvmlSystemGetDriverVersion())
            except Exception:
                pass
        except DeviceDiscoveryError:
            raise
        except Exception as exc:
            raise DeviceDiscoveryError(f"NVML query failed ({type(exc).__name__}: {_text(exc)})") from None
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass
    if order == "PCI_BUS_ID":
        gpus.sort(key=lambda g: _pci_key(g["pci_bus_id"], g["nvml_index"]))
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    visible = [VisibleGpu(cuda_index=i, nvml_index=g["nvml_index"], name=g["name"],
                          compute_capability=g["compute_capability"], pci_bus_id=g["pci_bus_id"], uuid=g["uuid"],
                          memory_total_bytes=g["memory_total_bytes"], mig=mig)
               for i, (g, mig) in enumerate(_visible(gpus, cvd))]
    index, source = _rank_index(len(visible), env, device_index, cvd)
    notes = []
    # UUID entries name GPUs whatever the order; indices (or no CUDA_VISIBLE_DEVICES) depend on it
    by_index = cvd is None or any(re.fullmatch(r"\s*[+-]?\d+\s*", e) for e in cvd.split(","))
    if len({(g["name"], g["compute_capability"]) for g in gpus}) > 1 and order == "FASTEST_FIRST" and by_index:
        notes.append("mixed node and CUDA_DEVICE_ORDER is not PCI_BUS_ID: CUDA's fastest-first order is "
                     "approximated by NVML's (PCI bus) order and may differ; set CUDA_DEVICE_ORDER=PCI_BUS_ID "
                     "for an exact mapping")
    return NodeReading(gpus=tuple(visible), rank_index=index, rank_source=source, order=order,
                       cuda_visible_devices=cvd, device_count=count, driver_version=driver, notes=tuple(notes))


def read_nvml(nvml: Any = None, index: Optional[int] = None, *,
              env: Optional[Mapping[str, str]] = None) -> dict[str, Any]:
    """The reading of CUDA device `index` (None: the rank's, from LOCAL_RANK), mapped through CUDA_VISIBLE_DEVICES."""
    return read_node(nvml, env=env, device_index=index).reading()


def read_torch(index: int = 0) -> Optional[dict[str, Any]]:
    """Only when torch is installed already (never installed or imported on the NVML path).

    index: the CUDA device index; torch applies CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER itself.
    """
    if importlib.util.find_spec("torch") is None:
        return None
    import torch  # noqa: PLC0415 - deliberate lazy import, fallback only

    if not torch.cuda.is_available():
        return _read_torch_xpu(torch, index)
    count = torch.cuda.device_count()
    if index >= count:
        raise InputError("device index", index, hint=f"torch sees {count} CUDA device(s): valid 0..{count - 1}")
    props = torch.cuda.get_device_properties(index)
    hip = getattr(torch.version, "hip", None)
    return {"name": props.name, "compute_capability": [props.major, props.minor],
            "memory_total_bytes": int(props.total_memory), "sm_count": int(props.multi_processor_count),
            "hip": bool(hip), "gcn_arch": getattr(props, "gcnArchName", None), "source": "torch",
            "cuda_index": index, "device_count": count}


def _read_torch_xpu(torch: Any, index: int) -> Optional[dict[str, Any]]:
    """An Intel GPU through torch.xpu (no NVML, no CUDA capability); None when torch has no XPU."""
    xpu = getattr(torch, "xpu", None)
    if xpu is None or not xpu.is_available():
        return None
    count = xpu.device_count()
    if index >= count:
        raise InputError("device index", index, hint=f"torch sees {count} XPU device(s): valid 0..{count - 1}")
    props = xpu.get_device_properties(index)
    return {"name": props.name, "xpu": True, "memory_total_bytes": int(props.total_memory),
            "sm_count": getattr(props, "gpu_subslice_count", None), "source": "torch", "xpu_index": index,
            "device_count": count}


def _facts_from_torch_xpu(reading: dict[str, Any], catalog: Catalog) -> DeviceFacts:
    """An Intel GPU: the catalog entry whose product torch.xpu reports, else the one Intel class."""
    name = reading["name"]
    entry = next((n for n, e in catalog.device_doc.devices.items()
                  if e.product == name and catalog.device_doc.classes[e.device_class].vendor == "intel"), None)
    classes = [c for c, spec in catalog.device_doc.classes.items() if spec.vendor == "intel"]
    cls = catalog.device(entry).device_class if entry else (classes[0] if len(classes) == 1 else None)
    if cls is None:
        raise DeviceDiscoveryError(f"torch (XPU) reports {name!r}, which nsa-policy cannot place in one Intel "
                                   f"device class; pass --device with one of: {_choices(catalog)}")
    mem = reading.get("memory_total_bytes")
    return DeviceFacts(name=entry or name, device_class=cls, vendor="intel", compute_capability=None,
                       product_name=name, memory_gb=round(mem / 1e9, 1) if mem else None,
                       sm_count=reading.get("sm_count"), source="torch")


def _facts_from_torch(reading: dict[str, Any], catalog: Catalog) -> DeviceFacts:
    if reading.get("xpu"):
        return _facts_from_torch_xpu(reading, catalog)
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


def _torch_index(env: Mapping[str, str], device_index: Optional[int]) -> int:
    """The index for the torch fallback (torch maps CUDA_VISIBLE_DEVICES itself; only LOCAL_RANK is read here)."""
    if device_index is not None:
        return device_index
    raw = (env.get("LOCAL_RANK") or "").strip()
    if not raw:
        return 0
    if not _is_index(raw):
        raise InputError("LOCAL_RANK", (env.get("LOCAL_RANK") or "")[:80],
                         hint="an integer >= 0 (this rank's CUDA device index)")
    return int(raw)


def discover(catalog: Catalog, *, nvml: Any = None,
             torch_reader: Callable[[int], Optional[dict[str, Any]]] = read_torch,
             env: Optional[Mapping[str, str]] = None, device_index: Optional[int] = None) -> DeviceFacts:
    """The facts of the GPU this process runs on (module doc); notes (mixed node) go to the nsa_policy.discovery log."""
    import os

    env = os.environ if env is None else env
    try:
        node = read_node(nvml, env=env, device_index=device_index)
    except DeviceDiscoveryError as nvml_error:
        first = str(nvml_error)
    else:
        for note in node.notes:
            LOGGER.warning("%s", note)
        return facts_from_nvml_reading(node.reading(), catalog)
    index = _torch_index(env, device_index)
    try:
        reading = torch_reader(index)
    except InputError:
        raise
    except Exception as exc:  # a broken torch install must not hide the NVML reason
        reading = None
        first += f"; torch fallback failed: {type(exc).__name__}: {exc}"
    if reading:
        return _facts_from_torch(reading, catalog)
    torch_note = "" if "torch" in sys.modules or importlib.util.find_spec("torch") else " (torch not installed)"
    raise DeviceDiscoveryError(
        f"--device auto found no GPU: {first}; torch fallback found none{torch_note}. "
        f"Resolve offline with --device NAME, one of: {_choices(catalog)}")


def discover_node(catalog: Catalog, *, nvml: Any = None, env: Optional[Mapping[str, str]] = None,
                  device_index: Optional[int] = None) -> tuple[NodeReading, tuple[DeviceFacts, ...]]:
    """The node reading and the facts of each distinct visible GPU (one per product and capability)."""
    node = read_node(nvml, env=env, device_index=device_index)
    facts: dict[tuple[str, str], DeviceFacts] = {}
    for g in node.distinct():  # two products the catalog files under one name count once (fleet labels are names)
        f = facts_from_nvml_reading(g.reading(node.device_count, node.driver_version), catalog)
        facts.setdefault((f.name, f.device_class), f)
    return node, tuple(facts.values())


def mixed_node(catalog: Catalog, device: Any, *, nvml: Any = None,
               env: Optional[Mapping[str, str]] = None) -> tuple[list[str], tuple[DeviceFacts, ...]]:
    """For `resolve --device auto`: (notes to show, devices to resolve as a fleet).

    A node whose visible GPUs are all one product gives ([], ()): resolve the rank's GPU as usual. A mixed
    node gives a note naming each GPU; with no rank chosen (plain 'auto', LOCAL_RANK unset) it also gives
    one DeviceFacts per distinct product, to be resolved like `--device h200,b200`. NVML being unusable
    gives ([], ()) too: the ordinary path explains that (and tries torch).
    """
    import os

    env = os.environ if env is None else env
    auto, index = auto_index(device)
    if not auto:
        return [], ()
    try:
        node, facts = discover_node(catalog, nvml=nvml, env=env, device_index=index)
    except DeviceDiscoveryError:
        return [], ()
    if not node.mixed:
        return [], ()
    notes = [f"mixed node: {len(node.gpus)} visible GPUs of {len(facts)} kinds: "
             + "; ".join(g.label() for g in node.gpus), *node.notes]
    if index is None and node.rank_source.startswith("default"):
        notes.append(f"no rank chosen (LOCAL_RANK unset, no --device auto:N): resolving each of "
                     f"{', '.join(f.name for f in facts)} as a fleet")
        return notes, facts
    notes.append(f"resolving for this rank's GPU, {node.rank_gpu.label()} ({node.rank_source})")
    return notes, ()


# --- the release installed for a command's interpreter ---------------------------------------------------------
PROBE_TIMEOUT_S = 20.0
PROBE_MAX_BYTES = 4096  # a version string is a few bytes; a probe printing more is not answering
# importlib.metadata only: the interpreter never imports the engine (and so never torch)
_PROBE = ("import importlib.metadata as m, sys\n"
          "try:\n    sys.stdout.write(m.version(sys.argv[1]))\nexcept m.PackageNotFoundError:\n    pass\n")
_RELEASE = re.compile(r"^\d+(?:\.\d+)*(?:(?:a|b|rc)\d+)?(?:\.post\d+)?(?:\.dev\d+)?(?:\+[A-Za-z0-9.]+)?$")


def probe_installed(python: str, package: str, *, timeout: float = PROBE_TIMEOUT_S,
                    max_bytes: int = PROBE_MAX_BYTES) -> tuple[Optional[str], str]:
    """(the release of `package` installed for the interpreter `python`, or None; how that was found).

    The interpreter runs isolated: `python -I` (no user site, no PYTHON* variables, no script or current
    folder on sys.path), in a new empty folder (a `csv.py` or a `sglang-X.dist-info/` where the user stands
    cannot run or answer), with no stdin, in its own process group, which is killed whole on timeout or when
    it prints more than `max_bytes` (a wrapper that execs `yes`). Output that is not one release number is no
    answer."""
    import os
    import selectors
    import signal
    import subprocess
    import tempfile
    import time

    with tempfile.TemporaryDirectory(prefix="nsa-policy-probe-") as cwd:
        try:
            proc = subprocess.Popen([python, "-I", "-c", _PROBE, package], cwd=cwd, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            return None, f"could not run {python} ({exc.strerror or exc})"
        assert proc.stdout is not None
        out = bytearray()
        why = ""
        deadline = time.monotonic() + timeout
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    why = f"{python} gave no answer within {timeout:g} s"
                    break
                if not sel.select(left):
                    continue
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    break
                out += chunk
                if len(out) > max_bytes:
                    why = f"{python} printed more than {max_bytes} bytes"
                    break
        finally:
            sel.close()
            if why:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # the interpreter and whatever it started
                except (ProcessLookupError, PermissionError):
                    pass
            proc.stdout.close()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    if why:
        return None, why
    if proc.returncode != 0:
        return None, f"{python} exited with status {proc.returncode}"
    try:
        text = out.decode("utf-8").strip()
    except UnicodeDecodeError:
        return None, f"{python} answered with bytes that are not UTF-8"
    if not text:
        return None, f"no {package} installed for {python}"
    if not _RELEASE.match(text):
        return None, f"{python} answered {text[:40]!r}, not a release number"
    return text, f"importlib.metadata of {python} (isolated: python -I, an empty working folder)"


def script_interpreter(script: str) -> Optional[str]:
    """The interpreter an entry-point script runs under: its `#!` line (`#!/usr/bin/env python3` looked up on
    PATH), or, for pip's wrapper where the interpreter's path is too long for a `#!` line (over 127 bytes),
    the path its `'''exec' "PYTHON" "$0" "$@"` line names."""
    import shlex
    import shutil

    from nsa_policy.base.safe_io import read_bytes

    try:
        head = read_bytes(script, field="entry point", max_bytes=1 << 20)[:2048].decode("utf-8", "replace")
    except ValueError:
        return None
    lines = head.splitlines()
    if not lines or not lines[0].startswith("#!"):
        return None
    words = lines[0][2:].split()
    if not words:
        return None
    if words[0] in ("/bin/sh", "/usr/bin/sh") and len(lines) > 1:
        m = re.match(r"""^'''exec' (.+?) "\$0" "\$@"\s*$""", lines[1])
        if m:
            try:
                parts = shlex.split(m.group(1))
            except ValueError:
                return None
            return parts[0] if parts else None
        return None
    if words[0].rsplit("/", 1)[-1] == "env" and len(words) > 1:
        return shutil.which(words[-1])
    return words[0]


_PYTHON_NAMES = ("python", "python3")


def command_python(command: Any, entry_point: str) -> Optional[str]:
    """The Python interpreter that will run a server command: the command's python/python3 (python3.12…),
    or the interpreter of the engine's entry point script `entry_point` (`sglang`, `vllm`) found on PATH.
    None when the command names neither."""
    import os
    import shutil
    from pathlib import Path

    if not command:
        return None
    head = command[0]
    name = Path(head).name
    if name in _PYTHON_NAMES or (name.startswith("python3.") and name[8:].replace(".", "").isdigit()):
        return shutil.which(head) or (head if os.path.isfile(head) else None)
    if name == entry_point:
        script = shutil.which(head)
        return script_interpreter(script) if script is not None else None
    return None
