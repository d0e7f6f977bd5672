"""vLLM's input space: what `check` and `diff` walk for a vllm-* bundle."""
from __future__ import annotations

from typing import Optional

from nsa_policy.catalog.store import Catalog, load_catalog
from nsa_policy.verify.space import NON_DSA_ARCH, Block, Dim, Space, Value, cfg_value, representative_models

VLLM_INVALID_BACKEND = "FLASHMLA_SPARS"  # a typo of a real name, so NSA050's "did you mean" runs
VLLM_INVALID_KV = "fp8_e3m4"
VLLM_INVALID_INDEXER = "fp4"


def vllm_space(catalog: Optional[Catalog] = None) -> Space:
    """The space a vllm-* bundle is checked over (engine vllm, vLLM's values from rules/catalog/vllm/*.yaml):
    the grid of the differential harness (scripts/vllm_oracle: device × model × TP × DCP × KV dtype ×
    forced backend × block size), split into blocks, with the attention-config options and malformed input.

    - ``selection``: device × model × KV dtype × forced backend × TP/DCP shape.
    - ``block_size``: device × model × KV dtype × forced backend × block size (tp1).
    - ``extras``: device × model × KV dtype × {indexer KV dtype, PCP, forced MQA} (auto selection).
    - ``input``: unknown backend and KV dtype names, a lower-case backend, × KV dtype × {an unknown indexer
      dtype, a TP size the heads do not split over}.
    - ``other_devices``: Intel XPU and CPU (refused with NSA155) × model × KV dtype × {auto, one forced}.
    - ``not_dsa``: a model without DSA on every device.
    """
    from nsa_policy.engines.vllm.catalog import load_vllm

    catalog = catalog or load_catalog()
    v = load_vllm()
    # the device classes of the vendors vLLM's catalog describes (its DSA indexer: CUDA and ROCm)
    device = Dim("device", tuple(Value(label=c, device=c, covers=(c,)) for c in catalog.device_doc.classes
                                 if catalog.device(c).vendor in v.doc.indexer.block_sizes), counts_for_size=False)
    # one model per family vLLM's backend checks have the MLA dimensions of (catalog `mla`)
    families = catalog.model_doc.families
    models = [m for m in representative_models(catalog) if (f := catalog.model(m).family) and families[f].mla]
    # and, for a family with MLA dimensions but no catalogued checkpoint (glm5_next: head 512, NoPE), its
    # first architecture as a config.json would give it
    covered = {catalog.model(m).family for m in models}
    bare = [(f, spec.architectures[0]) for f, spec in families.items() if spec.mla and f not in covered]
    model = Dim("model", tuple(Value(label=m, model=m) for m in models) + tuple(
        Value(label=f"{arch} (index_topk 2048, 64 heads)", arch=(arch, 2048, 64)) for _, arch in bare),
        counts_for_size=False)
    # the KV dtypes a DSA backend names, nvfp4, and one of the other quantized-cache families (turboquant,
    # octave, ...: every sparse backend refuses them alike, so one stands for all)
    choices = v.argument("kv_cache_dtype").choices or ()
    named = {k for spec in v.backends.values() for k in spec.kv_cache_dtypes} | {"nvfp4", "fp8_e5m2", "fp8_inc"}
    kv_values = [k for k in choices if k in named] + [k for k in choices if k not in named][:1]
    kv = Dim("kv_cache_dtype", (cfg_value("auto"),) + tuple(
        cfg_value(k, kv_cache_dtype=k) for k in kv_values if k != "auto"))
    forced = Dim("attention_backend", (cfg_value("unset"),) + tuple(
        cfg_value(b, attention_backend=b) for b in v.backend_names))
    shapes = Dim("parallel", (cfg_value("tp1"), cfg_value("tp2", tp_size=2), cfg_value("tp4", tp_size=4),
                              cfg_value("tp8", tp_size=8),
                              cfg_value("tp16", tp_size=16), cfg_value("tp8 dcp2", tp_size=8, dcp_size=2),
                              # 32+ heads per rank under DCP: FlashMLA's builder refuses it after selection
                              cfg_value("tp2 dcp2", tp_size=2, dcp_size=2)))
    blocks = Dim("block_size", tuple(cfg_value(f"block_size {n}", page_size=n) for n in (1, 16, 32, 64)))
    extras = Dim("extra", (
        cfg_value("indexer_kv_dtype fp8", indexer_kv_dtype="fp8"),
        cfg_value("indexer_kv_dtype mxfp4", indexer_kv_dtype="mxfp4"),
        cfg_value("prefill_context_parallel_size 2 (tp8 dcp2)", prefill_context_parallel_size=2, tp_size=8, dcp_size=2),
        cfg_value("sparse_mla_force_mqa", sparse_mla_force_mqa=True),
    ))
    bad = Dim("attention_backend", (cfg_value("unset"), cfg_value(VLLM_INVALID_BACKEND, attention_backend=VLLM_INVALID_BACKEND),
                                    cfg_value("flashmla_sparse (lower case)", attention_backend="flashmla_sparse")))
    bad_kv = Dim("kv_cache_dtype", (cfg_value("auto"), cfg_value("fp8", kv_cache_dtype="fp8"),
                                    cfg_value(VLLM_INVALID_KV, kv_cache_dtype=VLLM_INVALID_KV)))
    bad_other = Dim("input", (cfg_value("valid"), cfg_value(f"indexer_kv_dtype {VLLM_INVALID_INDEXER}",
                                                   indexer_kv_dtype=VLLM_INVALID_INDEXER),
                              cfg_value("tp6 (heads do not split)", tp_size=6),
                              # parallel shapes vLLM's ParallelConfig refuses (tp % dcp; PCP x DCP)
                              cfg_value("tp1 dcp2 (tp % dcp)", tp_size=1, dcp_size=2),
                              cfg_value("tp8 dcp3 (tp % dcp)", tp_size=8, dcp_size=3),
                              cfg_value("pcp2 dcp4 tp8 (PCP x DCP)", prefill_context_parallel_size=2, tp_size=8,
                                        dcp_size=4)))
    # devices vLLM's DSA catalog does not describe (Intel XPU, CPU): the bundles must refuse them with a finding
    others = Dim("device", tuple(Value(label=c, device=c, covers=(c,)) for c in catalog.device_doc.classes
                                 if catalog.device(c).vendor not in v.doc.indexer.block_sizes), counts_for_size=False)
    not_dsa = Dim("model", (Value(label=NON_DSA_ARCH, arch=(NON_DSA_ARCH, None, None)),), counts_for_size=False)
    return Space((
        Block("selection", (device, model, kv, forced, shapes), engine="vllm"),
        Block("block_size", (device, model, kv, forced, blocks), engine="vllm"),
        Block("extras", (device, model, kv, extras), engine="vllm"),
        Block("input", (device, model, bad_kv, bad, bad_other), engine="vllm"),
        Block("other_devices", (others, model, kv, Dim("attention_backend", forced.values[:2])), engine="vllm"),
        Block("not_dsa", (device, not_dsa, bad_kv), engine="vllm"),
    ), description="vLLM: device classes × one catalog model per vLLM DSA family × KV dtypes × forced backends × "
                   "TP/DCP shapes × block sizes × attention-config options; XPU/CPU; a model without DSA")
