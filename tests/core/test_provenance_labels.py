"""Provenance labels: one vocabulary in core (decision.PROVENANCE_LABELS), set by the rule that sets the output."""
from __future__ import annotations

from typing import get_args

import nsa_policy
from nsa_policy.core.decision import PROVENANCE_LABELS, ProvenanceLabel


def test_label_vocabulary_is_one_list() -> None:
    assert PROVENANCE_LABELS == get_args(ProvenanceLabel)
    assert set(PROVENANCE_LABELS) == {"release default", "ignored by the engine"}


def test_rocm_ignored_backend_is_labelled() -> None:
    # vLLM 0.33 on ROCm builds ROCM_AITER_MLA_SPARSE whatever --attention-backend names
    d = nsa_policy.resolve({"attention_backend": "MINIMAX_M3_SPARSE"}, device="mi300x",
                           model="deepseek-ai/DeepSeek-V3.2", policy="vllm-0.33", raise_on_error=False)
    p = d.provenance["attention_backend"]
    assert d.attention_backend == "ROCM_AITER_MLA_SPARSE" and not d.errors
    assert p.label == "ignored by the engine"
    assert p.overwrote is not None and "MINIMAX_M3_SPARSE" in p.overwrote


def test_unlabelled_when_the_engine_runs_the_value() -> None:
    d = nsa_policy.resolve({}, device="mi300x", model="deepseek-ai/DeepSeek-V3.2", policy="vllm-0.33")
    assert d.provenance["attention_backend"].label is None


def test_lint_refuses_tp_not_divisible_by_dcp(tmp_path) -> None:
    from typer.testing import CliRunner

    from nsa_policy.cli import app

    (tmp_path / "serve.sh").write_text("# nsa-policy: device=h200\n"
                                       "vllm serve deepseek-ai/DeepSeek-V3.2 -tp 1 --decode-context-parallel-size 2\n")
    res = CliRunner().invoke(app, ["lint", str(tmp_path)])
    assert res.exit_code == 1
    assert "NSA003" in res.output and "tp_size=1 must be divisible by dcp_size=2." in res.output
