"""vLLM's namespace facts (the `vllm.*` family), computed on access from the outputs so far.

Whether the chosen attention_backend passes vLLM's validate_configuration for the KV dtype at
selection, its reasons (as vLLM prints them), the dtype vLLM stores after its rewrite, the backend's
dense short-prefill path, a crash after selection on this vendor, a NotImplementedError while the
layers are built (FlashMLA under DCP), vLLM's block-size choice; and two input checks.
"""
from __future__ import annotations

from typing import Any

# what → nothing: the facts of the family (vllm.<what>)
FACTS = ("backend_known", "kv_known", "quantized_kv", "valid", "reasons", "stored_kv", "dense_prefill", "crashes",
         "fails_after_selection", "block_size", "indexer_mxfp4_ok", "indexer_dtype_known", "block_size_cause", "head_size")
# The input checks read the flags alone, the MXFP4 indexer check the device alone; the rest read the outputs.
INPUTS = {"backend_known": frozenset({"config"}), "head_size": frozenset({"model"}), "kv_known": frozenset({"config"}),
          "indexer_dtype_known": frozenset({"config"}), "indexer_mxfp4_ok": frozenset({"device"})}
OUTPUTS_READ = ("attention_backend", "requested_kv_cache_dtype")


def vllm_fact(ns: Any, what: str) -> Any:
    from nsa_policy.engines.vllm.catalog import UNQUANTIZED_KV, load_vllm, selector_facts

    v = load_vllm()
    if what == "backend_known":
        b = ns["config.attention_backend"]
        return b is None or v.is_registered(b)
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
    if what == "head_size":  # the MLA head the selector sees: kv_lora_rank + qk_rope_head_dim (512: NoPE)
        from nsa_policy.engines.vllm.catalog import family_mla

        mla = family_mla(ns.catalog, ns["model.family"])
        rope = ns["model.qk_rope_head_dim"] if ns["model.qk_rope_head_dim"] is not None else mla.get("qk_rope_head_dim")
        return mla["kv_lora_rank"] + (rope or 0) if mla.get("kv_lora_rank") is not None else None
    if what == "block_size_cause":
        return _block_size_cause(ns, v)
    backend = ns["out.attention_backend"]
    if backend in v.doc.registered:  # another registered name: a DSA layer fails its validation
        return {"valid": False, "reasons": str([v.doc.registered[backend]])}.get(what)
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


def _block_size_cause(ns: Any, v: Any) -> Any:
    """With a --block-size: the sparse backends that validate here without it but not with it, as
    "NAME (multiples of N)", joined; None when the block size turns none away (or none is given)."""
    from nsa_policy.engines.vllm.catalog import selector_facts

    if ns["config.page_size"] is None or ns["out.requested_kv_cache_dtype"] is None:
        return None
    sel = selector_facts(ns, ns.catalog)
    freed = [f"{name} (multiples of {'/'.join(map(str, spec.block_sizes))})" for name, spec in v.backends.items()
             if spec.sparse and spec.block_sizes and v.reasons(name, sel)
             and not v.reasons(name, {**sel, "sel.block_size": None})]
    return ", ".join(freed) or None
