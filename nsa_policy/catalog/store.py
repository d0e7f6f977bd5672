"""The catalogs in rules/catalog: devices, models and the backend capability matrix."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Mapping, Optional

from pydantic import BaseModel, ConfigDict, Field

from nsa_policy.errors import InputError
from nsa_policy.engine.facts import DEVICE_CLASSES, DeviceFacts, ModelFacts
from nsa_policy.catalog.paths import catalog_dir
from nsa_policy.engine.schema_load import load_doc

KV_DTYPES = ("bfloat16", "fp8_e4m3")
PHASES = ("prefill", "decode")
Status = Literal["supported", "degraded", "unsupported"]


class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DeviceClassSpec(_Spec):
    vendor: Literal["nvidia", "amd", "cpu"]
    compute_capability: Optional[tuple[int, int]]
    description: str


class DeviceEntry(_Spec):
    device_class: Literal[DEVICE_CLASSES] = Field(alias="class")  # type: ignore[valid-type]
    product: str
    nvml_names: list[str] = []
    memory_gb: Optional[float] = None
    sm_count: Optional[int] = None


class DeviceCatalog(_Spec):
    classes: dict[Literal[DEVICE_CLASSES], DeviceClassSpec]  # type: ignore[valid-type]
    devices: dict[str, DeviceEntry]


class FamilySpec(_Spec):
    architectures: list[str]


class ModelEntry(_Spec):
    architecture: str
    index_topk: Optional[int]
    num_attention_heads: Optional[int]


class ModelCatalog(_Spec):
    families: dict[str, FamilySpec]
    models: dict[str, ModelEntry]


class Cell(_Spec):
    devices: list[Literal[DEVICE_CLASSES]]  # type: ignore[valid-type]
    phases: list[Literal["prefill", "decode"]]
    kv: list[Literal["bfloat16", "fp8_e4m3"]]
    status: Status
    reason: Optional[str] = None
    evidence: list[str] = []


class BackendSpec(_Spec):
    description: str
    package: str
    phases: list[Literal["prefill", "decode"]]
    cells: list[Cell]
    elsewhere: str
    page_size: Optional[int] = None
    pad_heads_to: dict[str, int] = {}
    requires_index_topk: list[int] = []
    min_versions: dict[str, str] = {}
    evidence: list[str] = []


class BackendCatalog(_Spec):
    backends: dict[str, BackendSpec]


class Capability(_Spec):
    """One cell of the matrix as resolved for a backend × device × dtype × phase."""

    status: Status
    reason: str
    evidence: tuple[str, ...] = ()

    @property
    def runs(self) -> bool:
        return self.status != "unsupported"


def _version_tuple(text: str) -> tuple:
    parts = []
    for piece in text.replace("-", ".").split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def version_ge(have: str, need: str) -> bool:
    return _version_tuple(have) >= _version_tuple(need)


class Catalog:
    """Loaded once; queries are dictionary lookups."""

    def __init__(self, root: Path):
        self.root = root
        self.device_doc, _ = load_doc(DeviceCatalog, root / "devices.yaml")
        self.model_doc, _ = load_doc(ModelCatalog, root / "models.yaml")
        self.backend_doc, _ = load_doc(BackendCatalog, root / "backends.yaml")
        self.backends: dict[str, BackendSpec] = self.backend_doc.backends
        self.arch_family = {a: fam for fam, spec in self.model_doc.families.items() for a in spec.architectures}
        self._cells: dict[tuple[str, str, str, str], Capability] = {}
        for name, spec in self.backends.items():
            for cell in spec.cells:
                for dev in cell.devices:
                    for phase in cell.phases:
                        for kv in cell.kv:
                            reason = cell.reason or f"{name} {phase} with {kv} KV on {dev}: {cell.status}"
                            ev = tuple(cell.evidence or spec.evidence)
                            self._cells[(name, dev, kv, phase)] = Capability(status=cell.status, reason=reason, evidence=ev)
        self._devices: dict[str, DeviceFacts] = {}
        for cls, spec in self.device_doc.classes.items():
            self._devices[cls] = DeviceFacts(name=cls, device_class=cls, vendor=spec.vendor,
                                             compute_capability=spec.compute_capability, source="capability")
        for name, entry in self.device_doc.devices.items():
            cls_spec = self.device_doc.classes[entry.device_class]
            self._devices[name] = DeviceFacts(
                name=name, device_class=entry.device_class, vendor=cls_spec.vendor,
                compute_capability=cls_spec.compute_capability, product_name=entry.product,
                memory_gb=entry.memory_gb, sm_count=entry.sm_count, source="catalog")

    # devices --------------------------------------------------------------
    @property
    def device_names(self) -> list[str]:
        return list(self.device_doc.devices)

    @property
    def device_choices(self) -> list[str]:
        return self.device_names + list(self.device_doc.classes)

    def device(self, name: str, field: str = "device") -> DeviceFacts:
        key = name.strip().lower()
        hit = self._devices.get(key)
        if hit is None:
            raise InputError(field, name, self.device_choices + ["auto"], hint="not a catalog device or capability spec")
        return hit

    def device_for_product(self, product: str) -> Optional[str]:
        """The catalog name whose NVML name prefix matches a discovered product name (longest match)."""
        best, best_len = None, 0
        for name, entry in self.device_doc.devices.items():
            for prefix in entry.nvml_names:
                if product.startswith(prefix) and len(prefix) > best_len:
                    best, best_len = name, len(prefix)
        return best

    def class_for_capability(self, major: int, minor: int) -> Optional[str]:
        for cls, spec in self.device_doc.classes.items():
            if spec.vendor == "nvidia" and spec.compute_capability == (major, minor):
                return cls
        return None

    # models ---------------------------------------------------------------
    @property
    def model_ids(self) -> list[str]:
        return list(self.model_doc.models)

    def family_of(self, architecture: str, index_topk: Optional[int]) -> Optional[str]:
        if index_topk is None:
            return None
        return self.arch_family.get(architecture)

    def model(self, model_id: str, field: str = "model") -> ModelFacts:
        entry = self.model_doc.models.get(model_id)
        if entry is None:
            lowered = {k.lower(): k for k in self.model_doc.models}
            key = lowered.get(model_id.lower()) or lowered.get(
                next((k for k in lowered if k.split("/")[-1] == model_id.lower()), ""), None)
            if key is None:
                raise InputError(field, model_id, self.model_ids,
                                 hint="not a catalog model id, nor a local directory or config.json")
            model_id, entry = key, self.model_doc.models[key]
        return ModelFacts(model_id=model_id, architecture=entry.architecture,
                          family=self.family_of(entry.architecture, entry.index_topk),
                          index_topk=entry.index_topk, num_attention_heads=entry.num_attention_heads, source="catalog")

    def model_from_config(self, config: Mapping[str, Any], *, source: str, model_id: Optional[str] = None) -> ModelFacts:
        archs = config.get("architectures") or []
        if isinstance(archs, str):
            archs = [archs]
        if not archs or not all(isinstance(a, str) for a in archs):
            raise InputError(f"{source}: architectures", archs, hint="a list of architecture names is required")
        topk = config.get("index_topk")
        heads = config.get("num_attention_heads")
        for key, val in (("index_topk", topk), ("num_attention_heads", heads)):
            if val is not None and (not isinstance(val, int) or isinstance(val, bool) or val <= 0):
                raise InputError(f"{source}: {key}", val, hint="a positive integer")
        arch = next((a for a in archs if a in self.arch_family), archs[0])
        return ModelFacts(model_id=model_id, architecture=arch, family=self.family_of(arch, topk),
                          index_topk=topk, num_attention_heads=heads, source=source)

    def model_from_path(self, path: Path, field: str = "model") -> ModelFacts:
        cfg = path / "config.json" if path.is_dir() else path
        try:
            data = json.loads(cfg.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InputError(field, str(path), hint="no config.json there") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(field, str(cfg), hint=f"unreadable config.json: {exc}") from None
        if not isinstance(data, dict):
            raise InputError(field, str(cfg), hint="config.json must hold a JSON object")
        return self.model_from_config(data, source=str(cfg), model_id=str(path))

    # backends -------------------------------------------------------------
    @property
    def backend_names(self) -> list[str]:
        return list(self.backends)

    def capability(self, backend: str, device_class: str, kv: str, phase: str) -> Capability:
        key = (backend, device_class, kv, phase)
        hit = self._cells.get(key)
        if hit is not None:
            return hit
        spec = self.backends.get(backend)
        if spec is None:
            return Capability(status="unsupported", reason=f"unknown backend {backend!r}")
        if phase not in spec.phases:
            cap = Capability(status="unsupported", reason=f"{backend} does not serve {phase}", evidence=tuple(spec.evidence))
        else:
            cap = Capability(status="unsupported", reason=spec.elsewhere, evidence=tuple(spec.evidence))
        self._cells[key] = cap  # unlisted cells are asked for again and again; build each once
        return cap

    def requirement_problem(self, backend: str, index_topk: Optional[int], packages: Mapping[str, str]) -> Optional[str]:
        """A requirement beyond the matrix cell that this input breaks (top-k, package versions)."""
        spec = self.backends.get(backend)
        if spec is None:
            return None
        if spec.requires_index_topk and index_topk is not None and index_topk not in spec.requires_index_topk:
            return f"{backend} needs index_topk in {spec.requires_index_topk}, the model has {index_topk}"
        for dist, need in spec.min_versions.items():
            have = packages.get(dist)
            if have is not None and not version_ge(have, need):
                return f"{backend} needs {dist} >= {need}, installed {have}"
        return None

    def runs(self, backend: str, device_class: str, kv: str, phase: str,
             index_topk: Optional[int] = None, packages: Mapping[str, str] = {}) -> bool:
        cap = self.capability(backend, device_class, kv, phase)
        return cap.runs and self.requirement_problem(backend, index_topk, packages) is None

    def valid_backends(self, phase: str, device_class: str, kv: str,
                       index_topk: Optional[int] = None, packages: Mapping[str, str] = {}) -> list[str]:
        return [b for b in self.backends if self.runs(b, device_class, kv, phase, index_topk, packages)]


@lru_cache(maxsize=4)
def load_catalog(root: Optional[Path] = None) -> Catalog:
    return Catalog(root or catalog_dir())
