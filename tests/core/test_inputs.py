"""Every input error: named field, value, what is valid, the closest name; never a traceback."""
from __future__ import annotations

import argparse
import json
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nsa_policy import InputError, PolicyError, RuleFileError, ServingConfig, resolve
from nsa_policy.core.bundle import compile_bundle

DS = "deepseek-ai/DeepSeek-V3.2"


def run_cli(*args: str, env: dict | None = None):
    from nsa_policy.cli import app

    clean = {"SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD": None, "SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD": None}
    return CliRunner().invoke(app, list(args), env={**clean, **(env or {})})


def test_unknown_device_names_closest() -> None:
    with pytest.raises(InputError) as exc:
        resolve({}, device="b2000", model=DS)
    assert exc.value.field == "device" and exc.value.suggestion == "b200"
    assert "h200" in exc.value.valid and "sm90" in exc.value.valid


def test_unknown_model_names_closest() -> None:
    with pytest.raises(InputError) as exc:
        resolve({}, device="h200", model="deepseek-ai/DeepSeek-V3.3")
    assert exc.value.field == "model" and exc.value.suggestion == "deepseek-ai/DeepSeek-V3.2"


def test_unknown_backend_is_a_policy_error_with_closest_name() -> None:
    with pytest.raises(PolicyError) as exc:
        resolve({"nsa_decode_backend": "flashmla-kv"}, device="h200", model=DS, env={})
    [err] = exc.value.decision.errors
    assert err.code == "NSA002" and "did you mean 'flashmla_kv'" in err.message
    assert "flashmla_kv" in err.alternatives and err.fields == ("decode_backend",)


def test_bad_kv_dtype_names_valid_values() -> None:
    with pytest.raises(PolicyError) as exc:
        resolve({"kv_cache_dtype": "fp8_e5m2"}, device="h200", model=DS, env={})
    [err] = exc.value.decision.errors
    assert err.code == "NSA001" and "fp8_e5m2" in err.message and "fp8_e4m3" in err.alternatives


def test_mapping_with_unknown_key_is_rejected_with_closest() -> None:
    with pytest.raises(InputError) as exc:
        resolve({"kv_cache_dtpye": "fp8_e4m3"}, device="h200", model=DS)
    assert "kv_cache_dtype" in str(exc.value)


def test_wrong_type_names_field() -> None:
    with pytest.raises(InputError) as exc:
        resolve({"page_size": "sixty-four"}, device="h200", model=DS)
    assert exc.value.field == "page_size"


@pytest.mark.parametrize("value", ["abc", "-5"])
def test_bad_threshold_env_var(value: str) -> None:
    with pytest.raises(InputError) as exc:
        resolve({}, device="h200", model=DS, env={"SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD": value})
    assert exc.value.field == "SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD"


def test_conflicting_threshold_env_vars() -> None:
    """default refuses the ambiguity with a finding (NSA004, listing both values); each release bundle reads
    the name its release reads (up to 0.5.12 the NSA one, from 0.5.13 the DSA one)."""
    env = {"SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD": "1", "SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD": "2"}
    d = resolve({}, device="h200", model=DS, env=env, raise_on_error=False)
    assert [e.code for e in d.errors] == ["NSA004"]
    assert d.errors[0].alternatives == ("dense_attn_kv_len_threshold 1", "dense_attn_kv_len_threshold 2")
    old = resolve({}, device="h200", model=DS, env=env, policy="sglang-0.5.12")
    new = resolve({}, device="h200", model=DS, env=env, policy="sglang-0.5.23")
    assert (old.dense_attn_kv_len_threshold, new.dense_attn_kv_len_threshold) == (1, 2)


def test_unknown_policy() -> None:
    with pytest.raises(InputError) as exc:
        resolve({}, device="h200", model=DS, policy="sglang-0.5.1")
    # no release bundle is as old as 0.5.1; the closest shipped name is suggested
    from nsa_policy.core.bundle import list_bundles

    assert exc.value.suggestion in list_bundles() and exc.value.suggestion.startswith("sglang-0.5.")
    with pytest.raises(InputError, match="abstract"):
        resolve({}, device="h200", model=DS, policy="base")


def test_cli_usage_errors_exit_2_without_traceback(tmp_path: Path) -> None:
    for args in (["resolve", "--device", "h2000", "--model", DS],
                 ["resolve", "--device", "h200", "--model", "nope/Model"],
                 ["resolve", "--device", "h200", "--model", str(tmp_path / "missing")],
                 ["resolve", "--device", "h200", "--model", DS, "--policy", "nonesuch"],
                 ["resolve", "--device", "h200", "--arch", "DeepseekV3ForCausalLM", "--model", DS],
                 ["resolve", "--device", "h200", "--model", DS, "--package", "flashinfer"],
                 ["schema", "decisions"]):
        result = run_cli(*args)
        assert result.exit_code == 2, (args, result.output)
        assert "error:" in result.output and "Traceback" not in result.output
    js = run_cli("resolve", "--json", "--device", "h2000", "--model", DS)
    assert json.loads(js.stdout.splitlines()[0])["error"]["suggestion"] == "h200"


def test_cli_bad_env_var_exit_2() -> None:
    result = run_cli("resolve", "--device", "h200", "--model", DS,
                     env={"SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD": "lots"})
    assert result.exit_code == 2 and "SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD" in result.output


# --- malformed rule files: file:line, never a traceback -------------------------------------------

def _bundle(tmp_path: Path, stage_text: str, header: str = "name: t\ndescription: test\nextends: default\n") -> Path:
    folder = tmp_path / "t"
    folder.mkdir()
    (folder / "bundle.yaml").write_text(header)
    (folder / "90-extra.yaml").write_text(textwrap.dedent(stage_text))
    return folder


BROKEN = [
    ("stage: validate\nrules:\n  - id: x\n    description: d\n    when: {device.clas: sm90}\n"
     "    emit: {code: NSA100, message: m}\n", 5, "device.class"),
    ("stage: validate\nrules:\n  - id: x\n    description: d\n    emit: {code: NSA999, message: m}\n", 5, "NSA"),
    ("stage: backends\nrules:\n  - id: x\n    description: d\n    set: {prefill_backend: trtlm}\n", 5, "trtllm"),
    ("stage: backends\nrules:\n  - id: x\n    description: d\n"
     "    set: {prefill_backend: trtllm}\n    overwrite: true\n", 6, "compat"),
    ("stage: backends\nrules:\n  - id: x\n    description: d\n"
     "    when: {device.class: {among: [sm90]}}\n    set: {prefill_backend: trtllm}\n", 5, "unknown operator"),
    ("stage: backends\nrules:\n  - id: x\n    descripton: d\n"
     "    set: {prefill_backend: trtllm}\n", 4, "did you mean 'description'"),
    ("stage: backend\nrules: []\n", 1, "stage"),
    ("stage: validate\nrules:\n  - id: x\n    description: d\n"
     "    emit: {code: NSA100, message: 'on {device.klass}'}\n", 5, "device.class"),
    ("stage: validate\nrules:\n  - id: x\n    description: d\n    emit: {code: NSA100, message: m\n", 6, "YAML"),
    ("stage: validate\ndrop: [no.such.rule]\nrules: []\n", 2, "no.such.rule"),
    ("stage: validate\nrules:\n  - id: validate.fp8-trtllm-both-or-neither\n    description: d\n"
     "    emit: {code: NSA100, message: m}\n  - id: validate.fp8-trtllm-both-or-neither\n"
     "    description: d\n    emit: {code: NSA100, message: m}\n", 6, "duplicate"),
]


@pytest.mark.parametrize(("text", "line", "mentions"), BROKEN, ids=[f"broken{i}" for i in range(len(BROKEN))])
def test_malformed_rule_file_reports_file_and_line(tmp_path: Path, text: str, line: int, mentions: str) -> None:
    folder = _bundle(tmp_path, text)
    with pytest.raises(RuleFileError) as exc:
        compile_bundle(str(folder))
    assert exc.value.path.endswith("90-extra.yaml"), exc.value
    assert exc.value.line == line, str(exc.value)
    assert mentions in str(exc.value)


def test_malformed_rule_file_through_cli(tmp_path: Path) -> None:
    folder = _bundle(tmp_path, BROKEN[0][0])
    result = run_cli("resolve", "--device", "h200", "--model", DS, "--policy", str(folder))
    assert result.exit_code == 2
    assert "90-extra.yaml:5" in result.output and "Traceback" not in result.output


def test_bad_extends(tmp_path: Path) -> None:
    folder = _bundle(tmp_path, "stage: validate\nrules: []\n", header="name: t\ndescription: d\nextends: defualt\n")
    with pytest.raises(RuleFileError, match="default"):
        compile_bundle(str(folder))


def test_a_user_bundle_extending_default_works(tmp_path: Path) -> None:
    folder = _bundle(tmp_path, """\
        stage: backends
        rules:
          - id: site.hopper-prefers-flashmla-kv
            description: This site serves Hopper with flashmla_kv prefill.
            before: backends.hopper-bf16
            when: {device.class: sm90, out.kv_cache_dtype: bfloat16}
            set: {prefill_backend: flashmla_kv}
            evidence: [site benchmark]
        """)
    d = resolve({}, device="h200", model=DS, policy=str(folder), env={}, raise_on_error=False)
    assert d.prefill_backend == "flashmla_kv" and d.decode_backend == "fa3"
    assert d.provenance["prefill_backend"].detail == "site.hopper-prefers-flashmla-kv"
    assert [w.code for w in d.warnings] == ["NSA204"]  # flashmla_kv with bf16 re-quantises: said, not hidden


# --- the library call's input shapes ----------------------------------------------------------------

def sglang_like_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    p.add_argument("--model-path")
    p.add_argument("--kv-cache-dtype", default="auto")
    p.add_argument("--nsa-prefill-backend", default=None)
    p.add_argument("--nsa-decode-backend", default=None)
    p.add_argument("--tp-size", type=int, default=1)
    p.add_argument("--dp-size", type=int, default=1)
    p.add_argument("--enable-dp-attention", action="store_true")
    p.add_argument("--page-size", type=int, default=None)
    p.add_argument("--host", default="127.0.0.1")
    return p


def test_resolve_from_argparse_namespace_with_model_path() -> None:
    args = sglang_like_parser().parse_args(["--model-path", "zai-org/GLM-5", "--tp-size", "8"])
    d = resolve(args, device="b200", env={})
    assert (d.model, d.kv_cache_dtype, d.prefill_backend, d.heads_per_rank) == ("zai-org/GLM-5", "fp8_e4m3", "trtllm", 8)


def test_resolve_from_local_config_json(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(
        {"architectures": ["GlmMoeDsaForCausalLM"], "index_topk": 1024, "num_attention_heads": 64, "hidden_size": 6144}))
    d = resolve({"model_path": str(tmp_path)}, device="h200", env={})
    assert (d.model_family, d.index_topk, d.dense_attn_kv_len_threshold) == ("glm5", 1024, 1024)
    d2 = resolve({}, device="h200", model=tmp_path / "config.json", env={})
    assert d2.index_topk == 1024


def test_resolve_from_hf_config_like_object_and_mapping() -> None:
    class PretrainedConfigLike:
        architectures = ["DeepseekV32ForCausalLM"]
        index_topk = 2048
        num_attention_heads = 128

    assert resolve({}, device="h200", model=PretrainedConfigLike(), env={}).model_family == "deepseek_v32"
    no_topk = resolve({}, device="h200", model={"architectures": ["DeepseekV3ForCausalLM"]}, env={})
    assert no_topk.applies is False  # DeepSeek-V3 without index_topk is not DSA


def test_resolve_with_serving_config_and_dsa_spelling() -> None:
    d = resolve(ServingConfig(kv_cache_dtype="fp8_e4m3"), device="h200", model=DS, env={})
    assert d.prefill_backend == "flashmla_kv"
    d2 = resolve({"dsa_decode_backend": "flashmla_sparse"}, device="h200", model=DS, env={})
    assert d2.decode_backend == "flashmla_sparse" and d2.provenance["decode_backend"].source == "user"
    with pytest.raises(InputError, match="conflicts"):
        resolve({"dsa_decode_backend": "fa3", "nsa_decode_backend": "flashmla_sparse"}, device="h200", model=DS)


def test_policy_error_carries_full_decision() -> None:
    with pytest.raises(PolicyError) as exc:
        resolve({"nsa_prefill_backend": "trtllm"}, device="h200", model=DS, env={})
    d = exc.value.decision
    assert d.rejected and d.prefill_backend == "trtllm" and d.errors[0].alternatives
    assert "NSA101" in str(exc.value)


def test_prefill_cp_from_a_parsed_namespace() -> None:
    """The prefill-CP attributes of sglang 0.5.14-0.5.19's parsed namespace (as its real parser leaves them,
    tests/startup/test_real_parsers.py): the legacy mode attributes keep their parser defaults and the legacy
    switches stay False beside --enable-prefill-cp; only a switch that is on makes its mode count."""
    from types import SimpleNamespace

    from nsa_policy.inputs import config_from

    base = dict(enable_prefill_cp=False, cp_strategy=None, enable_dsa_prefill_context_parallel=False,
                dsa_prefill_cp_mode="round-robin-split", enable_prefill_context_parallel=False,
                prefill_cp_mode="in-seq-split")
    read = [(lambda c: (c.enable_prefill_cp, c.cp_strategy, c.enable_prefill_context_parallel))(
        config_from(SimpleNamespace(**{**base, **over}))) for over in (
        {"enable_prefill_cp": True, "cp_strategy": "zigzag"},
        {"enable_prefill_cp": True},
        {"enable_dsa_prefill_context_parallel": True},
        {"enable_dsa_prefill_context_parallel": True, "dsa_prefill_cp_mode": "in-seq-split"},
        {"enable_prefill_context_parallel": True},
        {})]
    assert read == [(True, "zigzag", False), (True, None, False), (True, "interleave", False),
                    (True, "zigzag", False), (False, "zigzag", True), (False, None, False)]
    # sglang's old mode names are the same layouts
    assert config_from({"enable_prefill_cp": True, "cp_strategy": "round-robin-split"}).cp_strategy == "interleave"
    with pytest.raises(InputError, match="cp_strategy"):
        config_from({"enable_prefill_cp": True, "cp_strategy": "ring"})
