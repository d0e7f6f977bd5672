"""The flat fact namespace that rule conditions read (`device.class`, `out.prefill_backend`, …).

Static facts are filled once per evaluation; `cap.*`, `req.*` and `pad.*` are computed on access
from the outputs decided so far, so a validation sees the final choice.
"""
from __future__ import annotations

from typing import Any, Optional

from .catalog import Catalog
from .decision import OUTPUT_FIELDS
from .facts import Facts, ServingConfig, effective_tp_size

KV_ALIASES = {"auto": "auto", "bfloat16": "bfloat16", "bf16": "bfloat16", "fp8_e4m3": "fp8_e4m3"}

STATIC_PATHS = frozenset(
    [f"device.{k}" for k in ("name", "class", "vendor", "major", "minor", "product", "memory_gb", "sm_count")]
    + [f"model.{k}" for k in ("id", "family", "architecture", "index_topk", "num_attention_heads", "is_dsa")]
    + [f"config.{k}" for k in ServingConfig.model_fields] + ["config.kv_cache_dtype_raw"]
    + ["env.dense_attn_kv_len_threshold", "env.threshold_env_var"]
    + [f"derived.{k}" for k in ("attn_tp_size", "heads_per_rank", "tp_divisible", "heads_divisible")]
    + [f"input.{k}" for k in ("prefill_backend_known", "decode_backend_known", "threshold", "threshold_source",
                               "dsa_flags_set")]
    + [f"out.{k}" for k in OUTPUT_FIELDS] + [f"prov.{k}" for k in OUTPUT_FIELDS]
)
LAZY_PATHS = frozenset(f"{kind}.{phase}{suffix}" for phase in ("prefill", "decode")
                       for kind, suffix in (("cap", ".status"), ("cap", ".reason"), ("req", ""),
                                            ("pad", ""), ("pad", "_factor")))
LAZY_PREFIXES = ("pkg.",)


def known_path(path: str) -> bool:
    return path in STATIC_PATHS or path in LAZY_PATHS or path.startswith(LAZY_PREFIXES)


def all_paths() -> list[str]:
    return sorted(STATIC_PATHS | LAZY_PATHS) + ["pkg.<distribution>"]


class FactNamespace(dict):
    __slots__ = ("catalog", "packages")

    def __init__(self, catalog: Catalog, packages: dict):
        super().__init__()
        self.catalog = catalog
        self.packages = packages

    def __missing__(self, key: str) -> Any:
        kind, _, rest = key.partition(".")
        if kind == "pkg":
            return self.packages.get(rest)
        phase = rest.split(".")[0].removesuffix("_factor")
        backend = self.get(f"out.{phase}_backend")
        kv = self.get("out.kv_cache_dtype")
        dev = self["device.class"]
        if kind == "cap":
            if backend is None or kv is None:
                return None
            cap = self.catalog.capability(backend, dev, kv, phase)
            return cap.status if rest.endswith(".status") else cap.reason
        if kind == "req":
            if backend is None:
                return None
            return self.catalog.requirement_problem(backend, self["model.index_topk"], self.packages)
        if kind == "pad":
            heads = self["derived.heads_per_rank"]
            spec = self.catalog.backends.get(backend) if backend else None
            if heads is None or spec is None:
                return None
            pad_to = spec.pad_heads_to.get(dev)
            padded = max(heads, pad_to) if pad_to else heads
            return padded / heads if rest.endswith("_factor") else padded
        raise KeyError(key)


def build_namespace(facts: Facts, catalog: Catalog) -> FactNamespace:
    d, m, c, e, x = facts.device, facts.model, facts.config, facts.env, facts.derived
    ns = FactNamespace(catalog, dict(e.packages))
    cc = d.compute_capability
    ns.update({
        "device.name": d.name, "device.class": d.device_class, "device.vendor": d.vendor,
        "device.major": cc[0] if cc else None, "device.minor": cc[1] if cc else None,
        "device.product": d.product_name, "device.memory_gb": d.memory_gb, "device.sm_count": d.sm_count,
        "model.id": m.model_id, "model.family": m.family, "model.architecture": m.architecture,
        "model.index_topk": m.index_topk, "model.num_attention_heads": m.num_attention_heads,
        "model.is_dsa": m.family is not None,
        "env.dense_attn_kv_len_threshold": e.dense_attn_kv_len_threshold,
        "env.threshold_env_var": e.threshold_env_var,
        "derived.attn_tp_size": x.attn_tp_size, "derived.heads_per_rank": x.heads_per_rank,
        "derived.tp_divisible": (effective_tp_size(c) % c.dp_size == 0) if c.enable_dp_attention else True,
        "derived.heads_divisible": (m.num_attention_heads % x.attn_tp_size == 0) if m.num_attention_heads else True,
    })
    for name in ServingConfig.model_fields:
        ns[f"config.{name}"] = getattr(c, name)
    raw_kv = c.kv_cache_dtype
    ns["config.kv_cache_dtype_raw"] = raw_kv
    ns["config.kv_cache_dtype"] = KV_ALIASES.get(raw_kv, raw_kv) if raw_kv is not None else "auto"
    names = catalog.backends
    ns["input.prefill_backend_known"] = c.nsa_prefill_backend is None or c.nsa_prefill_backend in names
    ns["input.decode_backend_known"] = c.nsa_decode_backend is None or c.nsa_decode_backend in names
    if c.dense_attn_kv_len_threshold is not None:
        ns["input.threshold"], ns["input.threshold_source"] = c.dense_attn_kv_len_threshold, "flag"
    elif e.dense_attn_kv_len_threshold is not None:
        ns["input.threshold"], ns["input.threshold_source"] = e.dense_attn_kv_len_threshold, "env"
    else:
        ns["input.threshold"], ns["input.threshold_source"] = None, None
    ns["input.dsa_flags_set"] = any(v is not None for v in (
        c.nsa_prefill_backend, c.nsa_decode_backend, c.dense_attn_kv_len_threshold)) or c.enable_hisparse
    for f in OUTPUT_FIELDS:
        ns[f"out.{f}"] = None
        ns[f"prov.{f}"] = None
    return ns


def threshold_detail(ns: FactNamespace) -> Optional[str]:
    src = ns["input.threshold_source"]
    if src == "flag":
        return "--dense-attn-kv-len-threshold"
    if src == "env":
        return ns["env.threshold_env_var"]
    return None
