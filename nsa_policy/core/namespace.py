"""The flat fact namespace that rule conditions read (`device.class`, `out.prefill_backend`, …).

Static facts are filled once per evaluation; `cap.*`, `req.*` and `pad.*` are computed on access
from the outputs decided so far, so a validation sees the final choice.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any, Optional

from nsa_policy.catalog.store import Catalog
from nsa_policy.core.decision import OUTPUT_FIELDS
from nsa_policy.core.facts import DeviceFacts, Facts, ModelFacts, ServingConfig, effective_tp_size

STATIC_PATHS = frozenset(
    [f"device.{k}" for k in ("name", "class", "vendor", "major", "minor", "product", "memory_gb", "sm_count",
                              "runs_dsa", "mha_one_shot")]
    + [f"model.{k}" for k in ("id", "family", "architecture", "index_topk", "num_attention_heads", "is_dsa",
                              "learnable_sink", "index_kpool", "index_topk_freq", "index_topk_pattern",
                              "index_topk_sharing", "index_kpool_page_size",
                              "qk_rope_head_dim", "model_type", "index_head_dim")]
    + [f"config.{k}" for k in ServingConfig.model_fields] + ["config.kv_cache_dtype_raw"]
    + ["env.dense_attn_kv_len_threshold", "env.threshold_env_var"]
    + [f"derived.{k}" for k in ("tp_size", "attn_tp_size", "heads_per_rank", "tp_divisible", "heads_divisible",
                                "tp_dcp_divisible", "pcp_dcp_valid", "pcp_dcp_sizes", "tp_attn_cp_divisible",
                                "tp_dp_attn_cp_divisible", "tp_attn_dp_attn_cp_divisible", "tp_dp_divisible")]
    + ["policy.dsa_scope"]  # set by the evaluator from the bundle: full, family_only or none
    + [f"input.{k}" for k in ("prefill_backend_known", "decode_backend_known", "threshold", "threshold_source",
                               "dsa_flags_set", "spellings", "release")]
    + [f"out.{k}" for k in OUTPUT_FIELDS] + [f"prov.{k}" for k in OUTPUT_FIELDS]
)
LAZY_PATHS = frozenset(f"{kind}.{phase}{suffix}" for phase in ("prefill", "decode")
                       for kind, suffix in (("cap", ".status"), ("cap", ".reason"), ("req", ""),
                                            ("pad", ""), ("pad", "_factor")))
LAZY_PREFIXES = ("pkg.",)
def _engine_family(path: str) -> Optional[tuple[Any, str]]:
    """(the engine, what) when `path` is in the fact family named after a registered engine."""
    from nsa_policy import engines  # the registry: engine packages load on first use

    family, _, what = path.partition(".")
    return (engines.get(family), what) if family in engines.names() else None


@lru_cache(maxsize=1)
def _engine_env_paths() -> frozenset[str]:
    """The `env.*` facts the engines read from their own variables (Engine.env_fact_paths)."""
    from nsa_policy import engines

    return frozenset(p for e in engines.every() for p in e.env_fact_paths())


def known_path(path: str) -> bool:
    if path in STATIC_PATHS or path in LAZY_PATHS or path.startswith(LAZY_PREFIXES):
        return True
    if path in _engine_env_paths():
        return True
    hit = _engine_family(path)
    return hit is not None and bool(hit[0].known_fact(hit[1]))


def all_paths() -> list[str]:
    from nsa_policy import engines

    own = [p for e in engines.every() for p in e.fact_paths()]
    return sorted(STATIC_PATHS | LAZY_PATHS | _engine_env_paths() | {p for p in own if "<" not in p}) + [
        "pkg.<distribution>"] + [
        p for p in own if "<" in p]


# What a fact's value depends on. Consumers (lint's "does this finding need the device?") ask here
# instead of knowing the namespace's prefixes.
INPUTS = ("device", "model", "config", "env", "packages")
_EVERYTHING = frozenset(INPUTS)
_FAMILY_INPUTS = {
    "device": frozenset({"device"}), "model": frozenset({"model"}), "config": frozenset({"config"}),
    "env": frozenset({"env"}), "pkg": frozenset({"packages"}), "input": frozenset({"config", "env"}),
    "policy": frozenset({"model"}),  # the bundle's scope for the architecture
    # Outputs, and what the catalog says about the chosen backends, follow from all of it.
    "out": _EVERYTHING, "cap": _EVERYTHING, "req": _EVERYTHING, "pad": _EVERYTHING,
}
_PATH_INPUTS = {
    "derived.tp_size": frozenset({"config"}),
    "derived.attn_tp_size": frozenset({"config"}), "derived.tp_divisible": frozenset({"config"}),
    "derived.heads_per_rank": frozenset({"model", "config"}), "derived.heads_divisible": frozenset({"model", "config"}),
    "derived.tp_dcp_divisible": frozenset({"config"}), "derived.pcp_dcp_valid": frozenset({"config"}),
    "derived.pcp_dcp_sizes": frozenset({"config"}), "derived.tp_attn_cp_divisible": frozenset({"config"}),
    "derived.tp_dp_attn_cp_divisible": frozenset({"config"}),
    "derived.tp_attn_dp_attn_cp_divisible": frozenset({"config"}), "derived.tp_dp_divisible": frozenset({"config"}),
}
_PROV_INPUTS = frozenset({"config", "env"})


def inputs_of(path: str, *, overwrite: bool = False) -> frozenset[str]:
    """The inputs (device, model, config, env, packages) a fact's value depends on.

    `prov.<output>` is tested for user/env: whether the flag or the environment set the output,
    decided before any rule runs. Where rules may overwrite outputs (compatibility bundles,
    `overwrite=True`) a rule can replace that, so it depends on everything."""
    hit = _PATH_INPUTS.get(path)
    if hit is not None:
        return hit
    family = path.partition(".")[0]
    if family == "prov":
        return _EVERYTHING if overwrite else _PROV_INPUTS
    if family in _FAMILY_INPUTS:
        return _FAMILY_INPUTS[family]
    fam = _engine_family(path)
    own: Optional[frozenset[str]] = fam[0].fact_inputs(fam[1]) if fam is not None else None
    return own if own is not None else _EVERYTHING


def outputs_read(path: str) -> tuple[str, ...]:
    """The outputs a fact's value is computed from: `out.X`/`prov.X` → X; `cap.<phase>.*` → the
    phase's backend and the KV dtype; `req.<phase>`, `pad.<phase>…` → the phase's backend."""
    family, _, rest = path.partition(".")
    if family in ("out", "prov"):
        return (rest,)
    if path in _LAZY_OUTPUTS:
        return _LAZY_OUTPUTS[path]
    hit = _engine_family(path) if family not in _FAMILY_INPUTS else None
    return tuple(hit[0].fact_outputs(hit[1])) if hit is not None else ()


class FactNamespace(dict[str, Any]):
    __slots__ = ("catalog", "packages")

    def __init__(self, catalog: Catalog, packages: dict[str, str]):
        super().__init__()
        self.catalog = catalog
        self.packages = packages

    def __missing__(self, key: str) -> Any:
        spec = _LAZY.get(key)
        if spec is None:
            if key.startswith("pkg."):
                return self.packages.get(key[4:])
            hit = _engine_family(key)
            if hit is not None:
                return hit[0].fact(self, hit[1])
            raise KeyError(key)
        kind, phase, backend_key, what = spec
        backend = self.get(backend_key)
        if kind == "cap":
            kv = self.get("out.kv_cache_dtype")
            if backend is None or kv is None:
                return None
            cap = self.catalog.capability(backend, self["device.class"], kv, phase)
            return cap.status if what == "status" else cap.reason
        if kind == "req":
            if backend is None:
                return None
            return self.catalog.requirement_problem(backend, self["model.index_topk"], self.packages)
        heads = self["derived.heads_per_rank"]
        spec_b = self.catalog.backends.get(backend) if backend else None
        if heads is None or spec_b is None:
            return None
        pad_to = spec_b.pad_heads_to.get(self["device.class"])
        padded = max(heads, pad_to) if pad_to else heads
        return padded / heads if what == "factor" else padded


# lazy path → (kind, phase, the backend output it reads, what)
_LAZY: dict[str, tuple[str, str, str, str]] = {}
for _phase in ("prefill", "decode"):
    _out = f"out.{_phase}_backend"
    _LAZY[f"cap.{_phase}.status"] = ("cap", _phase, _out, "status")
    _LAZY[f"cap.{_phase}.reason"] = ("cap", _phase, _out, "reason")
    _LAZY[f"req.{_phase}"] = ("req", _phase, _out, "")
    _LAZY[f"pad.{_phase}"] = ("pad", _phase, _out, "heads")
    _LAZY[f"pad.{_phase}_factor"] = ("pad", _phase, _out, "factor")
# lazy path → the outputs it is computed from (a capability also depends on the KV dtype)
_LAZY_OUTPUTS: dict[str, tuple[str, ...]] = {
    path: (f"{phase}_backend", "kv_cache_dtype") if kind == "cap" else (f"{phase}_backend",)
    for path, (kind, phase, _, _) in _LAZY.items()}


@lru_cache(maxsize=256)
def _device_part(d: DeviceFacts) -> dict[str, Any]:
    cc = d.compute_capability
    return {"device.name": d.name, "device.class": d.device_class, "device.vendor": d.vendor,
            "device.major": cc[0] if cc else None, "device.minor": cc[1] if cc else None,
            "device.product": d.product_name, "device.memory_gb": d.memory_gb, "device.sm_count": d.sm_count}


@lru_cache(maxsize=256)
def _model_part(m: ModelFacts) -> dict[str, Any]:
    return {"model.id": m.model_id, "model.family": m.family, "model.architecture": m.architecture,
            "model.index_topk": m.index_topk, "model.num_attention_heads": m.num_attention_heads,
            "model.is_dsa": m.family is not None, "model.learnable_sink": m.learnable_sink,
            "model.index_kpool": m.index_kpool, "model.index_topk_freq": m.index_topk_freq,
            "model.index_topk_pattern": m.index_topk_pattern,
            # layers share another layer's top-k (index_topk_freq > 1, or an 'S' in index_topk_pattern):
            # sglang 0.5.13+ refuses two-batch overlap with it (model_hook _validate_dsa_tbo_index_sharing)
            "model.index_topk_sharing": m.index_topk_freq > 1 or "S" in (m.index_topk_pattern or ""),
            # sglang 0.5.22+ pages: 64 tokens per index page, index_kpool pages pooled (deepseek_v2.py)
            "model.index_kpool_page_size": 64 * m.index_kpool,
            # 0 for a NoPE model; None where neither the catalog nor the config says
            "model.qk_rope_head_dim": m.qk_rope_head_dim,
            "model.model_type": m.model_type, "model.index_head_dim": m.index_head_dim}


@lru_cache(maxsize=256)
def _catalog_device_part(d: DeviceFacts, catalog: Catalog) -> dict[str, Any]:
    # Facts the catalog derives for this device: whether the matrix has DSA kernels for its class,
    # and sglang's dense MHA one-shot gate (devices.yaml mha_one_shot) for its capability.
    return {"device.runs_dsa": catalog.runs_dsa(d.device_class),
            "device.mha_one_shot": catalog.mha_one_shot(d.vendor, d.compute_capability)}


_UNSET_OUTPUTS = {f"{kind}.{f}": None for f in OUTPUT_FIELDS for kind in ("out", "prov")}
_CONFIG_KEYS = tuple((f"config.{name}", name) for name in ServingConfig.model_fields)


def device_part(d: DeviceFacts, catalog: Optional[Catalog] = None) -> dict[str, Any]:
    """The `device.*` facts of a device (with a catalog, also those the catalog derives for it)."""
    if catalog is None:
        return _device_part(d)
    return {**_device_part(d), **_catalog_device_part(d, catalog)}


def engines_every() -> list[Any]:
    from nsa_policy import engines

    return list(engines.every())


def _pcp_dcp_sizes(c: ServingConfig) -> set[int]:
    pcp = c.prefill_context_parallel_size
    return {1, pcp, effective_tp_size(c) * pcp}


def build_namespace(facts: Facts, catalog: Catalog, engine: Any = None) -> FactNamespace:
    """The namespace of one evaluation; `engine` (default: the config's) reads config.* in its own names."""
    if engine is None:
        from nsa_policy import engines

        engine = engines.get(facts.config.engine)
    m, c, e, x = facts.model, facts.config, facts.env, facts.derived
    ns = FactNamespace(catalog, e.packages)
    ns.update(_device_part(facts.device))
    ns.update(_catalog_device_part(facts.device, catalog))
    ns.update(_model_part(m))
    ns.update(_UNSET_OUTPUTS)
    cfg = c.__dict__
    for key, name in _CONFIG_KEYS:
        ns[key] = cfg[name]
    raw_kv = c.kv_cache_dtype
    ns["config.kv_cache_dtype_raw"] = raw_kv
    ns.update(engine.config_facts(c))  # the KV dtype (and backend) in the engine's own names
    names = catalog.backends
    threshold, source = (c.dense_attn_kv_len_threshold, "flag") if c.dense_attn_kv_len_threshold is not None else (
        (e.dense_attn_kv_len_threshold, "env") if e.dense_attn_kv_len_threshold is not None else (None, None))
    for other in engines_every():  # each engine's own variables, as its readers parse them (env.*)
        ns.update(other.env_facts(e))
    ns.update({
        "env.dense_attn_kv_len_threshold": e.dense_attn_kv_len_threshold,
        "env.threshold_env_var": e.threshold_env_var,
        "derived.tp_size": effective_tp_size(c),  # the world size sglang's CP checks compare with 8
        "derived.attn_tp_size": x.attn_tp_size, "derived.heads_per_rank": x.heads_per_rank,
        "derived.tp_divisible": (effective_tp_size(c) % c.dp_size == 0) if c.enable_dp_attention else True,
        "derived.heads_divisible": (m.num_attention_heads % x.attn_tp_size == 0) if m.num_attention_heads else True,
        # Without prefill CP, decode CP reuses the TP ranks (tp % dcp == 0); with it, DCP spans nothing, the
        # PCP axis or TP x PCP (the DCP sizes a parallel layout can have; vLLM's ParallelConfig checks both)
        "derived.tp_dcp_divisible": effective_tp_size(c) % c.dcp_size == 0,
        "derived.pcp_dcp_valid": c.dcp_size in _pcp_dcp_sizes(c),
        "derived.pcp_dcp_sizes": str(sorted(_pcp_dcp_sizes(c))),
        # The attention-CP asserts: tp % attn_cp, then tp % (dp x attn_cp) with dp_size as given, or (from
        # sglang 0.5.22, where plain dp_size counts replicas) with the attention-DP width
        "derived.tp_attn_cp_divisible": effective_tp_size(c) % c.attn_cp_size == 0,
        "derived.tp_dp_attn_cp_divisible": effective_tp_size(c) % (c.dp_size * c.attn_cp_size) == 0,
        "derived.tp_attn_dp_attn_cp_divisible": effective_tp_size(c) % (
            (c.dp_size if c.enable_dp_attention else 1) * c.attn_cp_size) == 0,
        # tp % dp whether or not DP attention is on: sglang 0.5.22+ DSA prefill CP runs --dp-size as attention DP
        "derived.tp_dp_divisible": effective_tp_size(c) % c.dp_size == 0,
        "input.prefill_backend_known": c.prefill_backend is None or c.prefill_backend in names,
        "input.decode_backend_known": c.decode_backend is None or c.decode_backend in names,
        "input.threshold": threshold, "input.threshold_source": source,
        "input.dsa_flags_set": c.enable_hisparse or any(v is not None for v in (
            c.prefill_backend, c.decode_backend, c.dense_attn_kv_len_threshold)),
        "input.spellings": facts.spellings,
        "input.release": facts.release,
    })
    return ns


def threshold_detail(ns: FactNamespace) -> Optional[str]:
    src = ns["input.threshold_source"]
    if src == "flag":
        return "--dense-attn-kv-len-threshold"
    if src == "env":
        var: Optional[str] = ns["env.threshold_env_var"]
        return var
    return None
