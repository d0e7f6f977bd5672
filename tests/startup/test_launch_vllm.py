"""`nsa-policy launch -- vllm serve …`: resolved with a vLLM bundle, flags added only where unset, in vLLM 0.33.0's
spelling; a rejected decision runs nothing; bad input is one line."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from nsa_policy.base.errors import InputError, PolicyError
from nsa_policy.cli import app
from nsa_policy.engines.vllm.launch import plan_vllm_launch

DSV32 = "deepseek-ai/DeepSeek-V3.2"


def test_default_adds_backend_dtype_and_block_size():
    plan = plan_vllm_launch(["vllm", "serve", DSV32, "-tp", "8"], device="b200")
    assert plan.decision.policy == "vllm-default"
    assert plan.argv == ["vllm", "serve", DSV32, "-tp", "8", "--attention-backend", "FLASHINFER_MLA_SPARSE",
                         "--kv-cache-dtype", "fp8_e4m3", "--block-size", "64"]


def test_compat_bundle_adds_what_vllm_would_pick_and_no_auto_dtype():
    plan = plan_vllm_launch(["vllm", "serve", DSV32, "-tp", "8"], device="b200", policy="vllm-0.33")
    assert plan.argv[5:] == ["--attention-backend", "FLASH_ATTN_MLA_SPARSE_FA4", "--block-size", "64"]


def test_user_flags_are_kept_and_not_repeated():
    cmd = ["vllm", "serve", DSV32, "--kv-cache-dtype", "fp8", "--block-size=64", "-ac.backend", "FLASHMLA_SPARSE"]
    plan = plan_vllm_launch(cmd, device="h200", policy="vllm-0.33")
    assert plan.argv == cmd and plan.added_flags == []
    assert plan.decision.kv_cache_dtype == "fp8_ds_mla"


def test_rejected_runs_nothing():
    with pytest.raises(PolicyError) as exc:
        plan_vllm_launch(["vllm", "serve", DSV32], device="a100")
    assert [e.code for e in exc.value.decision.errors] == ["NSA154"]
    res = CliRunner().invoke(app, ["launch", "--device", "a100", "--dry-run", "--", "vllm", "serve", DSV32])
    assert res.exit_code == 1 and "vllm serve" not in res.stdout


def test_sglang_policy_and_bad_value_are_one_line_errors():
    with pytest.raises(InputError, match="vLLM bundle"):
        plan_vllm_launch(["vllm", "serve", DSV32], device="b200", policy="sglang-0.5.10")
    res = CliRunner().invoke(app, ["launch", "--device", "b200", "--dry-run", "--", "vllm", "serve", DSV32,
                                   "--block-size", "x"])
    assert res.exit_code == 2
    assert res.stderr.strip().count("\n") == 0 and "not an integer" in res.stderr


def test_cli_dry_run_json():
    res = CliRunner().invoke(app, ["launch", "--device", "sm120", "--dry-run", "--json", "--",
                                   "vllm", "serve", DSV32, "-tp", "4"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["engine"] == "vllm" and out["vllm"] == "0.33.0"
    assert out["added_flags"] == ["--attention-backend FLASHINFER_MLA_SPARSE_SM120", "--kv-cache-dtype fp8_ds_mla",
                                  "--block-size 64"]


@pytest.mark.parametrize("tp, dcp", [("1", "2"), ("8", "3")])
def test_tp_not_divisible_by_dcp_runs_nothing_with_vllms_message(tp, dcp):
    # vLLM's ParallelConfig raises before the model loads (config/parallel.py, 0.33.0)
    with pytest.raises(PolicyError) as exc:
        plan_vllm_launch(["vllm", "serve", DSV32, "-tp", tp, "-dcp", dcp], device="h200")
    [err] = [e for e in exc.value.decision.errors if e.code == "NSA003"]
    assert f"tp_size={tp} must be divisible by dcp_size={dcp}." in err.message
