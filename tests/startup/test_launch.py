"""`nsa-policy launch`: the target release, flags read from the command and respelt for that release,
the missing ones added, the exact final command."""
from __future__ import annotations

import json
import logging
import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nsa_policy import InputError
from nsa_policy.engines.sglang.launch import command_interpreter, detect_sglang_version, parse_command, plan_launch

from .sglang_args import sglang_0_5_23_parser, sglang_parser

DS = "deepseek-ai/DeepSeek-V3.2"
REPO = Path(__file__).resolve().parents[2]
NSA_ENV = "SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD"
DSA_ENV = "SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD"
CLEAN = {NSA_ENV: None, DSA_ENV: None}
SERVER = ["python", "-m", "sglang.launch_server"]
QUIET = logging.getLogger("nsa_policy.tests.launch")
QUIET.propagate = False
QUIET.addHandler(logging.NullHandler())


def run_cli(*args: str, env: dict | None = None):
    from nsa_policy.cli import app

    return CliRunner().invoke(app, list(args), env={**CLEAN, **(env or {})})


def plan(*args: str, release: str | None, device: str = "b200", env: dict | None = None, **kw):
    return plan_launch(SERVER + ["--model-path", DS, *args], device=device, env=env or {}, sglang_version=release,
                       logger=QUIET, **kw)


def test_dry_run_prints_the_exact_final_command_in_the_releases_spelling() -> None:
    old = run_cli("launch", "--dry-run", "--device", "h200", "--sglang-version", "0.5.10", "--", *SERVER,
                  "--model-path", DS, "--tp-size", "8", "--host", "0.0.0.0")
    assert old.exit_code == 0, old.output
    assert old.stdout.strip() == (
        f"{NSA_ENV}=2048 python -m sglang.launch_server --model-path {DS} --tp-size 8 --host 0.0.0.0 "
        "--kv-cache-dtype bfloat16 --nsa-prefill-backend flashmla_sparse --nsa-decode-backend fa3 --page-size 64")
    assert "NSA205" in old.stderr  # the decision (with its warnings) goes to stderr
    assert "target sglang 0.5.10 (--sglang-version)" in old.stderr
    new = run_cli("launch", "--dry-run", "--device", "h200", "--sglang-version", "0.5.23", "--", *SERVER,
                  "--model-path", DS, "--tp-size", "8")
    assert new.stdout.strip() == (
        f"{DSA_ENV}=2048 python -m sglang.launch_server --model-path {DS} --tp-size 8 "
        "--kv-cache-dtype bfloat16 --dsa-prefill-backend flashmla_sparse --dsa-decode-backend fa3 --page-size 64")


def test_dry_run_quotes_for_the_shell_and_the_result_parses_with_the_releases_flags() -> None:
    for release, parser, prefix in (("0.5.10", sglang_parser(), "nsa"), ("0.5.23", sglang_0_5_23_parser(), "dsa")):
        result = run_cli("launch", "--dry-run", "--device", "b200", "--sglang-version", release, "--", *SERVER,
                         "--model-path", DS, "--chat-template", "my template.jinja", "--kv-cache-dtype=auto")
        assert result.exit_code == 0, result.output
        line = result.stdout.strip()
        assert "'my template.jinja'" in line
        words = shlex.split(line)
        assert words[0] == f"{NSA_ENV if prefix == 'nsa' else DSA_ENV}=2048"
        assert "--kv-cache-dtype=fp8_e4m3" in words  # the explicit 'auto' rewritten in place, not duplicated
        parser.add_argument("--chat-template")
        ns = vars(parser.parse_args(words[4:]))
        assert (ns["kv_cache_dtype"], ns[f"{prefix}_prefill_backend"], ns[f"{prefix}_decode_backend"], ns["page_size"]) == \
            ("fp8_e4m3", "trtllm", "trtllm", 64)


def test_flags_already_given_are_kept_and_only_the_rest_added() -> None:
    p = plan_launch(["sglang", "serve", "--model", DS, "--kv-cache-dtype", "fp8_e4m3", "--nsa-decode-backend",
                     "flashmla_kv"], device="h200", env={NSA_ENV: "1024"}, sglang_version="0.5.12", logger=QUIET)
    assert p.argv[6:] == ("--nsa-decode-backend", "flashmla_kv", "--nsa-prefill-backend", "flashmla_kv",
                          "--page-size", "64")
    assert p.env_additions == {} and p.rewritten == ()  # the user's variable stands; 0.5.12 reads it


@pytest.mark.parametrize("release, status", [("0.5.13", "deprecated alias"), ("0.5.20", "refused by the parser")])
def test_the_commands_own_old_spellings_are_respelt_for_the_release(release, status) -> None:
    p = plan("--nsa-decode-backend", "trtllm", "--nsa-prefill-backend=trtllm", release=release)
    assert "--nsa-decode-backend" not in " ".join(p.argv)
    assert p.argv[5:9] == ("--dsa-decode-backend", "trtllm", "--dsa-prefill-backend=trtllm", "--kv-cache-dtype")
    assert p.rewritten == (f"--nsa-decode-backend → --dsa-decode-backend (sglang {release}: {status})",
                           f"--nsa-prefill-backend → --dsa-prefill-backend (sglang {release}: {status})")
    assert p.env_additions == {DSA_ENV: "2048"}


def test_dp_attention_becomes_attn_dp_size_where_deprecated_and_heads_per_rank_follow() -> None:
    p = plan("--tp-size", "8", "--dp-size", "8", "--enable-dp-attention", release="0.5.23")
    assert "--enable-dp-attention" not in p.argv and p.argv[5:9] == ("--tp-size", "8", "--attn-dp-size", "8")
    assert p.decision.heads_per_rank == 128  # 128 heads, attention TP 1
    assert plan("--tp-size", "8", "--attn-dp-size", "8", release="0.5.23").decision.heads_per_rank == 128
    assert plan("--tp-size", "8", "--dp-size", "8", release="0.5.23").decision.heads_per_rank == 16  # replicas only
    kept = plan("--tp-size", "8", "--dp-size", "8", "--enable-dp-attention", release="0.5.21")
    assert "--enable-dp-attention" in kept.argv and kept.decision.heads_per_rank == 128 and kept.rewritten == ()
    ns = vars(sglang_0_5_23_parser().parse_args(list(p.argv[3:])))
    assert (ns["attn_dp_size"], ns["dp_size"], ns["enable_dp_attention"]) == (8, 1, False)


def test_threshold_variable_the_release_ignores_is_carried_and_the_decision_uses_what_sglang_reads() -> None:
    p = plan(release="0.5.20", env={NSA_ENV: "4096"})  # 0.5.13-0.5.20 ignore the old name for the threshold
    assert p.env_additions == {DSA_ENV: "4096"} and p.decision.dense_attn_kv_len_threshold == 4096
    assert any(NSA_ENV in n and "not read by sglang 0.5.20" in n for n in p.notes)
    both = plan(release="0.5.23", env={NSA_ENV: "4096", DSA_ENV: "1024"})
    assert both.env_additions == {} and both.decision.dense_attn_kv_len_threshold == 1024
    flag = plan("--dense-attn-kv-len-threshold", "512", release="0.5.23", env={DSA_ENV: "1024"})
    assert "--dense-attn-kv-len-threshold" not in flag.argv  # nsa-policy's flag: sglang has none
    assert flag.env_additions == {DSA_ENV: "512"} and flag.decision.dense_attn_kv_len_threshold == 512


def test_what_the_release_cannot_take_is_an_error_not_a_command_that_will_not_start() -> None:
    with pytest.raises(InputError) as exc:
        plan("--attn-dp-size", "8", release="0.5.21")
    assert exc.value.field == "--attn-dp-size" and "0.5.22" in str(exc.value)
    with pytest.raises(InputError) as exc:
        plan("--dsa-prefill-backend", "triton", release="0.5.19")
    assert exc.value.field == "--dsa-prefill-backend" and "trtllm" in exc.value.valid
    with pytest.raises(InputError) as exc:
        plan("--sglang-version", "0.5.23", release="0.5.23")
    assert "before the command" in str(exc.value)


def test_launch_refuses_its_own_unknown_options() -> None:
    result = run_cli("launch", "--sglang-versio", "0.5.23", "--dry-run", "--device", "h200", "--", *SERVER,
                     "--model-path", DS)
    assert result.exit_code == 2 and "--sglang-versio" in result.output and result.stdout.count("sglang.launch_server") == 0


def test_dry_run_shows_the_release_on_its_own_what_nsa_policy_adds_and_the_final_decision() -> None:
    args = ("launch", "--dry-run", "--device", "b200", "--sglang-version", "0.5.11", "--", *SERVER,
            "--model-path", DS, "--nsa-prefill-backend", "flashmla_sparse")
    data = json.loads(run_cli(*args[:2], "--json", *args[2:]).stdout)
    assert data["sglang"]["version"] == "0.5.11" and data["sglang"]["source"] == "--sglang-version"
    assert data["engine"]["bundle"] == "sglang-0.5.11" and data["engine"]["overrides"] == {}
    engine, final = data["engine"]["decision"], data["decision"]
    # on its own 0.5.11 pairs the explicit fp8 prefill with a trtllm decode (mixed layouts); nsa-policy does not
    assert (engine["prefill_backend"], engine["decode_backend"]) == ("flashmla_sparse", "trtllm")
    assert final["prefill_backend"] == "flashmla_sparse" and final["decode_backend"] != "trtllm"
    assert f"--nsa-decode-backend {final['decode_backend']}" in data["added_flags"]
    text = run_cli(*args)
    assert "sglang 0.5.11 on its own (sglang-0.5.11): " in text.stderr
    assert f"with nsa-policy default: decode_backend: trtllm → {final['decode_backend']}" in text.stderr
    # 0.5.10 replaces explicit backends with trtllm for fp8 on Blackwell: the final decision says what runs
    old = plan("--nsa-prefill-backend", "flashmla_sparse", release="0.5.10")
    assert (old.decision.prefill_backend, old.decision.decode_backend) == ("trtllm", "trtllm")
    assert old.engine_overrides and "NSA302" in {f.code for f in old.decision.warnings}


def test_json_dry_run_and_rejection() -> None:
    ok = run_cli("launch", "--dry-run", "--json", "--device", "h200", "--sglang-version", "0.5.10", "--", *SERVER,
                 "--model-path", DS)
    data = json.loads(ok.stdout)
    assert data["env"] == {NSA_ENV: "2048"} and data["decision"]["decode_backend"] == "fa3"
    assert shlex.split(data["command"])[1:] == data["argv"]
    bad = run_cli("launch", "--dry-run", "--device", "rtx-pro-6000", "--", *SERVER, "--model-path", DS,
                  "--kv-cache-dtype", "bf16")
    assert bad.exit_code == 1 and bad.stdout == ""
    assert "NSA106" in bad.stderr and "valid here: fp8_e4m3" in bad.stderr


@pytest.mark.parametrize("argv, field", [
    (SERVER + ["--model-path", DS, "--page-size"], "--page-size"),
    (SERVER + ["--model-path", DS, "--tp-size", "eight"], "--tp-size"),
    (SERVER + ["--model-path", DS, "--enable-dp-attention=yes"], "--enable-dp-attention"),
])
def test_malformed_flags_name_the_flag(argv, field) -> None:
    with pytest.raises(InputError) as exc:
        parse_command(argv)
    assert exc.value.field == field
    result = run_cli("launch", "--dry-run", "--device", "h200", "--", *argv)
    assert result.exit_code == 2 and field in result.stderr and "Traceback" not in result.output


def test_missing_command_and_unknown_model_are_usage_errors() -> None:
    assert run_cli("launch", "--device", "h200").exit_code == 2
    result = run_cli("launch", "--dry-run", "--device", "h200", "--", *SERVER, "--model-path", "deepseek-ai/DeepSeek-V3.3")
    assert result.exit_code == 2 and "did you mean 'deepseek-ai/DeepSeek-V3.2'" in result.stderr


def _fake_interpreter(tmp_path: Path, version: str | None) -> Path:
    """A real interpreter of its own (a venv, no pip) whose site folder holds only an sglang-<version> dist-info:
    the probe runs it isolated (python -I), so no PYTHONPATH trick would reach it."""
    import venv

    venv.EnvBuilder(with_pip=False, symlinks=True).create(tmp_path / "venv")
    python = tmp_path / "venv" / "bin" / "python"
    [site] = (tmp_path / "venv" / "lib").glob("python3*/site-packages")
    if version:
        info = site / f"sglang-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    return python


def test_the_release_is_asked_of_the_commands_own_interpreter(tmp_path: Path) -> None:
    python = _fake_interpreter(tmp_path, "0.5.13")
    assert command_interpreter([str(python), "-m", "sglang.launch_server"]) == str(python)
    found, how = detect_sglang_version([str(python), "-m", "sglang.launch_server"])
    assert found == "0.5.13" and how.startswith(f"importlib.metadata of {python}")
    p = plan_launch([str(python), "-m", "sglang.launch_server", "--model-path", DS], device="b200", env={}, logger=QUIET)
    assert p.release.version == "0.5.13" and p.release.source.startswith(f"importlib.metadata of {python}")
    assert "--dsa-prefill-backend" in p.argv and p.env_additions == {DSA_ENV: "2048"}
    entry = tmp_path / "venv" / "bin" / "sglang"
    entry.write_text(f"#!{python}\n# an entry point script\n")
    entry.chmod(entry.stat().st_mode | stat.S_IXUSR)
    assert command_interpreter([str(entry), "serve"]) == str(python)
    override = plan_launch([str(python), "-m", "sglang.launch_server", "--model-path", DS], device="b200", env={},
                           sglang_version="0.5.12", logger=QUIET)
    assert override.release.source == "--sglang-version" and "--nsa-prefill-backend" in override.argv


def test_an_unknown_release_targets_the_newest_known_with_a_note(tmp_path: Path) -> None:
    python = _fake_interpreter(tmp_path, None)
    p = plan_launch([str(python), "-m", "sglang.launch_server", "--model-path", DS], device="b200", env={}, logger=QUIET)
    from nsa_policy.engines.sglang.args import load_args

    assert p.release.version == load_args().newest and p.release.source.startswith("unknown: no sglang installed for")
    assert any("--sglang-version" in n for n in p.notes)
    assert detect_sglang_version(["torchrun", "x.py"])[0] is None


def test_launch_execs_the_final_command_with_the_env_addition(tmp_path: Path) -> None:
    # A real exec: the "server" is a Python one-liner that reports the argv and variable it received.
    probe = f"import json, os, sys; print(json.dumps([sys.argv[1:], os.environ.get('{NSA_ENV}')]))"
    env = {k: v for k, v in os.environ.items() if k not in CLEAN}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-m", "nsa_policy.cli", "launch", "--device", "h200", "--sglang-version", "0.5.10",
                          "--log-decisions", str(tmp_path / "d.jsonl"), "--", sys.executable, "-c", probe,
                          "--model-path", DS], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    argv, var = json.loads(out.stdout)
    assert argv == ["--model-path", DS, "--kv-cache-dtype", "bfloat16", "--nsa-prefill-backend", "flashmla_sparse",
                    "--nsa-decode-backend", "fa3", "--page-size", "64"]
    assert var == "2048"
    from nsa_policy.integration.decision_log import read_decision_log

    [entry] = read_decision_log(tmp_path / "d.jsonl")
    assert entry.origin == "nsa_policy.commands.launch" and entry.context["env_set"] == {NSA_ENV: "2048"}
    assert entry.context["sglang"]["version"] == "0.5.10"


def test_a_decision_the_release_cannot_run_is_refused_and_release_overrides_are_reported() -> None:
    from nsa_policy import PolicyError

    with pytest.raises(PolicyError) as exc:  # flashinfer_sparse_mla is first listed in 0.5.17
        plan_launch(SERVER + ["--model-path", "zai-org/GLM-5"], device="rtx-pro-6000", env={}, sglang_version="0.5.10",
                    logger=QUIET)
    assert "flashinfer_sparse_mla" in str(exc.value) and "first listed in 0.5.17" in str(exc.value)
    ok = plan_launch(SERVER + ["--model-path", "zai-org/GLM-5"], device="rtx-pro-6000", env={}, sglang_version="0.5.17",
                     logger=QUIET)
    assert "--dsa-prefill-backend" in ok.argv and ok.decision.prefill_backend == "flashinfer_sparse_mla"
    glm = plan_launch(SERVER + ["--model-path", "zai-org/GLM-5"], device="b200", env={}, sglang_version="0.5.10",
                      logger=QUIET)  # 0.5.10 forces threshold 0 for GLM-5 on Blackwell whatever the variable says
    assert glm.engine_overrides == {"dense_attn_kv_len_threshold": 0} and glm.decision.dense_attn_kv_len_threshold == 0
    assert glm.decision.provenance["dense_attn_kv_len_threshold"].overwrote == "2048"
    assert "NSA306" in {f.code for f in glm.decision.warnings}  # sglang forces the threshold, ignoring any user value
    assert any("runs dense_attn_kv_len_threshold=0" in n for n in glm.notes)
    assert plan_launch(SERVER + ["--model-path", "zai-org/GLM-5"], device="b200", env={}, sglang_version="0.5.13",
                       logger=QUIET).engine_overrides == {}


def test_a_renamed_value_with_settings_of_its_own_is_left_to_sglang() -> None:
    # 0.5.23 renames tokenspeed_mla to cutedsl_mla and sets fp8_e4m3 KV itself; respelt here, the KV would be lost
    p = plan("--attention-backend", "tokenspeed_mla", release="0.5.23", policy="sglang-0.5.23")
    assert p.argv[5:7] == ("--attention-backend", "tokenspeed_mla") and p.rewritten == ()
    assert (p.decision.attention_backend, p.decision.kv_cache_dtype) == ("cutedsl_mla", "fp8_e4m3")


def test_a_deprecated_value_is_respelt() -> None:
    p = plan("--attention-backend", "nsa", release="0.5.23")
    assert p.argv[5:7] == ("--attention-backend", "dsa") and p.rewritten[0].endswith("(sglang 0.5.23: deprecated value)")
    assert plan("--attention-backend", "nsa", release="0.5.12").argv[5:7] == ("--attention-backend", "nsa")


@pytest.mark.parametrize("token, release, full", [
    ("--kv-cache-dt", "0.5.23", "--kv-cache-dtype"),
    ("--nsa-prefill", "0.5.10", "--nsa-prefill-backend"),
    ("--dsa-decode-back", "0.5.20", "--dsa-decode-backend"),
    ("--page-si", "0.5.13", "--page-size"),
])
def test_an_abbreviation_of_a_flag_the_policy_reads_is_refused(token, release, full) -> None:
    # argparse would read it as the full flag; an added flag would then silently override the user's value
    with pytest.raises(InputError) as exc:
        plan(token, "fp8_e4m3" if "kv" in token else "64" if "page" in token else "trtllm", release=release)
    assert exc.value.field == token and full in exc.value.valid and "write the flag in full" in str(exc.value)
    assert plan("--host", "0.0.0.0", "--port", "30000", release=release).argv[5:9] == (
        "--host", "0.0.0.0", "--port", "30000")  # full names of other flags pass untouched


def test_old_cp_spellings_and_mode_values_are_respelt() -> None:
    # round-robin-split: DeepSeek-V3.2 runs prefill CP interleaved only (zigzag is refused from 0.5.20, NSA111)
    p = plan("--enable-nsa-prefill-context-parallel", "--nsa-prefill-cp-mode", "round-robin-split", release="0.5.23")
    assert p.argv[5:8] == ("--enable-prefill-cp", "--cp-strategy", "interleave")
    assert plan("--nsa-prefill-cp-mode", "round-robin-split", release="0.5.13").argv[5:7] == (
        "--dsa-prefill-cp-mode", "round-robin-split")  # 0.5.13 still has the old mode names
