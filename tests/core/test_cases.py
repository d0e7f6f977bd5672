"""Every worked case (tests/cases, plus ../shared/spec/cases when present) passes through the library and through the CLI."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from cases_support import check_expectations, cli_args, load_cases, split
from typer.testing import CliRunner

from nsa_policy import PolicyError, resolve

CASES = load_cases()
IDS = [f"{policy}:{case['name']}" for policy, case in CASES]


@pytest.mark.parametrize(("policy", "case"), CASES, ids=IDS)
def test_case_library(policy: str, case: dict) -> None:
    device, model, config, env = split(case["input"])
    rejected = False
    try:
        decision = resolve(config, device=device, model=model, policy=policy, env=env)
    except PolicyError as exc:
        decision, rejected = exc.decision, True
    assert rejected == bool(case["expect"].get("rejected", False))
    if rejected:
        assert decision.errors and all(e.code.startswith("NSA") and e.message for e in decision.errors)
    problems = check_expectations(case["expect"], decision.model_dump(mode="json"))
    assert not problems, problems


@pytest.mark.parametrize(("policy", "case"), CASES, ids=IDS)
def test_case_cli_json(policy: str, case: dict) -> None:
    from nsa_policy.cli import app

    args, env = cli_args(case["input"], policy)
    result = CliRunner().invoke(app, args, env={**env, "SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD": env.get(
        "SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD"), "SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD": env.get(
        "SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD")})
    lines = [ln for ln in result.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1, f"--json must print exactly one JSON object; got {result.stdout!r} {result.exception!r}"
    decision = json.loads(lines[0])
    for key in ("applies", "policy", "device", "kv_cache_dtype", "prefill_backend", "decode_backend", "page_size",
                "attention_backend", "dense_attn_kv_len_threshold", "index_topk", "warnings", "errors",
                "provenance", "trace"):
        assert key in decision
    problems = check_expectations(case["expect"], decision, result.exit_code)
    assert not problems, problems


def test_cli_json_equals_library_dump() -> None:
    from nsa_policy.cli import app

    result = CliRunner().invoke(app, ["resolve", "--json", "--device", "b200", "--model", "zai-org/GLM-5"],
                                env={"SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD": None,
                                     "SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD": None})
    assert result.exit_code == 0
    lib = resolve({"model_path": "zai-org/GLM-5"}, device="b200", env={})  # model comes from model_path
    assert json.loads(result.stdout) == json.loads(json.dumps(lib.model_dump(mode="json")))


def test_console_script_subprocess_exit_codes(tmp_path) -> None:
    """The installed entry point, as a user runs it: 0 resolved, 1 rejected (JSON still printed), 2 bad usage."""
    base = [sys.executable, "-c", "from nsa_policy.cli import main; main()"]
    ok = subprocess.run(base + ["resolve", "--device", "b200", "--model", "deepseek-ai/DeepSeek-V3.2", "--json"],
                        capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}, cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["prefill_backend"] == "trtllm"
    bad = subprocess.run(base + ["resolve", "--device", "h200", "--model", "deepseek-ai/DeepSeek-V3.2",
                                 "--nsa-prefill-backend", "trtllm", "--json"], capture_output=True, text=True, cwd=tmp_path)
    assert bad.returncode == 1 and json.loads(bad.stdout)["errors"][0]["code"] == "NSA101"
    usage = subprocess.run(base + ["resolve", "--device", "h2000", "--model", "deepseek-ai/DeepSeek-V3.2"],
                           capture_output=True, text=True, cwd=tmp_path)
    assert usage.returncode == 2
    assert "did you mean 'h200'" in usage.stderr and "Traceback" not in usage.stderr
    env_run = subprocess.run(base + ["resolve", "--device", "b200", "--model", "deepseek-ai/DeepSeek-V3.2", "--json"],
                             capture_output=True, text=True, cwd=tmp_path,
                             env={"SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD": "4096"})
    out = json.loads(env_run.stdout)
    assert out["dense_attn_kv_len_threshold"] == 4096
    assert out["provenance"]["dense_attn_kv_len_threshold"] == {
        "source": "env", "detail": "SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD", "overwrote": None}
    flag_wins = subprocess.run(base + ["resolve", "--device", "b200", "--model", "deepseek-ai/DeepSeek-V3.2", "--json",
                                       "--dense-attn-kv-len-threshold", "1024"], capture_output=True, text=True,
                               cwd=tmp_path, env={"SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD": "4096"})
    assert json.loads(flag_wins.stdout)["dense_attn_kv_len_threshold"] == 1024
