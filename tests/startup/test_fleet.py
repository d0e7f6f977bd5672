"""Offline mixed-fleet check: one configuration, several devices, does one decision serve all?"""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from nsa_policy import InputError, resolve
from nsa_policy.integration.fleet import agreement_digest, parse_device_list, resolve_fleet

DS = "deepseek-ai/DeepSeek-V3.2"
CLEAN = {"SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD": None, "SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD": None}


def run_cli(*args: str):
    from nsa_policy.cli import app

    return CliRunner().invoke(app, list(args), env=CLEAN)


def test_same_class_devices_agree_although_their_names_differ() -> None:
    report = resolve_fleet({}, ["h200", "h100", "gh200"], model=DS, env={})
    assert report.agrees and report.split_fields == () and report.rejected == ()
    assert len(set(report.digests.values())) == 1 and report.groups == (("h200", "h100", "gh200"),)


def test_hopper_and_blackwell_split_on_dtype_backends_and_layout() -> None:
    report = resolve_fleet({}, ["h200", "b200", "b300"], model=DS, env={})
    assert not report.agrees
    assert report.split_fields == ("kv_cache_dtype", "prefill_backend", "decode_backend", "kv_cache_layout")
    assert report.groups == (("h200",), ("b200", "b300"))
    text = "\n".join(report.summary_lines())
    assert 'prefill_backend: "flashmla_sparse" on h200; "trtllm" on b200, b300' in text


def test_pinning_the_split_fields_to_values_valid_on_both_makes_one_decision_serve_both() -> None:
    # bf16 KV with flashmla_sparse on both sides runs on sm90 and sm100 (128 heads: no padding difference).
    report = resolve_fleet({"kv_cache_dtype": "bfloat16", "nsa_prefill_backend": "flashmla_sparse",
                            "nsa_decode_backend": "flashmla_sparse"}, ["h200", "b200"], model=DS, env={})
    assert report.agrees and report.split_fields == () and report.rejected == ()


def test_a_rejecting_device_means_no_agreement() -> None:
    report = resolve_fleet({"kv_cache_dtype": "bfloat16"}, ["b200", "rtx-pro-6000"], model=DS, env={})
    assert not report.agrees and report.rejected == ("rtx-pro-6000",)
    assert "error_codes" in report.split_fields


def test_digest_ignores_provenance_trace_and_device_name() -> None:
    a = resolve({}, device="h200", model=DS, env={})
    b = resolve({"kv_cache_dtype": "bfloat16", "page_size": 64}, device="h100", model=DS, env={}, trace=False)
    assert a.provenance != b.provenance and a.device != b.device
    assert agreement_digest(a) == agreement_digest(b)


@pytest.mark.parametrize("text, hint", [("h200,,b200", "empty"), ("h200,H200", "twice"), ("h200,", "empty")])
def test_device_list_errors(text, hint) -> None:
    with pytest.raises(InputError) as exc:
        parse_device_list(text)
    assert exc.value.field == "--device" and hint in str(exc.value)


def test_cli_fleet_json_and_exit_codes() -> None:
    split = run_cli("resolve", "--device", "h200,b200", "--model", DS, "--json")
    assert split.exit_code == 1
    data = json.loads(split.stdout)
    assert data["agrees"] is False and data["devices"] == ["h200", "b200"]
    assert set(data["decisions"]) == {"h200", "b200"} and data["decisions"]["b200"]["decode_backend"] == "trtllm"
    assert "kv_cache_dtype" in data["split_fields"]
    same = run_cli("resolve", "--device", "h200,h100", "--model", DS)
    assert same.exit_code == 0 and "one decision serves all 2 devices" in same.stdout
    typo = run_cli("resolve", "--device", "h200,b2000", "--model", DS)
    assert typo.exit_code == 2 and "did you mean 'b200'" in typo.stderr


def test_single_device_json_is_still_exactly_the_decision() -> None:
    result = run_cli("resolve", "--device", "h200", "--model", DS, "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == resolve({"model_path": DS}, device="h200", model=DS, env={}).model_dump(mode="json")
