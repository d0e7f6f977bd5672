"""The catalogs in rules/catalog: devices, models and the backend capability matrix.

The catalog is the one owner of device classes, backends and model families: every list of them
in the code (types, choices, the runtime's tables) is derived from the loaded catalog, so a new
device class or backend is one entry in rules/catalog/*.yaml.
"""

import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Mapping, Optional

from pydantic import BaseModel, ConfigDict, Field

from nsa_policy.base import safe_io, versions
from nsa_policy.base.errors import InputError, RuleFileError
from nsa_policy.base.paths import catalog_dir
from nsa_policy.base.schema_load import load_doc
from nsa_policy.base.yaml_lines import line_of
from nsa_policy.core.facts import SCHEMA_NAMES, DeviceFacts, ModelFacts

KV_DTYPES = ("bfloat16", "fp8_e4m3")
# Other names of the same dtypes: torch's short name, which sglang (0.5.21+) and vLLM accept as --kv-cache-dtype
KV_DTYPE_ALIASES = {"bf16": "bfloat16"}
PHASES = ("prefill", "decode")
Status = Literal["supported", "degraded", "unsupported"]
Phase = Literal["prefill", "decode"]
KvDtype = Literal["bfloat16", "fp8_e4m3"]
KvLayout = Literal["bf16-576", "fp8-576-per-tensor", "fp8-656-blockwise"]


class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class DeviceClassSpec(_Spec):
    vendor: Literal["nvidia", "amd", "intel", "cpu"]
    compute_capability: Optional[tuple[int, int]]
    description: str


class DeviceEntry(_Spec):
    device_class: str = Field(alias="class")  # a key of `classes`, checked on load
    product: str
    nvml_names: list[str] = []
    memory_gb: Optional[float] = None
    sm_count: Optional[int] = None


class CapabilityRange(_Spec):
    """Compute capabilities min..max (inclusive) of one vendor."""

    vendor: Literal["nvidia", "amd"]
    min: tuple[int, int]
    max: tuple[int, int]
    sglang_since: Optional[str] = Field(default=None, description="the sglang release that added this range")

    def holds(self, vendor: str, cc: Optional[tuple[int, int]], release: Optional[str] = None) -> bool:
        if self.sglang_since is not None and (release is None or not version_ge(release, self.sglang_since)):
            return False
        return cc is not None and vendor == self.vendor and self.min <= tuple(cc) <= self.max


class MhaOneShotGate(_Spec):
    description: str
    capabilities: list[CapabilityRange]
    evidence: list[str] = []


class DeviceCatalog(_Spec):
    classes: dict[str, DeviceClassSpec]
    devices: dict[str, DeviceEntry]
    mha_one_shot: MhaOneShotGate


class FamilySpec(_Spec):
    architectures: list[str]
    # MLA dimensions of the family's config.json (kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim,
    # v_head_dim): what vLLM's backend checks read (rules/catalog/vllm/backends.yaml).
    mla: Optional[dict[str, int]] = None


class ModelEntry(_Spec):
    architecture: str
    index_topk: Optional[int]
    num_attention_heads: Optional[int]
    learnable_sink: bool = False
    index_kpool: int = Field(default=1, ge=1)
    index_topk_freq: int = Field(default=1, ge=1)
    index_topk_pattern: Optional[str] = None
    qk_rope_head_dim: Optional[int] = Field(default=None, ge=0, description="when it differs from the family's mla (0: NoPE)")


class ModelCatalog(_Spec):
    families: dict[str, FamilySpec]
    models: dict[str, ModelEntry]


class Cell(_Spec):
    devices: list[str]  # device classes, checked against devices.yaml on load
    phases: list[Phase]
    kv: list[KvDtype]
    status: Status
    reason: Optional[str] = None
    evidence: list[str] = []


class SglangChoice(_Spec):
    """The sglang releases that list a backend among the --nsa/--dsa-{prefill,decode}-backend choices."""

    since: str = Field(description="first release listing it (both flags unless per_phase says otherwise)")
    per_phase: dict[Phase, Optional[str]] = Field(
        default={}, description="first release per flag, where it differs; null = never listed for that flag")
    until: Optional[str] = Field(default=None, description="last release listing it; unset = still listed")


class BackendSpec(_Spec):
    description: str
    package: str = Field(description="the distribution that ships the kernel")
    kernel: Optional[str] = Field(default=None, description="the kernel library, when not named after the package")
    phases: list[Phase]
    kv_layouts: dict[KvDtype, KvLayout] = Field(description="the KV-cache layout it reads per KV dtype")
    cells: list[Cell]
    elsewhere: str
    sglang_choice: Optional[SglangChoice] = None
    page_size: Optional[int] = None
    pad_heads_to: dict[str, int] = {}  # device class → heads, checked on load
    requires_index_topk: list[int] = []
    min_versions: dict[str, str] = {}
    evidence: list[str] = []

    @property
    def served_by(self) -> str:
        return f"{self.kernel} ({self.package})" if self.kernel else self.package


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


def version_ge(have: str, need: str) -> bool:
    """PEP 440 (nsa_policy.base.versions): 0.6.13rc1 < 0.6.13 < 0.6.13.post1, and +cu130 does not count."""
    return versions.version_ge(have, need)


class Catalog:
    """Loaded once; queries are dictionary lookups."""

    def __init__(self, root: Path):
        self.root = root
        self.device_doc, device_data = load_doc(DeviceCatalog, root / "devices.yaml")
        self.model_doc, _ = load_doc(ModelCatalog, root / "models.yaml")
        self.backend_doc, backend_data = load_doc(BackendCatalog, root / "backends.yaml")
        self._check_references(device_data, backend_data)
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
        for cls, cls_spec in self.device_doc.classes.items():
            self._devices[cls] = DeviceFacts(name=cls, device_class=cls, vendor=cls_spec.vendor,
                                             compute_capability=cls_spec.compute_capability, source="capability")
        for name, entry in self.device_doc.devices.items():
            cls_spec = self.device_doc.classes[entry.device_class]
            self._devices[name] = DeviceFacts(
                name=name, device_class=entry.device_class, vendor=cls_spec.vendor,
                compute_capability=cls_spec.compute_capability, product_name=entry.product,
                memory_gb=entry.memory_gb, sm_count=entry.sm_count, source="catalog")
        # Per device class, from the matrix: does some backend run each phase for one KV dtype?
        running = {(d, k, p) for (_, d, k, p), cap in self._cells.items() if cap.runs}
        self._runs_dsa = {cls: any(all((cls, kv, p) in running for p in PHASES) for kv in KV_DTYPES)
                          for cls in self.device_doc.classes}

    def _check_references(self, device_data: Any, backend_data: Any) -> None:
        """Names that point into another catalog file must exist there (errors at file:line)."""
        classes = self.device_doc.classes
        valid = ", ".join(classes)

        def bad(path: Path, data: Any, loc: list[Any], value: str) -> RuleFileError:
            where = ".".join(str(p) for p in loc)
            return RuleFileError(str(path), line_of(data, loc),
                                 f"{where}: {value!r} is not a device class of devices.yaml; valid: {valid}")

        for name, entry in self.device_doc.devices.items():
            if entry.device_class not in classes:
                raise bad(self.root / "devices.yaml", device_data, ["devices", name, "class"], entry.device_class)
        for name, spec in self.backend_doc.backends.items():
            for i, cell in enumerate(spec.cells):
                for j, dev in enumerate(cell.devices):
                    if dev not in classes:
                        raise bad(self.root / "backends.yaml", backend_data, ["backends", name, "cells", i, "devices", j], dev)
                if cell.status != "unsupported":
                    for kv in cell.kv:
                        if kv not in spec.kv_layouts:
                            raise RuleFileError(str(self.root / "backends.yaml"),
                                                line_of(backend_data, ["backends", name, "kv_layouts"]),
                                                f"backends.{name}.kv_layouts: no layout for {kv}, which a cell runs")
            for dev in spec.pad_heads_to:
                if dev not in classes:
                    raise bad(self.root / "backends.yaml", backend_data, ["backends", name, "pad_heads_to", dev], dev)

    # devices --------------------------------------------------------------
    @property
    def device_names(self) -> list[str]:
        return list(self.device_doc.devices)

    @property
    def device_classes(self) -> list[str]:
        return list(self.device_doc.classes)

    def check_device(self, facts: DeviceFacts, field: str = "device") -> DeviceFacts:
        """Device facts from outside the catalog (a caller's DeviceFacts) must name a catalog class."""
        if facts.device_class not in self.device_doc.classes:
            raise InputError(f"{field}.device_class", facts.device_class, self.device_classes,
                             hint="not a device class of rules/catalog/devices.yaml")
        return facts

    def runs_dsa(self, device_class: str) -> bool:
        """Some backend runs prefill and some runs decode for one KV dtype here (the matrix alone)."""
        return self._runs_dsa.get(device_class, False)

    def mha_one_shot(self, vendor: str, compute_capability: Optional[tuple[int, int]],
                     sglang_release: Optional[str] = None) -> bool:
        """sglang's device gate for dense MHA one-shot prefill (devices.yaml `mha_one_shot`): the
        ranges every release has, plus those a release at or after `sglang_release` added."""
        return any(r.holds(vendor, compute_capability, sglang_release)
                   for r in self.device_doc.mha_one_shot.capabilities)

    def class_mha_one_shot(self, device_class: str, sglang_release: Optional[str] = None) -> bool:
        spec = self.device_doc.classes.get(device_class)
        return spec is not None and self.mha_one_shot(spec.vendor, spec.compute_capability, sglang_release)

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

    def capability_of(self, device_class: str) -> Optional[tuple[str, Optional[tuple[int, int]]]]:
        """(vendor, compute capability) of a device class: the catalog's, else read from an NVIDIA class
        name outside it ('sm107' → 10.7); None for anything else. The one reading of a class's capability,
        always with its vendor: a ROCm class that reports (12, 5) (gfx1250) is never an sm12x GPU."""
        spec = self.device_doc.classes.get(device_class)
        if spec is not None:
            return spec.vendor, (tuple(spec.compute_capability) if spec.compute_capability else None)  # type: ignore[return-value]
        if device_class.startswith("sm") and device_class[2:].isdigit() and len(device_class) >= 4:
            sm = int(device_class[2:])
            return "nvidia", (sm // 10, sm % 10)
        return None

    def class_for_capability(self, major: int, minor: int, vendor: str = "nvidia") -> Optional[str]:
        for cls, spec in self.device_doc.classes.items():
            if spec.vendor == vendor and spec.compute_capability == (major, minor):
                return cls
        return None

    def vendor_class(self, name: str, vendor: str) -> Optional[str]:
        """`name` when it is a device class of `vendor` (ROCm reports its gfx arch, the class name)."""
        spec = self.device_doc.classes.get(name)
        return name if spec is not None and spec.vendor == vendor else None

    # models ---------------------------------------------------------------
    @property
    def model_ids(self) -> list[str]:
        return list(self.model_doc.models)

    @property
    def family_names(self) -> list[str]:
        return list(self.model_doc.families)

    def check_model(self, facts: ModelFacts, field: str = "model") -> ModelFacts:
        """Model facts from outside the catalog must name a catalog family (or none)."""
        if facts.family is not None and facts.family not in self.model_doc.families:
            raise InputError(f"{field}.family", facts.family, self.family_names,
                             hint="not a family of rules/catalog/models.yaml")
        return facts

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
                          index_topk=entry.index_topk, num_attention_heads=entry.num_attention_heads,
                          learnable_sink=entry.learnable_sink, index_kpool=entry.index_kpool,
                          index_topk_freq=entry.index_topk_freq, index_topk_pattern=entry.index_topk_pattern,
                          qk_rope_head_dim=self._rope_dim(entry), source="catalog")

    def _rope_dim(self, entry: ModelEntry) -> Optional[int]:
        """The model's own qk_rope_head_dim, else its family's (models.yaml mla), else None."""
        if entry.qk_rope_head_dim is not None:
            return entry.qk_rope_head_dim
        fam = self.arch_family.get(entry.architecture)
        mla = self.model_doc.families[fam].mla if fam else None
        return mla.get("qk_rope_head_dim") if mla else None

    def model_from_config(self, config: Mapping[str, Any], *, source: str, model_id: Optional[str] = None) -> ModelFacts:
        archs = config.get("architectures") or []
        if isinstance(archs, str):
            archs = [archs]
        if not isinstance(archs, (list, tuple)) or not archs or not all(isinstance(a, str) for a in archs):
            raise InputError(f"{source}: architectures", archs, hint="a list of architecture names is required")
        topk = config.get("index_topk")
        heads = config.get("num_attention_heads")
        for key, val in (("index_topk", topk), ("num_attention_heads", heads)):
            if val is not None and (not isinstance(val, int) or isinstance(val, bool) or val <= 0):
                raise InputError(f"{source}: {key}", val, hint="a positive integer")
        variants: dict[str, Any] = {}
        for key in ("index_kpool", "index_topk_freq"):
            val = config.get(key)
            if val is not None:
                if not isinstance(val, int) or isinstance(val, bool) or val <= 0:
                    raise InputError(f"{source}: {key}", val, hint="a positive integer")
                variants[key] = val
        rope = config.get("qk_rope_head_dim")
        if rope is not None:
            if not isinstance(rope, int) or isinstance(rope, bool) or rope < 0:
                raise InputError(f"{source}: qk_rope_head_dim", rope, hint="a non-negative integer (0: NoPE)")
            variants["qk_rope_head_dim"] = rope
        sink = config.get("learnable_sink")
        if sink is not None:
            if not isinstance(sink, bool):
                raise InputError(f"{source}: learnable_sink", sink, ["true", "false"], hint="a boolean")
            variants["learnable_sink"] = sink
        head_dim = config.get("index_head_dim")
        if head_dim is not None:
            if not isinstance(head_dim, int) or isinstance(head_dim, bool) or head_dim <= 0:
                raise InputError(f"{source}: index_head_dim", head_dim, hint="a positive integer")
            variants["index_head_dim"] = head_dim
        model_type = config.get("model_type")
        if model_type is not None:
            if not isinstance(model_type, str):
                raise InputError(f"{source}: model_type", model_type, hint="a string (config.json model_type)")
            variants["model_type"] = model_type
        pattern = config.get("index_topk_pattern")
        if pattern is not None:
            if not isinstance(pattern, str):
                raise InputError(f"{source}: index_topk_pattern", pattern, hint="a string of layer kinds")
            variants["index_topk_pattern"] = pattern
        arch = next((a for a in archs if a in self.arch_family), archs[0])
        return ModelFacts(model_id=model_id, architecture=arch, family=self.family_of(arch, topk),
                          index_topk=topk, num_attention_heads=heads, source=source, **variants)

    def model_from_path(self, path: Path, field: str = "model") -> ModelFacts:
        cfg = path / "config.json" if path.is_dir() else path
        if not cfg.exists():
            raise InputError(field, str(path), hint="no config.json there")
        # A model path is input: regular file, size cap, UTF-8, bounded nesting (safe_io), never /dev/zero.
        text = safe_io.read_text(cfg, field=field)
        try:
            data = safe_io.load_json_text(text, str(cfg), field=field)
        except json.JSONDecodeError as exc:
            raise InputError(field, f"{cfg}:{exc.lineno}", hint=f"not valid JSON: {exc.msg}") from None
        if not isinstance(data, dict):
            raise InputError(field, str(cfg), hint="config.json must hold a JSON object")
        return self.model_from_config(data, source=str(cfg), model_id=str(path))

    # backends -------------------------------------------------------------
    @property
    def backend_names(self) -> list[str]:
        return list(self.backends)

    def runs_on(self, backend: str) -> tuple[str, ...]:
        """The device classes where some cell of `backend` runs (catalog order)."""
        hits = {d for (b, d, k, p), cap in self._cells.items() if b == backend and cap.runs}
        return tuple(c for c in self.device_doc.classes if c in hits)

    def layouts_read(self, backend: str) -> tuple[str, ...]:
        """The KV layouts `backend` reads somewhere: those of the KV dtypes some cell runs."""
        spec = self.backends[backend]
        kvs = {k for (b, d, k, p), cap in self._cells.items() if b == backend and cap.runs}
        return tuple(dict.fromkeys(layout for kv, layout in spec.kv_layouts.items() if kv in kvs))

    def sglang_since(self, backend: str, phase: str) -> Optional[str]:
        """The first sglang release listing `backend` as a --nsa/--dsa-`phase`-backend choice."""
        spec = self.backends.get(backend)
        choice = spec.sglang_choice if spec else None
        if choice is None:
            return None
        for flag_phase, release in choice.per_phase.items():
            if flag_phase == phase:
                return release
        return choice.since

    def sglang_lists(self, backend: str, phase: str, release: str) -> bool:
        """Does sglang `release` accept `backend` for `phase` (--nsa/--dsa-`phase`-backend choices)?"""
        since = self.sglang_since(backend, phase)
        if since is None or not version_ge(release, since):
            return False
        until = self.backends[backend].sglang_choice.until  # type: ignore[union-attr]
        return until is None or version_ge(until, release)

    def sglang_choices(self, release: str, phase: Optional[str] = None) -> list[str]:
        """The backends sglang `release` lists as choices (of `phase`'s flag, or of either flag)."""
        phases = (phase,) if phase else PHASES
        return [b for b in self.backends if any(self.sglang_lists(b, p, release) for p in phases)]

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
    from nsa_policy.base import snapshot

    folder = root or catalog_dir()
    # The shipped catalog builds to the same objects every time (its matrix cells and device facts
    # validated once): a fresh process loads them from their snapshot, as it does a compiled bundle.
    if snapshot.enabled(folder / "devices.yaml"):
        return snapshot.cached_over_rules(f"catalog:{folder}", lambda: Catalog(folder))
    return Catalog(folder)


# The facts' JSON schemas list the shipped catalog's names (core.facts.SCHEMA_NAMES).
SCHEMA_NAMES.update({"device_class": lambda: list(load_catalog().device_classes),
                     "family": lambda: list(load_catalog().family_names)})
