"""`diff`: the change classes between the two sglang bundles, the renderers, and diffs over a file."""
from __future__ import annotations

import json

from typer.testing import CliRunner


def classes(report, kind, what=None):
    return [c for c in report.classes if c.kind == kind and (what is None or c.what == what)]


def test_removed_128k_override(sglang_diff):
    # (the DSA-name variable, which 0.5.10 does not read, gives a second 131072 -> index_topk class whose
    # cause is sglang.threshold.env-name-not-read; this one is the plain user/default case)
    [c] = [c for c in classes(sglang_diff, "output", "dense_attn_kv_len_threshold")
           if c.cause_a == "sglang.threshold.128k-override" and (131072, 2048) in c.transitions
           and "threshold.index-topk" in str(c.cause_b)]
    assert set(c.transitions) == {(131072, 2048)}  # an explicit trtllm prefill: 131072 → index_topk
    from nsa_policy.verify.diff import region_of

    assert region_of(c, sglang_diff.dimensions)["prefill"] == ["trtllm"]
    assert c.example["input"]["prefill_backend"] == "trtllm"
    [gone] = classes(sglang_diff, "code-removed", "NSA306")
    assert gone.rules == {"sglang.threshold.128k-override"}


def test_removed_blackwell_warning(sglang_diff):
    [c] = classes(sglang_diff, "code-removed", "NSA307")
    assert c.rules == {"sglang.backends.blackwell-fp8"} and c.count > 0
    from nsa_policy.verify.diff import region_of

    # sglang's "major >= 10" takes Thor (sm110) for Blackwell too, as is_blackwell (majors 10-12) does
    assert set(region_of(c, sglang_diff.dimensions)["device"]) <= {"sm100", "sm103", "sm110", "sm120", "sm121"}


def test_fp8_default_change(sglang_diff):
    [c] = classes(sglang_diff, "output", "kv_cache_dtype")
    assert set(c.transitions) == {("bfloat16", "fp8_e4m3")}
    assert (c.cause_a, c.cause_b) == ("sglang.kv.bf16", "sglang.kv.major-ge-10-fp8")
    from nsa_policy.verify.diff import region_of

    region = region_of(c, sglang_diff.dimensions)
    assert region["kv_cache_dtype"] == ["auto"]
    assert set(region["device"]) == {"sm100", "sm103", "sm110", "sm120", "sm121"}


def test_trtllm_default_change(sglang_diff):
    """0.5.10 picks trtllm/trtllm for fp8 on major >= 10 with DP attention too (before: dp_size 1 only). On ROCm
    gfx1250 (capability 12.5) 0.5.10 does so past the one-flag fall-through at any parallel shape, which the
    stand-in for PR #21783's parent keeps NVIDIA-only: tp1 changes there."""
    from nsa_policy.verify.diff import region_of

    for side, before in (("prefill_backend", "flashmla_auto"), ("decode_backend", "flashmla_kv")):
        [c] = [c for c in classes(sglang_diff, "output", side)
               if c.cause_a == "sglang.backends.fp8" and c.cause_b == "sglang.backends.blackwell-fp8"]
        assert set(c.transitions) == {(before, "trtllm")}
        region = region_of(c, sglang_diff.dimensions)
        assert "tp8 dp8 dp-attention" in region["parallel"]
        assert "tp1" not in region["parallel"] or "gfx1250" in region["device"]


def test_renderings(sglang_diff):
    from nsa_policy.verify.diff import render_json, render_markdown, render_text

    text = render_text(sglang_diff)
    assert "no longer NSA307" in text and "131072 → 2048" in text
    md = render_markdown(sglang_diff)
    assert md.startswith("# What changes from `sglang-pre-21783` to `sglang-0.5.10`")
    assert "## Findings that go away" in md
    data = json.loads(render_json(sglang_diff))
    assert data["changed"] == sglang_diff.changed > 0
    assert len(data["classes"]) == len(sglang_diff.classes) < 40  # a small number of readable classes
    assert all(c["example"] and c["inputs"] > 0 for c in data["classes"])


def test_diff_over_an_inputs_file(tmp_path):
    from nsa_policy.cli import app

    path = tmp_path / "inputs.yaml"
    path.write_text("""\
- {device: b200, model: deepseek-ai/DeepSeek-V3.2, kv_cache_dtype: fp8_e4m3, nsa_prefill_backend: flashmla_sparse}
- {device: h200, model: deepseek-ai/DeepSeek-V3.2}
- {device: rtx-pro-6000, model: deepseek-ai/DeepSeek-V3.2}
""")
    result = CliRunner().invoke(app, ["diff", "sglang-0.5.10", "default", "--inputs", str(path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["inputs"] == 3 and data["changed"] == 2  # h200 decides the same
    titles = [c["title"] for c in data["classes"]]
    # 0.5.10 overwrote the explicit flashmla_sparse with trtllm; default keeps it (and couples decode)
    assert any(t.startswith("prefill backend: trtllm → flashmla_sparse") for t in titles), titles
    result = CliRunner().invoke(app, ["diff", "sglang-0.5.10", "default", "--inputs", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2
