"""The "release default" provenance label on sglang decisions (issue 21, deliverable 2): an output that is the
default of an environment variable the release itself reads, not a value anyone declared.

sglang 0.5.16-0.5.23 run LongcatFlashForCausalLMNextN with the family overrides only: start-up declares no
threshold and layers/attention/dsa_backend.py reads SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD, whose
default in environ.py is 2048 (EnvIntWithAlias to 0.5.20, EnvInt from 0.5.21).
"""
from __future__ import annotations

import json
from typing import Optional

import pytest
from typer.testing import CliRunner

import nsa_policy
from nsa_policy.cli import app
from nsa_policy.core.decision import PROVENANCE_LABELS

NEXTN = {"architectures": ["LongcatFlashForCausalLMNextN"], "index_topk": 2048, "num_attention_heads": 64}
DSA = "SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD"
NSA = "SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD"


def _threshold(policy: str, env: dict[str, str]) -> tuple[object, object]:
    d = nsa_policy.resolve({"tp_size": 8}, device="h200", model=NEXTN, policy=policy, env=env, raise_on_error=False)
    p = d.provenance.get("dense_attn_kv_len_threshold")
    return d.dense_attn_kv_len_threshold, (p.label if p is not None else None)


def test_release_default_is_in_the_one_vocabulary() -> None:
    assert "release default" in PROVENANCE_LABELS


@pytest.mark.parametrize("policy", ["sglang-0.5.16", "sglang-0.5.18", "sglang-0.5.20", "sglang-0.5.21", "sglang-0.5.23"])
def test_family_only_threshold_is_the_release_default(policy: str) -> None:
    assert _threshold(policy, {}) == (2048, "release default")


@pytest.mark.parametrize("policy", ["sglang-0.5.16", "sglang-0.5.20"])
def test_a_set_alias_is_not_labelled_a_default(policy: str) -> None:
    # 0.5.16-0.5.20 read the NSA name through the alias: the value is the user's, so not the release default
    value, label = _threshold(policy, {NSA: "8192"})
    assert label != "release default" and value != 2048


def test_0_5_21_ignores_the_nsa_name_and_runs_the_default() -> None:
    assert _threshold("sglang-0.5.21", {NSA: "8192"}) == (2048, "release default")


def test_a_set_dsa_variable_is_not_labelled_a_default() -> None:
    value, label = _threshold("sglang-0.5.23", {DSA: "4096"})
    assert label != "release default" and value != 2048


def test_full_dsa_models_carry_no_release_default_label() -> None:
    d = nsa_policy.resolve({"tp_size": 8}, device="h200", model="deepseek-ai/DeepSeek-V3.2", policy="sglang-0.5.23", env={})
    assert all(p.label is None for p in d.provenance.values())


def test_the_cli_shows_the_label() -> None:
    args = ["resolve", "--device", "h200", "--arch", "LongcatFlashForCausalLMNextN", "--index-topk", "2048",
            "--num-attention-heads", "64", "--tp-size", "8", "--policy", "sglang-0.5.23"]
    env: dict[str, Optional[str]] = {DSA: None, NSA: None}  # CliRunner: None unsets a variable
    table = CliRunner().invoke(app, args, env=env)
    assert table.exit_code == 0, table.output
    assert "[release default]" in next(line for line in table.output.splitlines() if "dense_attn" in line)
    as_json = CliRunner().invoke(app, args + ["--json"], env=env)
    assert json.loads(as_json.output)["provenance"]["dense_attn_kv_len_threshold"]["label"] == "release default"
