"""The per-batch planner: sglang's dense-MHA / flashmla_auto rules on a table of batches.

No torch here: the planner must work without it."""
import subprocess
import sys
import types

import pytest

from nsa_policy.runtime.planner import BatchPlanner, PrefillRoute, mha_one_shot_supported

from .helpers import decision


def planner(**kw):
    return BatchPlanner.from_decision(decision(**kw))


H200_BF16 = dict(device_class="sm90", kv_cache_dtype="bfloat16", prefill_backend="flashmla_sparse",
                 decode_backend="fa3")
H200_FP8_AUTO = dict(device_class="sm90", kv_cache_dtype="fp8_e4m3", prefill_backend="flashmla_auto",
                     decode_backend="flashmla_kv")
B200_FP8_AUTO = dict(device_class="sm100", kv_cache_dtype="fp8_e4m3", prefill_backend="flashmla_auto",
                     decode_backend="trtllm")
B200_BF16_AUTO = dict(device_class="sm100", kv_cache_dtype="bfloat16", prefill_backend="flashmla_auto",
                      decode_backend="trtllm")
RTX_FP8 = dict(device_class="sm120", kv_cache_dtype="fp8_e4m3", prefill_backend="flashinfer_sparse_mla",
               decode_backend="flashinfer_sparse_mla",
               runtime=types.SimpleNamespace(mha_chunk_capacity=131072, flashmla_auto_ratio=512,
                                             mha_one_shot=False))

# (decision, (max_kv_len, total_kv_len, total_q_tokens, mode), expected route, why)
TABLE = [
    (H200_BF16, (1000, 1000, 1000, "extend"), (True, "mha_one_shot"), "short prompt on sm90 → dense"),
    (H200_BF16, (2048, 4096, 4096, "extend"), (True, "mha_one_shot"), "threshold is inclusive"),
    (H200_BF16, (2049, 2049, 2049, "extend"), (False, "flashmla_sparse"), "one token past the threshold"),
    (H200_BF16, (2000, 131072, 131072, "extend"), (True, "mha_one_shot"), "chunk capacity is inclusive"),
    (H200_BF16, (2000, 131073, 131073, "extend"), (False, "flashmla_sparse"), "sum over capacity"),
    (H200_BF16, (1000, 1000, 100, "mixed"), (True, "mha_one_shot"), "mixed is extend without spec"),
    (H200_BF16, (100, 100, 1, "decode"), (False, "fa3"), "decode never goes dense"),
    (H200_BF16, (100, 100, 4, "target_verify"), (False, "fa3"), "verify runs the decode backend"),
    (H200_BF16, (100, 100, 4, "draft_extend"), (False, "fa3"), "draft extend runs the decode backend"),
    (H200_FP8_AUTO, (8000, 8000, 100, "extend"), (False, "flashmla_kv"), "auto + fp8 on sm90 → kv"),
    (H200_FP8_AUTO, (8000, 8000, 8000, "extend"), (False, "flashmla_kv"), "sm90 is not Blackwell"),
    (B200_FP8_AUTO, (8000, 8000, 8000, "extend"), (False, "flashmla_sparse"), "kv < 512·q on sm100"),
    (B200_FP8_AUTO, (600000, 600000, 1000, "extend"), (False, "flashmla_kv"), "kv ≥ 512·q"),
    (B200_FP8_AUTO, (512000, 512000, 1000, "extend"), (False, "flashmla_kv"), "ratio is strict <"),
    (B200_FP8_AUTO, (511999, 511999, 1000, "extend"), (False, "flashmla_sparse"), "just under"),
    (B200_FP8_AUTO, (8000, 8000, 8000, "mixed"), (False, "flashmla_kv"), "heuristic only for plain extend"),
    (B200_FP8_AUTO, (100, 100, 100, "extend"), (True, "mha_one_shot"), "sm100 has MHA one-shot"),
    (B200_BF16_AUTO, (9000, 9000, 10, "extend"), (False, "flashmla_sparse"), "auto + bf16 → sparse"),
    (RTX_FP8, (100, 100, 100, "extend"), (False, "flashinfer_sparse_mla"), "no MHA one-shot on sm120"),
]


@pytest.mark.parametrize("kw, batch, expected, why", TABLE, ids=[row[3] for row in TABLE])
def test_planner_table(kw, batch, expected, why):
    route = planner(**kw).plan(*batch)
    assert isinstance(route, PrefillRoute)
    assert (route.dense_mha, route.backend) == expected, why


def test_user_threshold_and_zero_disable_dense():
    assert planner(**H200_BF16, dense_attn_kv_len_threshold=0).plan(1, 1, 1).dense_mha is False
    assert planner(**H200_BF16, dense_attn_kv_len_threshold=8192).plan(8000, 8000, 10).dense_mha is True


def test_context_parallel_and_hisparse_disable_dense():
    for flag in ("prefill_context_parallel", "hisparse"):
        p = BatchPlanner.from_decision(decision(**H200_BF16), **{flag: True})
        assert p.plan(10, 10, 10) == PrefillRoute(False, "flashmla_sparse")


def test_device_gate_matches_sglang():
    gate = {dc: mha_one_shot_supported(dc) for dc in
            ("sm80", "sm89", "sm90", "sm100", "sm103", "sm109", "sm110", "sm120", "gfx942", "cpu")}
    assert [dc for dc, ok in gate.items() if ok] == ["sm90", "sm100", "sm103", "sm109"]


def test_gate_falls_back_to_device_rule_when_decision_has_no_runtime():
    assert planner(**H200_BF16, runtime=None).mha_one_shot is True
    assert planner(device_class="sm120", runtime=None, prefill_backend="flashinfer_sparse_mla",
                   decode_backend="flashinfer_sparse_mla").mha_one_shot is False


def test_plan_lengths_matches_aggregates():
    p = planner(**B200_FP8_AUTO)
    seq, ext = [3000, 5000], [3000, 10]
    assert p.plan_lengths(seq, ext) == p.plan(max(seq), sum(seq), sum(ext))
    with pytest.raises(ValueError, match="one entry per request"):
        p.plan_lengths([1, 2], [1])


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="forward_mode"):
        planner(**H200_BF16).plan(1, 1, 1, "prefill")
    with pytest.raises(ValueError, match="flashmla_auto"):
        planner(decode_backend="flashmla_auto")
    with pytest.raises(ValueError, match="dense_attn_kv_len_threshold"):
        planner(dense_attn_kv_len_threshold=-1)
    with pytest.raises(ValueError, match="errors"):
        planner(errors=["E1"])
    with pytest.raises(ValueError, match="does not apply"):
        planner(applies=False)


def test_planner_imports_without_torch():
    code = ("import sys\n"
            "sys.modules['torch'] = None  # any torch import now fails\n"
            "import nsa_policy.runtime.planner as p\n"
            "import nsa_policy.runtime as r\n"
            "assert r.BatchPlanner is p.BatchPlanner\n")
    subprocess.run([sys.executable, "-c", code], check=True)
