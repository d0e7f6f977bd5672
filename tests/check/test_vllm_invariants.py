"""check's vLLM invariants (verify/vllm_invariants.py): each catches the broken decision it is about,
and check over the vLLM bundles is clean (the vLLM space includes XPU/CPU, a non-DSA model, malformed input)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from nsa_policy.api import build_facts, decide
from nsa_policy.catalog.store import load_catalog
from nsa_policy.verify.invariants import check_invariants

ROOT = Path(__file__).resolve().parents[2]


def _decision(device: str, **config):
    facts = build_facts(dict(config), device=device, model="deepseek-ai/DeepSeek-V3.2", engine="vllm")
    return decide(facts, "vllm-default"), facts


def _names(decision, facts) -> set[str]:
    return {name for name, _, _ in check_invariants(decision, facts, load_catalog())}


def test_a_good_decision_passes():
    d, facts = _decision("b200", tensor_parallel_size=8)
    assert not d.errors and _names(d, facts) == set()


@pytest.mark.parametrize("change, invariant", [
    ({"attention_backend": "FLASH_ATTN_MLA_SPARSE"}, "vllm-backend-valid"),  # FA3 does not run on sm100
    ({"kv_cache_dtype": "fp8_ds_mla"}, "vllm-kv-stored"),  # FlashInfer keeps fp8_e4m3
    ({"kv_cache_layout": "fp8-656-blockwise"}, "vllm-kv-stored"),
    ({"page_size": 16}, "vllm-block-size"),
    ({"dense_attn_kv_len_threshold": None}, "vllm-dense-prefill"),
    ({"indexer_cache_dtype": "mxfp4"}, "vllm-indexer-dtype"),
])
def test_each_invariant_catches_its_break(change, invariant):
    d, facts = _decision("b200", tensor_parallel_size=8)
    assert invariant in _names(d.model_copy(update=change), facts)


def test_a_forced_backend_must_be_kept():
    d, facts = _decision("b200", attention_backend="FLASHMLA_SPARSE")
    assert d.attention_backend == "FLASHMLA_SPARSE" and not d.errors  # fp8_ds_mla, not NSA150
    assert "user-choice-kept" in _names(d.model_copy(update={"attention_backend": "FLASHINFER_MLA_SPARSE"}), facts)


def test_flashmla_under_dcp_is_caught_as_failing_after_selection():
    d, facts = _decision("h200", tensor_parallel_size=2, decode_context_parallel_size=2, kv_cache_dtype="fp8")
    assert [e.code for e in d.errors] == ["NSA153"]
    accepted = d.model_copy(update={"errors": ()})
    assert "vllm-backend-valid" in _names(accepted, facts)


def test_check_finds_a_broken_vllm_rule(tmp_path):
    from nsa_policy.verify.exhaustive import check_bundle

    for name in ("vllm-base", "vllm-default"):
        shutil.copytree(ROOT / "rules" / "policy" / name, tmp_path / name)
    layout = tmp_path / "vllm-base" / "60-layout.yaml"
    layout.write_text(layout.read_text().replace("set: {kv_cache_layout: fp16-576}", "set: {kv_cache_layout: bf16-576}"))
    report = check_bundle(str(tmp_path / "vllm-default"), quiet=True)
    assert {(i.kind, i.subject) for i in report.issues} == {("invariant", "vllm-kv-stored")}
