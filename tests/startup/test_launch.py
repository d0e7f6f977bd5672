"""`nsa-policy launch`: flags read from the command, the missing ones added, the exact final command."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nsa_policy import InputError
from nsa_policy.integration.launch import parse_command, plan_launch

from .sglang_args import sglang_parser

DS = "deepseek-ai/DeepSeek-V3.2"
REPO = Path(__file__).resolve().parents[2]
NSA_ENV = "SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD"
DSA_ENV = "SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD"
CLEAN = {NSA_ENV: None, DSA_ENV: None}


def run_cli(*args: str, env: dict | None = None):
    from nsa_policy.cli import app

    return CliRunner().invoke(app, list(args), env={**CLEAN, **(env or {})})


def test_dry_run_prints_the_exact_final_command() -> None:
    result = run_cli("launch", "--dry-run", "--device", "h200", "--", "python", "-m", "sglang.launch_server",
                     "--model-path", DS, "--tp-size", "8", "--host", "0.0.0.0")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == (
        f"{NSA_ENV}=2048 python -m sglang.launch_server --model-path {DS} --tp-size 8 --host 0.0.0.0 "
        "--kv-cache-dtype bfloat16 --nsa-prefill-backend flashmla_sparse --nsa-decode-backend fa3 --page-size 64")
    assert "NSA205" in result.stderr  # the decision (with its warnings) goes to stderr


def test_dry_run_quotes_for_the_shell_and_the_result_parses_with_sglangs_flags() -> None:
    result = run_cli("launch", "--dry-run", "--device", "b200", "--", "python", "-m", "sglang.launch_server",
                     "--model-path", DS, "--chat-template", "my template.jinja", "--kv-cache-dtype=auto")
    assert result.exit_code == 0, result.output
    line = result.stdout.strip()
    assert "'my template.jinja'" in line
    words = shlex.split(line)
    assert words[0] == f"{NSA_ENV}=2048"
    assert "--kv-cache-dtype=fp8_e4m3" in words  # the explicit 'auto' rewritten in place, not duplicated
    parser = sglang_parser()
    parser.add_argument("--chat-template")
    ns = parser.parse_args(words[4:])
    assert (ns.kv_cache_dtype, ns.nsa_prefill_backend, ns.nsa_decode_backend, ns.page_size) == \
        ("fp8_e4m3", "trtllm", "trtllm", 64)


def test_flags_already_given_are_kept_and_only_the_rest_added() -> None:
    plan = plan_launch(["sglang", "serve", "--model", DS, "--kv-cache-dtype", "fp8_e4m3", "--nsa-decode-backend",
                        "flashmla_kv"], device="h200", env={NSA_ENV: "1024"})
    assert plan.argv[6:] == ("--nsa-decode-backend", "flashmla_kv", "--nsa-prefill-backend", "flashmla_kv",
                             "--page-size", "64")
    assert plan.env_additions == {}  # the user's variable stands


def test_dsa_spelling_follows_the_command() -> None:
    plan = plan_launch(["python", "-m", "sglang.launch_server", "--model-path", DS, "--dsa-decode-backend", "trtllm"],
                       device="b200", env={})
    assert plan.argv[-6:] == ("--kv-cache-dtype", "fp8_e4m3", "--dsa-prefill-backend", "trtllm", "--page-size", "64")
    assert plan.env_additions == {DSA_ENV: "2048"}


def test_json_dry_run_and_rejection() -> None:
    ok = run_cli("launch", "--dry-run", "--json", "--device", "h200", "--", "python", "-m", "sglang.launch_server",
                 "--model-path", DS)
    data = json.loads(ok.stdout)
    assert data["env"] == {NSA_ENV: "2048"} and data["decision"]["decode_backend"] == "fa3"
    assert shlex.split(data["command"])[1:] == data["argv"]
    bad = run_cli("launch", "--dry-run", "--device", "rtx-pro-6000", "--", "python", "-m", "sglang.launch_server",
                  "--model-path", DS, "--kv-cache-dtype", "bf16")
    assert bad.exit_code == 1 and bad.stdout == ""
    assert "NSA106" in bad.stderr and "valid here: fp8_e4m3" in bad.stderr


@pytest.mark.parametrize("argv, field", [
    (["python", "-m", "sglang.launch_server", "--model-path", DS, "--page-size"], "--page-size"),
    (["python", "-m", "sglang.launch_server", "--model-path", DS, "--tp-size", "eight"], "--tp-size"),
    (["python", "-m", "sglang.launch_server", "--model-path", DS, "--enable-dp-attention=yes"], "--enable-dp-attention"),
])
def test_malformed_flags_name_the_flag(argv, field) -> None:
    with pytest.raises(InputError) as exc:
        parse_command(argv)
    assert exc.value.field == field
    result = run_cli("launch", "--dry-run", "--device", "h200", "--", *argv)
    assert result.exit_code == 2 and field in result.stderr and "Traceback" not in result.output


def test_missing_command_and_unknown_model_are_usage_errors() -> None:
    assert run_cli("launch", "--device", "h200").exit_code == 2
    result = run_cli("launch", "--dry-run", "--device", "h200", "--", "python", "-m", "sglang.launch_server",
                     "--model-path", "deepseek-ai/DeepSeek-V3.3")
    assert result.exit_code == 2 and "did you mean 'deepseek-ai/DeepSeek-V3.2'" in result.stderr


def test_launch_execs_the_final_command_with_the_env_addition(tmp_path: Path) -> None:
    # A real exec: the "server" is a Python one-liner that reports the argv and variable it received.
    probe = "import json, os, sys; print(json.dumps([sys.argv[1:], os.environ.get('%s')]))" % NSA_ENV
    env = {k: v for k, v in os.environ.items() if k not in CLEAN}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-m", "nsa_policy.cli", "launch", "--device", "h200", "--log-decisions",
                          str(tmp_path / "d.jsonl"), "--", sys.executable, "-c", probe, "--model-path", DS],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    argv, var = json.loads(out.stdout)
    assert argv == ["--model-path", DS, "--kv-cache-dtype", "bfloat16", "--nsa-prefill-backend", "flashmla_sparse",
                    "--nsa-decode-backend", "fa3", "--page-size", "64"]
    assert var == "2048"
    from nsa_policy.integration.decision_log import read_decision_log

    [entry] = read_decision_log(tmp_path / "d.jsonl")
    assert entry.origin == "nsa_policy.launch" and entry.context["env_set"] == {NSA_ENV: "2048"}
