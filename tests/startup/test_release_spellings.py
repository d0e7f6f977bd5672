"""Flag spellings judged per release (issue 11, deliverable 2): resolve, the library call, launch.

The verdicts are the argument registry's (rules/catalog/sglang/args.yaml); the opt-in
tests/startup/test_real_parsers.py checks them against each release's real parser.
"""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

import nsa_policy
from nsa_policy.base.errors import InputError
from nsa_policy.cli import app
from nsa_policy.engines.sglang.args import load_args
from nsa_policy.engines.sglang.launch import plan_launch

V32 = "deepseek-ai/DeepSeek-V3.2"


def codes(d, level: str) -> list[str]:
    return [f.code for f in getattr(d, level)]


def test_registry_texts_name_the_spelling_the_release_and_the_new_spelling() -> None:
    reg = load_args()
    assert reg.refused_text(("--nsa-prefill-backend",), "0.5.20") == \
        "--nsa-prefill-backend (removed after sglang 0.5.19; use --dsa-prefill-backend)"
    assert reg.refused_text(("--nsa-prefill-backend", "--tp"), "0.5.19") is None  # --tp is nsa-policy's own
    assert reg.deprecated_text(("--nsa-decode-backend",), "0.5.17") == (
        "'--nsa-decode-backend' is deprecated and will be removed in a future release. "
        "Use '--dsa-decode-backend' instead.")  # sglang's own text (argparse_actions.DeprecatedAliasStoreAction)
    assert reg.deprecated_text(("--enable-dp-attention",), "0.5.23").endswith("Use '--attn-dp-size <dp-size>' instead.")


def test_resolve_refuses_a_removed_flag_on_0_5_20_and_warns_on_0_5_17() -> None:
    args = ["resolve", "--device", "b200", "--model", V32, "--nsa-prefill-backend", "flashmla_kv",
            "--kv-cache-dtype", "fp8_e4m3"]
    refused = CliRunner().invoke(app, [*args, "--policy", "sglang-0.5.20"])
    assert refused.exit_code == 1
    line = next(ln for ln in refused.output.splitlines() if "NSA319" in ln)
    assert "--nsa-prefill-backend" in line and "0.5.20" in line and "use --dsa-prefill-backend" in line
    warned = CliRunner().invoke(app, [*args, "--policy", "sglang-0.5.17"])
    assert warned.exit_code == 0 and "NSA320" in warned.output and "NSA319" not in warned.output
    same = CliRunner().invoke(app, [*args[:-4], "--dsa-prefill-backend", "flashmla_kv", "--kv-cache-dtype", "fp8_e4m3",
                                    "--policy", "sglang-0.5.23"])
    assert same.exit_code == 0 and "NSA319" not in same.output and "NSA320" not in same.output


@pytest.mark.parametrize("key", ["nsa-prefill-backend", "--nsa-prefill-backend"])
def test_library_mapping_in_flag_form_is_judged(key: str) -> None:
    with pytest.raises(nsa_policy.PolicyError) as exc:
        nsa_policy.resolve({key: "flashmla_kv"}, device="h200", model=V32, policy="sglang-0.5.22", env={})
    assert codes(exc.value.decision, "errors") == ["NSA319"]
    ok = nsa_policy.resolve({"prefill_backend": "flashmla_kv"}, device="h200", model=V32,
                            policy="sglang-0.5.22", env={})  # nsa-policy's own, engine-neutral name
    assert ok.prefill_backend == "flashmla_kv" and "NSA319" not in codes(ok, "errors")
    told = nsa_policy.resolve({"prefill_backend": "flashmla_kv"}, device="h200", model=V32, env={},
                              policy="sglang-0.5.22", raise_on_error=False, spellings=("--nsa-prefill-backend",))
    assert codes(told, "errors") == ["NSA319"]


@pytest.mark.parametrize("policy,refused", [("sglang-0.5.23", True), ("sglang-0.5.10", False), ("default", False)])
def test_a_mapping_holding_an_sglang_attribute_is_judged_as_the_release_judges_it(policy: str, refused: bool) -> None:
    """nsa_prefill_backend is sglang's attribute up to 0.5.12.post1: 0.5.23 has none, 0.5.10 holds it."""
    d = nsa_policy.resolve({"nsa_prefill_backend": "flashmla_sparse"}, device="h200", model=V32, env={},
                           policy=policy, raise_on_error=False)
    assert ("NSA319" in codes(d, "errors")) is refused
    assert d.inputs.config.prefill_backend == "flashmla_sparse"
    if refused:
        assert "nsa_prefill_backend (attribute, removed after sglang 0.5.12.post1; use dsa_prefill_backend)" in \
            d.errors[0].message
    same = nsa_policy.resolve({"dsa_prefill_backend": "flashmla_sparse"}, device="h200", model=V32, env={},
                              policy="sglang-0.5.23", raise_on_error=False)
    assert "NSA319" not in codes(same, "errors")


def test_launch_refuses_a_removed_key_in_a_config_file(tmp_path) -> None:
    config = tmp_path / "server.yaml"
    config.write_text("nsa-prefill-backend: trtllm\nkv-cache-dtype: fp8_e4m3\n")
    command = ["python", "-m", "sglang.launch_server", "--model-path", V32, "--config", str(config)]
    with pytest.raises(InputError) as exc:
        plan_launch(command, device="b200", sglang_version="0.5.20", env={})
    message = str(exc.value)
    assert "nsa-prefill-backend" in message and "0.5.20" in message and "write dsa-prefill-backend" in message


def test_launch_shows_the_release_refusing_the_command_as_given_and_respells_it() -> None:
    command = ["python", "-m", "sglang.launch_server", "--model-path", V32, "--nsa-decode-backend", "trtllm",
               "--kv-cache-dtype", "fp8_e4m3"]
    plan = plan_launch(command, device="b200", sglang_version="0.5.20", env={})
    assert plan.engine_decision is not None and codes(plan.engine_decision, "errors") == ["NSA319"]
    assert "--dsa-decode-backend" in plan.argv and "--nsa-decode-backend" not in plan.argv
