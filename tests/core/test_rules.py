"""Each rule of each bundle: a table of inputs with the outputs and codes they must give, and a check
that the table fires every rule of every shipped bundle (a new rule without a row fails here)."""
from __future__ import annotations

import pytest

from nsa_policy import decide, build_facts
from nsa_policy.engine.bundle import concrete_bundles, get_bundle

DS = "deepseek-ai/DeepSeek-V3.2"
GLM = "zai-org/GLM-5"
GLM51 = "zai-org/GLM-5.1"
QWEN = {"architectures": ["Qwen3MoeForCausalLM"], "num_attention_heads": 64}

# (bundle, device, model, config, env, packages, expected outputs, codes that must appear)
ROWS = [
    # --- default: kv dtype and backends per device -------------------------------------------
    ("default", "h200", DS, {}, {}, None, dict(kv_cache_dtype="bfloat16", prefill_backend="flashmla_sparse", decode_backend="fa3", kv_cache_layout="bf16-576"), set()),
    ("default", "h100", DS, {"kv_cache_dtype": "fp8_e4m3"}, {}, None, dict(prefill_backend="flashmla_kv", decode_backend="flashmla_kv", kv_cache_layout="fp8-656-blockwise"), set()),
    ("default", "b300", DS, {}, {}, None, dict(kv_cache_dtype="fp8_e4m3", prefill_backend="trtllm", decode_backend="trtllm", kv_cache_layout="fp8-576-per-tensor"), set()),
    ("default", "b200", DS, {"kv_cache_dtype": "bf16"}, {}, None, dict(kv_cache_dtype="bfloat16", prefill_backend="flashmla_sparse", decode_backend="trtllm"), set()),
    ("default", "gb10", GLM, {}, {}, None, dict(kv_cache_dtype="fp8_e4m3", prefill_backend="flashinfer_sparse_mla", decode_backend="flashinfer_sparse_mla"), {"NSA203"}),
    ("default", "mi355x", DS, {"kv_cache_dtype": "fp8_e4m3"}, {}, None, dict(prefill_backend="tilelang", decode_backend="tilelang", page_size=1), {"NSA203"}),
    ("default", "mi300x", DS, {"nsa_prefill_backend": "tilelang", "kv_cache_dtype": "bfloat16"}, {}, None, dict(prefill_backend="tilelang", decode_backend="tilelang"), set()),
    # --- default: HiSparse ---------------------------------------------------------------------
    ("default", "h200", DS, {"enable_hisparse": True, "disable_radix_cache": True}, {}, None, dict(prefill_backend="flashmla_sparse", decode_backend="flashmla_sparse"), set()),
    ("default", "b200", DS, {"enable_hisparse": True, "disable_radix_cache": True}, {}, None, dict(prefill_backend="flashmla_kv", decode_backend="flashmla_kv"), set()),
    ("default", "mi300x", DS, {"enable_hisparse": True, "disable_radix_cache": True}, {}, None, dict(prefill_backend="tilelang", decode_backend="tilelang"), set()),
    ("default", "b200", DS, {"enable_hisparse": True}, {}, None, dict(), {"NSA104"}),
    ("default", "b200", DS, {"enable_hisparse": True, "disable_radix_cache": True, "nsa_decode_backend": "trtllm", "kv_cache_dtype": "bfloat16"}, {}, None, dict(), {"NSA107"}),
    # --- default: fp8 coupling ----------------------------------------------------------------
    ("default", "b200", DS, {"kv_cache_dtype": "fp8_e4m3", "nsa_prefill_backend": "trtllm"}, {}, None, dict(decode_backend="trtllm"), set()),
    ("default", "b200", DS, {"kv_cache_dtype": "fp8_e4m3", "nsa_decode_backend": "trtllm"}, {}, None, dict(prefill_backend="trtllm"), set()),
    ("default", "b200", DS, {"kv_cache_dtype": "fp8_e4m3", "nsa_prefill_backend": "flashmla_sparse"}, {}, None, dict(decode_backend="flashmla_kv"), set()),
    ("default", "b200", DS, {"kv_cache_dtype": "fp8_e4m3", "nsa_decode_backend": "flashmla_kv"}, {}, None, dict(prefill_backend="flashmla_kv"), set()),
    ("default", "rtx-pro-6000", DS, {"kv_cache_dtype": "fp8_e4m3", "nsa_prefill_backend": "trtllm"}, {}, None, dict(decode_backend="flashinfer_sparse_mla"), {"NSA101", "NSA103"}),
    ("default", "b200", DS, {"kv_cache_dtype": "fp8_e4m3", "nsa_prefill_backend": "trtllm", "nsa_decode_backend": "flashmla_kv"}, {}, None, dict(), {"NSA103"}),
    # --- default: validations -----------------------------------------------------------------
    ("default", "l40s", DS, {}, {}, None, dict(), {"NSA100"}),
    ("default", "rtx-5090", DS, {"kv_cache_dtype": "bfloat16"}, {}, None, dict(prefill_backend=None, decode_backend=None), {"NSA106"}),
    ("default", "h200", DS, {"nsa_decode_backend": "flashmla_auto"}, {}, None, dict(), {"NSA101", "NSA208"}),
    ("default", "h200", DS, {"nsa_prefill_backend": "trtllm", "kv_cache_dtype": "bfloat16"}, {}, None, dict(), {"NSA101"}),
    ("default", "rtx-pro-6000", DS, {}, {}, {"flashinfer-python": "0.6.11"}, dict(), {"NSA102"}),
    ("default", "rtx-pro-6000", DS, {"nsa_decode_backend": "flashinfer_sparse_mla", "nsa_prefill_backend": "flashinfer_sparse_mla", "kv_cache_dtype": "fp8_e4m3"}, {}, {"flashinfer-python": "0.6.7"}, dict(), {"NSA102"}),
    ("default", "h200", DS, {"nsa_decode_backend": "flashmla_kv", "kv_cache_dtype": "bfloat16"}, {}, None, dict(), {"NSA204"}),
    ("default", "h200", DS, {"nsa_prefill_backend": "flashmla_kv", "kv_cache_dtype": "bfloat16"}, {}, None, dict(), {"NSA204"}),
    ("default", "b200", GLM, {"tp_size": 8, "kv_cache_dtype": "bfloat16", "nsa_decode_backend": "flashmla_sparse"}, {}, None, dict(heads_per_rank=8), {"NSA205"}),
    ("default", "b200", GLM51, {}, {}, None, dict(), {"NSA206"}),
    ("default", "b300", DS, {}, {}, {"flashinfer-python": "0.6.7"}, dict(), {"NSA207"}),
    ("default", "b300", DS, {}, {}, {"flashinfer-python": "0.6.7.post2"}, dict(), set()),
    ("default", "h200", DS, {"page_size": 1}, {}, None, dict(), {"NSA105"}),
    ("default", "mi300x", DS, {"page_size": 64}, {}, None, dict(), {"NSA105"}),
    ("default", "h200", DS, {"page_size": 64}, {}, None, dict(page_size=64), set()),
    # --- sglang-0.5.10 --------------------------------------------------------------------------
    ("sglang*", "h200", DS, {"nsa_prefill_backend": "flashinfer_sparse_mla"}, {}, None, dict(), {"NSA002"}),
    ("sglang*", "mi300x", DS, {}, {}, None, dict(prefill_backend="tilelang", decode_backend="tilelang", page_size=1), set()),
    ("sglang*", "mi300x", DS, {"nsa_decode_backend": "tilelang"}, {}, None, dict(prefill_backend="flashmla_sparse"), {"NSA303", "NSA305"}),
    ("sglang-0.5.10", "mi300x", DS, {"nsa_prefill_backend": "tilelang"}, {}, None, dict(decode_backend="fa3"), {"NSA303", "NSA305"}),
    ("sglang-0.5.10", "b200", DS, {"kv_cache_dtype": "fp8_e4m3", "nsa_decode_backend": "flashmla_kv"}, {}, None, dict(prefill_backend="trtllm", decode_backend="trtllm"), {"NSA302"}),
    ("sglang-0.5.10", "h200", DS, {"kv_cache_dtype": "fp8_e4m3"}, {}, None, dict(prefill_backend="flashmla_auto", decode_backend="flashmla_kv"), set()),
    ("sglang-0.5.10", "b200", DS, {"kv_cache_dtype": "bfloat16"}, {}, None, dict(prefill_backend="flashmla_sparse", decode_backend="trtllm"), set()),
    ("sglang-0.5.10", "b200", GLM, {}, {"SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD": "4096"}, None, dict(dense_attn_kv_len_threshold=0), {"NSA306"}),
    ("sglang*", "h200", DS, {"page_size": 16}, {}, None, dict(page_size=64), {"NSA308"}),
    ("sglang-0.5.10", "gb10", DS, {}, {}, None, dict(prefill_backend="trtllm"), {"NSA301"}),
    ("sglang*", "h200", DS, {"kv_cache_dtype": "fp8_e4m3", "nsa_decode_backend": "trtllm"}, {}, None, dict(prefill_backend="flashmla_auto"), {"NSA304", "NSA305"}),
    ("sglang-0.5.10", "h200", DS, {"enable_hisparse": True}, {}, None, dict(prefill_backend="flashmla_sparse", decode_backend="flashmla_sparse"), {"NSA309"}),
    ("sglang*", "h200", DS, {"nsa_decode_backend": "flashmla_auto"}, {}, None, dict(), {"NSA305"}),
    ("sglang-0.5.10", "h200", QWEN, {"nsa_prefill_backend": "fa3"}, {}, None, dict(applies=False), {"NSA010"}),
    # --- sglang-pre-21783 -----------------------------------------------------------------------
    ("sglang-pre-21783", "gb10", DS, {}, {}, None, dict(kv_cache_dtype="bfloat16", prefill_backend="flashmla_sparse", decode_backend="trtllm"), {"NSA301", "NSA305"}),
    ("sglang-pre-21783", "b200", DS, {}, {}, None, dict(kv_cache_dtype="bfloat16", prefill_backend="flashmla_sparse", decode_backend="trtllm"), set()),
    ("sglang-pre-21783", "b200", DS, {"quantization": "modelopt_fp4", "dp_size": 8, "tp_size": 8, "enable_dp_attention": True}, {}, None, dict(kv_cache_dtype="fp8_e4m3", prefill_backend="flashmla_auto", decode_backend="flashmla_kv"), set()),
    ("sglang-pre-21783", "b200", DS, {"kv_cache_dtype": "fp8_e4m3"}, {}, None, dict(prefill_backend="trtllm", decode_backend="trtllm", dense_attn_kv_len_threshold=2048), {"NSA307"}),
    ("sglang-pre-21783", "b200", DS, {"kv_cache_dtype": "fp8_e4m3", "nsa_prefill_backend": "flashmla_kv"}, {}, None, dict(prefill_backend="trtllm"), {"NSA302", "NSA307"}),
    ("sglang-pre-21783", "h200", DS, {"nsa_prefill_backend": "trtllm", "kv_cache_dtype": "bfloat16"}, {}, None, dict(dense_attn_kv_len_threshold=131072), {"NSA306", "NSA305"}),
    ("sglang-pre-21783", "b200", GLM, {"nsa_prefill_backend": "trtllm", "kv_cache_dtype": "bfloat16"}, {}, None, dict(dense_attn_kv_len_threshold=0), {"NSA306"}),
    ("sglang-pre-21783", "b200", DS, {"enable_hisparse": True, "kv_cache_dtype": "fp8_e4m3"}, {}, None, dict(prefill_backend="flashmla_sparse", decode_backend="flashmla_sparse"), {"NSA309"}),
]

# Rules every bundle inherits from `base`: each row runs under every shipped bundle.
BASE_ROWS = [
    ("*", "h200", DS, {"kv_cache_dtype": "fp16"}, {}, None, dict(), {"NSA001"}),
    ("*", "h200", DS, {"nsa_prefill_backend": "flashmla_sprase"}, {}, None, dict(), {"NSA002"}),
    ("*", "h200", DS, {"nsa_decode_backend": "fa2"}, {}, None, dict(), {"NSA002"}),
    ("*", "h200", DS, {"tp_size": 8, "dp_size": 3, "enable_dp_attention": True}, {}, None, dict(), {"NSA003"}),
    ("*", "h200", {"architectures": ["DeepseekV3ForCausalLM"], "index_topk": 2048, "num_attention_heads": 100}, {"tp_size": 8}, {}, None, dict(), {"NSA003"}),
    ("*", "h200", QWEN, {}, {}, None, dict(applies=False, prefill_backend=None), {"NSA009"}),
    ("*", "h200", QWEN, {"nsa_prefill_backend": "fa3"}, {}, None, dict(applies=False), {"NSA009", "NSA010"}),
    ("*", "h200", DS, {"dense_attn_kv_len_threshold": 131072}, {}, None, dict(dense_attn_kv_len_threshold=131072), {"NSA202"}),
    ("*", "h200", DS, {}, {"SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD": "8192"}, None, dict(dense_attn_kv_len_threshold=8192), {"NSA201"}),
    ("*", "h200", DS, {}, {"SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD": "1024"}, None, dict(dense_attn_kv_len_threshold=1024), set()),
    ("*", "b200", DS, {"tp_size": 8, "dp_size": 8, "enable_dp_attention": True}, {}, None, dict(heads_per_rank=128), set()),
]
ROWS += [(bundle, *row[1:]) for bundle in concrete_bundles() for row in BASE_ROWS]
# Rows marked "sglang*" hold for both compatibility bundles.
ROWS = [r for r in ROWS if r[0] != "sglang*"] + [
    (bundle, *row[1:]) for bundle in ("sglang-0.5.10", "sglang-pre-21783") for row in ROWS if row[0] == "sglang*"]


def _decide(row):
    bundle, device, model, config, env, packages, _, _ = row
    facts = build_facts(config, device=device, model=model, env=env, packages=packages)
    return decide(facts, bundle)


@pytest.mark.parametrize("row", ROWS, ids=[f"{r[0]}:{r[1]}:{i}" for i, r in enumerate(ROWS)])
def test_rule_row(row) -> None:
    decision = _decide(row)
    for key, want in row[6].items():
        assert getattr(decision, key) == want, (key, decision.errors)
    codes = {f.code for f in decision.findings}
    assert row[7] <= codes, f"missing {row[7] - codes}; got {codes}"


@pytest.mark.parametrize("bundle", concrete_bundles())
def test_every_rule_of_every_bundle_fires_in_the_table(bundle: str) -> None:
    fired: set[str] = set()
    for row in ROWS:
        if row[0] != bundle:
            continue
        fired |= {t.rule for t in _decide(row).trace if t.outcome in ("fired", "emitted")}
    missing = [r.id for r in get_bundle(bundle).rules if r.id not in fired]
    assert not missing, f"rules of {bundle} that no row of ROWS fires: {missing}"


def test_user_choice_never_overwritten_in_default() -> None:
    for row in ROWS:
        if row[0] != "default":
            continue
        d = _decide(row)
        for out, p in d.provenance.items():
            assert p.overwrote is None, (row, out, p)
        cfg = row[3]
        for field, out in (("nsa_prefill_backend", "prefill_backend"), ("nsa_decode_backend", "decode_backend")):
            if cfg.get(field) and not any(e.code == "NSA002" for e in d.errors):
                assert getattr(d, out) == cfg[field]


def test_trace_explains_passed_over_rules() -> None:
    d = _decide(("default", "h200", DS, {}, {}, None, {}, set()))
    by_rule = {t.rule: t for t in d.trace}
    assert by_rule["kv.hopper-bf16"].outcome == "fired"
    assert by_rule["kv.blackwell-fp8"].outcome == "already_set" or "device.class is 'sm90'" in by_rule["kv.blackwell-fp8"].why
    assert by_rule["backends.blackwell-fp8"].outcome == "not_matched"
    assert "sm90" in by_rule["backends.blackwell-fp8"].why
    assert d.provenance["prefill_backend"].detail == "backends.hopper-bf16"


def test_trace_off_gives_the_same_decision() -> None:
    for row in ROWS:
        bundle, device, model, config, env, packages, _, _ = row
        facts = build_facts(config, device=device, model=model, env=env, packages=packages)
        with_trace = decide(facts, bundle, trace=True).model_dump(exclude={"trace"})
        without = decide(facts, bundle, trace=False).model_dump(exclude={"trace"})
        assert with_trace == without, row
