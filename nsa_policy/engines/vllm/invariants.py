"""The invariants of a vLLM recommendation bundle (vllm-default and any non-compat vllm-* bundle).

Like invariants.py for sglang, these read the decision, the facts and vLLM's backend catalog
(rules/catalog/vllm/backends.yaml: what validate_configuration accepts, the KV rewrite, the block sizes), never
the rule files, so a rule that breaks one cannot also hide it. They check the outputs a vLLM decision
holds: the attention backend, the final KV dtype and its layout, the block size, the dense short
prefill and the indexer cache dtype; and that an explicit choice is kept.
"""
from __future__ import annotations

from typing import Any, Iterator, Optional

from nsa_policy.catalog.store import Catalog
from nsa_policy.core.decision import Decision
from nsa_policy.core.facts import Facts

VLLM_INVARIANTS = {
    "vllm-backend-valid": "an accepted vLLM decision's attention backend passes vLLM's validation for the KV dtype "
                          "at selection and starts (no failure after selection)",
    "vllm-kv-stored": "the final KV dtype is vLLM's post-selection rewrite for that backend, with its layout",
    "vllm-block-size": "the block size is vLLM's own choice for the backend and the DSA indexer, or the one given",
    "vllm-dense-prefill": "short prefills go dense (up to index_topk) exactly where the backend has a dense path "
                          "and neither forced MQA nor PCP+DCP turns it off",
    "vllm-indexer-dtype": "the indexer cache is mxfp4 only where asked for on a device that has it, fp8 otherwise",
}


# The KV layout each stored vLLM dtype has (vllm v1/attention/backends/mla/flashmla_sparse.py,
# flashinfer_mla_sparse.py, rocm_aiter_mla_sparse.py).
_LAYOUTS = {"auto": "bf16-576", "bfloat16": "bf16-576", "float16": "fp16-576", "fp8": "fp8-576-per-tensor",
            "fp8_e4m3": "fp8-576-per-tensor", "fp8_ds_mla": "fp8-656-blockwise",
            "nvfp4_ds_mla": "nvfp4-352-blockwise"}
# vLLM's model hooks (model_executor/models/config.py:74-116), for an explicit --kv-cache-dtype (auto is not an explicit choice).
_HOOKED = {("DeepseekV32ForCausalLM", "bfloat16"): "auto"}

Violation = tuple[str, str, str]


def _selector(decision: Decision, facts: Facts, catalog: Catalog) -> dict[str, Any]:
    from nsa_policy.engines.vllm.catalog import selector_facts

    cc = facts.device.compute_capability
    ns = {"device.major": cc[0] if cc else None, "out.requested_kv_cache_dtype": decision.requested_kv_cache_dtype,
          "config.page_size": facts.config.page_size, "config.dcp_size": facts.config.dcp_size,
          "config.prefill_context_parallel_size": facts.config.prefill_context_parallel_size,
          "derived.heads_per_rank": facts.derived.heads_per_rank, "model.index_topk": facts.model.index_topk,
          "model.family": facts.model.family, "model.qk_rope_head_dim": facts.model.qk_rope_head_dim}
    return selector_facts(ns, catalog)


def check_vllm_invariants(decision: Decision, facts: Facts, catalog: Catalog) -> list[Violation]:
    """The vLLM invariants for one decision of a DSA model."""
    return list(_user_choices_kept(decision, facts)) + (
        [] if decision.errors else list(_accepted(decision, facts, catalog)))


def _user_choices_kept(decision: Decision, facts: Facts) -> Iterator[Violation]:
    from nsa_policy.engines.vllm.catalog import load_vllm

    cfg = facts.config
    forced = cfg.attention_backend.upper() if cfg.attention_backend is not None else None
    # a valid name only (an unknown one is refused, NSA050); ROCm ignores a forced backend (NSA352/NSA153)
    if forced in load_vllm().backends and facts.device.vendor == "nvidia" and decision.attention_backend != forced:
        yield ("user-choice-kept", "attention_backend",
               f"the forced attention_backend {cfg.attention_backend} was replaced with {decision.attention_backend!r}")
    if cfg.page_size is not None and decision.page_size not in (None, cfg.page_size):
        yield ("user-choice-kept", "page_size", f"the given block_size {cfg.page_size} was replaced with "
                                                f"{decision.page_size}")
    kv = cfg.kv_cache_dtype
    if kv is not None and kv != "auto" and decision.requested_kv_cache_dtype is not None:
        want = _HOOKED.get((facts.model.architecture, kv), kv)
        if decision.requested_kv_cache_dtype != want:
            yield ("user-choice-kept", "kv_cache_dtype",
                   f"the given kv_cache_dtype {kv} reached vLLM's selector as {decision.requested_kv_cache_dtype} "
                   f"(vLLM's model hook gives {want})")


def _accepted(decision: Decision, facts: Facts, catalog: Catalog) -> Iterator[Violation]:
    from nsa_policy.engines.vllm.catalog import load_vllm

    v = load_vllm()
    dev = facts.device
    backend = decision.attention_backend
    spec = v.backends.get(backend) if backend else None
    if backend is None or spec is None or not spec.sparse:
        yield ("vllm-backend-valid", "no sparse backend", f"accepted with attention_backend {backend!r}, not a vLLM "
                                                          "sparse backend")
        return
    sel = _selector(decision, facts, catalog)
    if dev.vendor == "amd":
        if backend != "ROCM_AITER_MLA_SPARSE":
            yield ("vllm-backend-valid", f"rocm {backend}", f"accepted {backend} on ROCm, where vLLM builds "
                                                           "ROCM_AITER_MLA_SPARSE")
    else:
        reasons = v.reasons(backend, sel)
        if reasons:
            yield ("vllm-backend-valid", f"{backend} invalid", f"accepted {backend} on {dev.device_class} with KV "
                                                              f"{decision.requested_kv_cache_dtype}; vLLM rejects it: "
                                                              f"{list(reasons)}")
    failure = v.fails_here(backend, dev.vendor, sel)
    if failure:
        yield ("vllm-backend-valid", f"{backend} fails", f"accepted {backend} on {dev.device_class}, which fails "
                                                         f"after selection: {failure}")
    yield from _kv(decision, v, backend)
    yield from _block(decision, facts, v, backend)
    yield from _dense(decision, facts, spec.dense_prefill)
    yield from _indexer(decision, facts, v)


def _kv(decision: Decision, v: Any, backend: str) -> Iterator[Violation]:
    requested = decision.requested_kv_cache_dtype
    stored = v.stored_kv(backend, requested) if requested is not None else None
    if decision.kv_cache_dtype != stored:
        yield ("vllm-kv-stored", f"{backend} {requested}", f"{backend} stores KV {requested} as {stored}, decision "
                                                           f"has {decision.kv_cache_dtype}")
    layout: Optional[str] = _LAYOUTS.get(stored) if stored is not None else None
    if layout is None or decision.kv_cache_layout != layout:
        yield ("vllm-kv-stored", f"layout {stored}", f"stored KV {stored} needs layout {layout}, decision has "
                                                     f"{decision.kv_cache_layout}")


def _block(decision: Decision, facts: Facts, v: Any, backend: str) -> Iterator[Violation]:
    vendor = facts.device.vendor
    if facts.config.page_size is not None:
        return  # a given size is kept (user-choice-kept) and validated against the backend (vllm-backend-valid)
    want = v.block_size(backend, vendor) if vendor in v.doc.indexer.block_sizes else None
    if decision.page_size != want:
        yield ("vllm-block-size", f"{backend} {vendor}", f"vLLM chooses block size {want} for {backend} and the DSA "
                                                         f"indexer on {vendor}, decision has {decision.page_size}")


def _dense(decision: Decision, facts: Facts, has_dense_path: bool) -> Iterator[Violation]:
    cfg = facts.config
    dense = has_dense_path and not cfg.sparse_mla_force_mqa and not (
        cfg.prefill_context_parallel_size > 1 and cfg.dcp_size > 1)
    want = facts.model.index_topk if dense else None
    if decision.dense_attn_kv_len_threshold != want:
        yield ("vllm-dense-prefill", f"dense {dense}", f"short prefills {'run' if dense else 'never run'} dense MHA "
                                                       f"here (threshold {want}), decision has "
                                                       f"{decision.dense_attn_kv_len_threshold}")


def _indexer(decision: Decision, facts: Facts, v: Any) -> Iterator[Violation]:
    cc = facts.device.compute_capability
    has_mxfp4 = facts.device.vendor == "nvidia" and cc is not None and cc[0] in v.doc.indexer.mxfp4_capability_majors
    want = "mxfp4" if facts.config.indexer_kv_dtype == "mxfp4" and has_mxfp4 else "fp8"
    if decision.indexer_cache_dtype != want:
        yield ("vllm-indexer-dtype", want, f"indexer_kv_dtype {facts.config.indexer_kv_dtype} on "
                                           f"{facts.device.device_class} gives a {want} indexer cache, decision has "
                                           f"{decision.indexer_cache_dtype}")
