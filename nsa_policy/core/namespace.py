"""The flat fact namespace that rule conditions read (`device.class`, `out.prefill_backend`, …).

Static facts are filled once per evaluation; `cap.*`, `req.*` and `pad.*` are computed on access
from the outputs decided so far, so a validation sees the final choice.
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Optional, Union

from nsa_policy.catalog.store import Catalog
from nsa_policy.core.decision import OUTPUT_FIELDS
from nsa_policy.core.facts import DeviceFacts, Environment, Facts, ModelFacts, ServingConfig, effective_tp_size

KV_ALIASES = {"auto": "auto", "bfloat16": "bfloat16", "bf16": "bfloat16", "fp8_e4m3": "fp8_e4m3"}

STATIC_PATHS = frozenset(
    [f"device.{k}" for k in ("name", "class", "vendor", "major", "minor", "product", "memory_gb", "sm_count",
                              "runs_dsa", "mha_one_shot")]
    + [f"model.{k}" for k in ("id", "family", "architecture", "index_topk", "num_attention_heads", "is_dsa",
                              "learnable_sink", "index_kpool", "index_topk_freq", "index_topk_pattern",
                              "index_topk_sharing", "index_kpool_page_size")]
    + [f"config.{k}" for k in ServingConfig.model_fields] + ["config.kv_cache_dtype_raw"]
    + ["env.dense_attn_kv_len_threshold", "env.threshold_env_var"]
    + [f"env.{k}" for k in ("use_aiter", "aiter_aot_gluon_pa_mqa_logits", "nsa_hip_disable_preshuffle",
                             "dsa_hip_disable_preshuffle", "nsa_threshold_set", "dsa_threshold_set",
                             "dsa_threshold", "threshold_conflict")]
    + [f"derived.{k}" for k in ("tp_size", "attn_tp_size", "heads_per_rank", "tp_divisible", "heads_divisible")]
    + ["policy.dsa_scope"]  # set by the evaluator from the bundle: full, family_only or none
    + [f"input.{k}" for k in ("prefill_backend_known", "decode_backend_known", "threshold", "threshold_source",
                               "dsa_flags_set", "spellings")]
    + [f"out.{k}" for k in OUTPUT_FIELDS] + [f"prov.{k}" for k in OUTPUT_FIELDS]
)
LAZY_PATHS = frozenset(f"{kind}.{phase}{suffix}" for phase in ("prefill", "decode")
                       for kind, suffix in (("cap", ".status"), ("cap", ".reason"), ("req", ""),
                                            ("pad", ""), ("pad", "_factor")))
LAZY_PREFIXES = ("pkg.",)
# vLLM facts (rules/catalog/vllm/backends.yaml), computed on access from the outputs so far: whether the chosen
# attention_backend passes vLLM's validate_configuration for the KV dtype at selection, its reasons
# (as vLLM prints them), the dtype vLLM stores after its rewrite, the backend's dense short-prefill
# path, a crash after selection on this vendor, a NotImplementedError while the layers are built in this
# configuration (FlashMLA under DCP), vLLM's block-size choice; and two input checks.
VLLM_PATHS = frozenset(f"vllm.{k}" for k in ("backend_known", "kv_known", "quantized_kv", "valid", "reasons",
                                              "stored_kv", "dense_prefill", "crashes", "fails_after_selection",
                                              "block_size",
                                              "indexer_mxfp4_ok", "indexer_dtype_known"))
# sglang.<release>.lists_<phase>_backend: does that sglang release list the configured backend among
# its --nsa/--dsa-<phase>-backend choices (catalog backends.yaml sglang_choice); None when unset/unknown.
_SGLANG_LISTS = re.compile(r"^sglang\.(\d+(?:\.[0-9A-Za-z]+)*)\.lists_(prefill|decode)_backend$")
# sglang.<release>.{refused,deprecated}_spellings: the flags among input.spellings that release's parser
# refuses (with what to use instead) or accepts as deprecated aliases (its own warning text), as one
# line from the argument registry (rules/catalog/sglang/args.yaml); None when there are none.
_SGLANG_SPELLINGS = re.compile(r"^sglang\.(\d+(?:\.[0-9A-Za-z]+)*)\.(refused|deprecated)_spellings$")


def known_path(path: str) -> bool:
    return (path in STATIC_PATHS or path in LAZY_PATHS or path in VLLM_PATHS or path.startswith(LAZY_PREFIXES)
            or _SGLANG_LISTS.match(path) is not None or _SGLANG_SPELLINGS.match(path) is not None)


def all_paths() -> list[str]:
    return sorted(STATIC_PATHS | LAZY_PATHS | VLLM_PATHS) + [
        "pkg.<distribution>", "sglang.<release>.lists_{prefill,decode}_backend",
        "sglang.<release>.{refused,deprecated}_spellings"]


# What a fact's value depends on. Consumers (lint's "does this finding need the device?") ask here
# instead of knowing the namespace's prefixes.
INPUTS = ("device", "model", "config", "env", "packages")
_EVERYTHING = frozenset(INPUTS)
_FAMILY_INPUTS = {
    "device": frozenset({"device"}), "model": frozenset({"model"}), "config": frozenset({"config"}),
    "env": frozenset({"env"}), "pkg": frozenset({"packages"}), "input": frozenset({"config", "env"}),
    "sglang": frozenset({"config"}), "vllm": _EVERYTHING,
    "policy": frozenset({"model"}),  # the bundle's scope for the architecture
    # Outputs, and what the catalog says about the chosen backends, follow from all of it.
    "out": _EVERYTHING, "cap": _EVERYTHING, "req": _EVERYTHING, "pad": _EVERYTHING,
}
_PATH_INPUTS = {
    "derived.tp_size": frozenset({"config"}),
    "derived.attn_tp_size": frozenset({"config"}), "derived.tp_divisible": frozenset({"config"}),
    "derived.heads_per_rank": frozenset({"model", "config"}), "derived.heads_divisible": frozenset({"model", "config"}),
    # vLLM's input checks read the flags alone; its MXFP4 indexer check the device alone
    "vllm.backend_known": frozenset({"config"}), "vllm.kv_known": frozenset({"config"}),
    "vllm.indexer_dtype_known": frozenset({"config"}), "vllm.indexer_mxfp4_ok": frozenset({"device"}),
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
    return _FAMILY_INPUTS.get(family, _EVERYTHING)


def outputs_read(path: str) -> tuple[str, ...]:
    """The outputs a fact's value is computed from: `out.X`/`prov.X` → X; `cap.<phase>.*` → the
    phase's backend and the KV dtype; `req.<phase>`, `pad.<phase>…` → the phase's backend."""
    family, _, rest = path.partition(".")
    if family in ("out", "prov"):
        return (rest,)
    if family == "vllm" and rest not in ("backend_known", "kv_known", "indexer_dtype_known", "indexer_mxfp4_ok"):
        return ("attention_backend", "requested_kv_cache_dtype")
    return _LAZY_OUTPUTS.get(path, ())


@lru_cache(maxsize=1024)
def _sglang_lists_key(key: str) -> Optional[tuple[str, str]]:
    """(release, phase) of a sglang.<release>.lists_<phase>_backend path (parsed once per path), else None."""
    m = _SGLANG_LISTS.match(key)
    return (m.group(1), m.group(2)) if m else None


class FactNamespace(dict[str, Any]):
    __slots__ = ("catalog", "packages")

    def __init__(self, catalog: Catalog, packages: dict[str, str]):
        super().__init__()
        self.catalog = catalog
        self.packages = packages

    def __missing__(self, key: str) -> Any:
        spec = _LAZY.get(key)
        if spec is None:
            if key in VLLM_PATHS:
                return _vllm_fact(self, key[5:])
            if key.startswith("pkg."):
                return self.packages.get(key[4:])
            listed = _sglang_lists_key(key)
            if listed:
                release, phase = listed
                backend = self[f"config.nsa_{phase}_backend"]
                if backend is None or backend not in self.catalog.backends:
                    return None
                return self.catalog.sglang_lists(backend, phase, release)
            spelt = _SGLANG_SPELLINGS.match(key)
            if spelt:
                spellings = self["input.spellings"]
                if not spellings:
                    return None
                from nsa_policy.engines.sglang.args import load_args  # lazy: only inputs with sglang spellings need it

                release, kind = spelt.groups()
                reg = load_args()
                return reg.refused_text(spellings, release) if kind == "refused" else reg.deprecated_text(spellings, release)
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


def _vllm_fact(ns: FactNamespace, what: str) -> Any:
    from nsa_policy.engines.vllm.catalog import UNQUANTIZED_KV, load_vllm, selector_facts

    v = load_vllm()
    if what == "backend_known":
        b = ns["config.attention_backend"]
        return b is None or b.upper() in v.backends
    if what == "kv_known":
        return ns["config.kv_cache_dtype"] in (v.argument("kv_cache_dtype").choices or ())
    if what == "indexer_dtype_known":
        d = ns["config.indexer_kv_dtype"]
        return d is None or d in v.doc.indexer.cache_dtypes
    if what == "indexer_mxfp4_ok":
        return ns["device.vendor"] == "nvidia" and ns["device.major"] in v.doc.indexer.mxfp4_capability_majors
    kv = ns["out.requested_kv_cache_dtype"]
    if what == "quantized_kv":
        return None if kv is None else kv not in UNQUANTIZED_KV
    backend = ns["out.attention_backend"]
    if backend is None or backend not in v.backends:
        return None
    spec = v.backends[backend]
    if what == "dense_prefill":
        return spec.dense_prefill
    if what == "crashes":
        return spec.crashes.reason if spec.crashes and spec.crashes.vendor == ns["device.vendor"] else None
    if what == "block_size":  # None where vLLM's catalog has no DSA indexer (Intel XPU, CPU)
        vendor = ns["device.vendor"]
        return v.block_size(backend, vendor) if vendor in v.doc.indexer.block_sizes else None
    if kv is None:
        return None
    if what == "fails_after_selection":
        return v.fails_after_selection(backend, selector_facts(ns, ns.catalog))
    if what == "stored_kv":
        return v.stored_kv(backend, kv)
    reasons = v.reasons(backend, selector_facts(ns, ns.catalog))
    if what == "valid":
        return not reasons
    return str(list(reasons))  # "reasons": as vLLM prints them in its ValueError


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
            "model.index_kpool_page_size": 64 * m.index_kpool}


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


def build_namespace(facts: Facts, catalog: Catalog) -> FactNamespace:
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
    if c.engine == "vllm":  # vLLM's own names, no sglang aliases (bf16 is not a vLLM dtype)
        ns["config.kv_cache_dtype"] = raw_kv if raw_kv is not None else "auto"
        backend = c.attention_backend
        ns["config.attention_backend"] = None if backend is None or backend.lower() == "auto" else backend.upper()
    else:
        ns["config.kv_cache_dtype"] = KV_ALIASES.get(raw_kv, raw_kv) if raw_kv is not None else "auto"
    names = catalog.backends
    threshold, source = (c.dense_attn_kv_len_threshold, "flag") if c.dense_attn_kv_len_threshold is not None else (
        (e.dense_attn_kv_len_threshold, "env") if e.dense_attn_kv_len_threshold is not None else (None, None))
    ns.update(_env_switches(e))
    ns.update({
        "env.dense_attn_kv_len_threshold": e.dense_attn_kv_len_threshold,
        "env.threshold_env_var": e.threshold_env_var,
        "derived.tp_size": effective_tp_size(c),  # the world size sglang's CP checks compare with 8
        "derived.attn_tp_size": x.attn_tp_size, "derived.heads_per_rank": x.heads_per_rank,
        "derived.tp_divisible": (effective_tp_size(c) % c.dp_size == 0) if c.enable_dp_attention else True,
        "derived.heads_divisible": (m.num_attention_heads % x.attn_tp_size == 0) if m.num_attention_heads else True,
        "input.prefill_backend_known": c.nsa_prefill_backend is None or c.nsa_prefill_backend in names,
        "input.decode_backend_known": c.nsa_decode_backend is None or c.nsa_decode_backend in names,
        "input.threshold": threshold, "input.threshold_source": source,
        "input.dsa_flags_set": c.enable_hisparse or any(v is not None for v in (
            c.nsa_prefill_backend, c.nsa_decode_backend, c.dense_attn_kv_len_threshold)),
        "input.spellings": facts.spellings,
    })
    return ns


def _get_bool_env_var(value: Optional[str]) -> bool:
    """sglang's utils.common.get_bool_env_var: "true"/"1" (any case) hold; anything else is false."""
    return value is not None and value.lower() in ("true", "1")


def _env_switches(e: Environment) -> dict[str, Optional[Union[bool, int]]]:
    """The ROCm preshuffle switches, parsed as sglang's readers parse them. dsa_hip_disable_preshuffle is
    None when the variable is unset (0.5.13-0.5.20 then fall back to the NSA name; 0.5.21+ do not)."""
    v = e.variables
    dsa = v.get("SGLANG_DSA_HIP_DISABLE_PRESHUFFLE")
    nsa, dsa_thr = (_int_env(v.get(f"SGLANG_{p}_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD")) for p in ("NSA", "DSA"))
    return {
        "env.use_aiter": _get_bool_env_var(v.get("SGLANG_USE_AITER")),
        "env.aiter_aot_gluon_pa_mqa_logits": _get_bool_env_var(v.get("AITER_ENABLE_AOT_GLUON_PA_MQA_LOGITS")),
        "env.nsa_hip_disable_preshuffle": _get_bool_env_var(v.get("SGLANG_NSA_HIP_DISABLE_PRESHUFFLE")),
        # environ.EnvBool: true/1/yes/y hold (false/0/no/n do not; sglang raises on anything else)
        "env.dsa_hip_disable_preshuffle": None if dsa is None else dsa.lower() in ("true", "1", "yes", "y"),
        # which threshold names are set (with a value): sglang up to 0.5.12 reads only the NSA one, later only the DSA one
        "env.nsa_threshold_set": nsa is not None,
        "env.dsa_threshold_set": dsa_thr is not None,
        # the DSA name's own value (env.dense_attn_kv_len_threshold is the NSA name's when both are set)
        "env.dsa_threshold": dsa_thr,
        "env.threshold_conflict": nsa is not None and dsa_thr is not None and nsa != dsa_thr,
    }


def _int_env(raw: Optional[str]) -> Optional[int]:
    """A threshold variable's value (environment_from has validated it); None when unset or blank."""
    return None if raw is None or not raw.strip() else int(raw.strip())


def threshold_detail(ns: FactNamespace) -> Optional[str]:
    src = ns["input.threshold_source"]
    if src == "flag":
        return "--dense-attn-kv-len-threshold"
    if src == "env":
        var: Optional[str] = ns["env.threshold_env_var"]
        return var
    return None
