"""GLM-5.2, GLM-5.3 and GLM-5.3-Flash in the catalog, and vLLM's head size for the glm5_next family (issue 21).

Expected values are the config values cited in rules/catalog/models.yaml (transformers 5.20.2's GlmMoeDsaConfig
and Glm5NextTextConfig, sglang 0.5.23 and vLLM 0.33.0), not what the code computes.
"""
from __future__ import annotations

import pytest

from nsa_policy.api import build_facts
from nsa_policy.catalog.store import load_catalog
from nsa_policy.core.namespace import build_namespace
from nsa_policy.engines.vllm.catalog import selector_facts


@pytest.mark.parametrize("model", ["zai-org/GLM-5.2", "zai-org/GLM-5.3"])
def test_glm52_glm53_are_glm5_with_shared_topk(model: str) -> None:
    m = load_catalog().model(model)
    assert (m.architecture, m.family, m.index_topk, m.num_attention_heads) == ("GlmMoeDsaForCausalLM", "glm5", 2048, 64)
    assert m.qk_rope_head_dim == 64
    assert m.index_topk_freq == 4  # 21 of 78 layers run the indexer (sglang dsa_dcp.py: 57 reuse)


def test_glm53_flash_is_nope_glm5_next() -> None:
    m = load_catalog().model("zai-org/GLM-5.3-Flash")
    assert (m.architecture, m.family, m.index_topk, m.num_attention_heads) == (
        "Glm5NextForConditionalGeneration", "glm5_next", 2048, 64)
    # the checkpoint pools 4 index keys (sglang#36830), not the config default 16
    assert (m.qk_rope_head_dim, m.index_kpool) == (0, 4)


def test_vllm_registers_glm5_next_for_causal_lm() -> None:
    assert load_catalog().family_of("Glm5NextForCausalLM", 2048) == "glm5_next"


def _sel(model: object, device: str = "h200") -> dict:
    facts = build_facts({"tensor_parallel_size": 8}, device=device, model=model, env={}, packages={}, engine="vllm")
    cat = load_catalog()
    return selector_facts(build_namespace(facts, cat), cat)


def test_vllm_head_size_of_glm5_next_is_512() -> None:
    sel = _sel("zai-org/GLM-5.3-Flash")
    assert (sel["sel.kv_lora_rank"], sel["sel.qk_rope_head_dim"], sel["sel.qk_nope_head_dim"]) == (512, 0, 256)
    assert sel["sel.head_size"] == 512
    # a Glm5NextForCausalLM config.json without its own dims gets the family's
    sel = _sel({"architectures": ["Glm5NextForCausalLM"], "index_topk": 2048, "num_attention_heads": 64})
    assert sel["sel.head_size"] == 512


def test_vllm_head_size_of_glm5_is_576() -> None:
    assert _sel("zai-org/GLM-5.2")["sel.head_size"] == 576


def test_vllm_head_size_unknown_is_none_not_zero() -> None:
    # a DSA family without MLA dims in the catalog: the head size is unknown, never 0
    sel = _sel({"architectures": ["Dots3NoteForCausalLM"], "index_topk": 2048, "num_attention_heads": 64})
    assert sel["sel.head_size"] is None
