"""vLLM's alternatives kinds: what a vLLM finding lists instead (`emit.alternatives: {vllm_backends: valid}`)."""
from __future__ import annotations

from typing import Any

from nsa_policy.catalog.store import Catalog
from nsa_policy.core.alternatives import AlternativesKind
from nsa_policy.engines.vllm.reads import SELECTOR_READS

# vLLM's validation reads the selector facts (reads.SELECTOR_READS); a backend that fails after selection
# is passed over (by the device's vendor, or the selector facts), and the chosen backend is not its own alternative.
_VLLM_KV_READS = (*SELECTOR_READS, "device.vendor")
_VLLM_BACKENDS_READS = (*_VLLM_KV_READS, "out.attention_backend")


def _vllm_backends(arg: Any, ns: Any, catalog: Catalog) -> tuple[str, ...]:
    """vLLM backend names: every sparse one (all), or those that validate here (valid), other than the chosen."""
    from nsa_policy.engines.vllm.catalog import load_vllm, selector_facts

    v = load_vllm()
    if arg == "all":
        return tuple(v.backend_names)
    if ns["out.requested_kv_cache_dtype"] is None:
        return ()
    sel, current = selector_facts(ns, catalog), ns["out.attention_backend"]
    return tuple(b for b, spec in v.backends.items()
                 if spec.sparse and b != current and not v.reasons(b, sel)
                 and v.fails_here(b, ns["device.vendor"], sel) is None)


def _vllm_choices(arg: Any, ns: Any, catalog: Catalog) -> tuple[str, ...]:
    from nsa_policy.engines.vllm.catalog import load_vllm

    return tuple(load_vllm().argument(str(arg)).choices or ())


def _vllm_kv_or_devices(arg: Any, ns: Any, catalog: Catalog) -> tuple[str, ...]:
    """The KV dtypes some sparse backend validates here (as the selector would see them); when none, say so."""
    from nsa_policy.engines.vllm.catalog import load_vllm, selector_facts

    v = load_vllm()
    sel = selector_facts(ns, catalog)
    found = []
    for kv in v.argument("kv_cache_dtype").choices or ():
        trial = {**sel, "sel.kv_cache_dtype": kv}
        if kv != sel["sel.kv_cache_dtype"] and any(spec.sparse and not v.reasons(b, trial)
                                                   and v.fails_here(b, ns["device.vendor"], trial) is None
                                                   for b, spec in v.backends.items()):
            found.append(f"kv_cache_dtype {kv}")
    return tuple(found) or ("a device with a vLLM sparse backend (sm90, sm100, sm103, sm120, sm121, ROCm)",)


KINDS = (
    AlternativesKind("vllm_backends", "vLLM sparse attention backends: every name (all) or those that validate "
                     "here (valid)", "all or valid", lambda a: a in ("all", "valid"),
                     lambda a: _VLLM_BACKENDS_READS, _vllm_backends),
    AlternativesKind("vllm_choices", "the values a vLLM argument accepts (rules/catalog/vllm/args.yaml)",
                     "a vLLM argument name", lambda a: isinstance(a, str), lambda a: (), _vllm_choices),
    AlternativesKind("vllm_kv_or_devices", "the KV dtypes some vLLM sparse backend validates here", "true",
                     lambda a: a is True, lambda a: _VLLM_KV_READS, _vllm_kv_or_devices),
)
