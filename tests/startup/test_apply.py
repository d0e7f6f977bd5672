"""startup.apply on the Namespace a real argparse parser with sglang's flags produces."""
from __future__ import annotations

import copy
import dataclasses
import logging
from typing import Optional

import pytest

from nsa_policy import InputError, PolicyError
from nsa_policy.engines.sglang.startup import StartupRejected, apply

from .sglang_args import sglang_parser

DS = "deepseek-ai/DeepSeek-V3.2"
NSA_ENV = "SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD"
DSA_ENV = "SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD"


def parse(*argv: str, dsa: bool = False):
    return sglang_parser(dsa=dsa).parse_args(["--model-path", DS, *argv])


def test_fills_every_unset_field_and_nothing_else() -> None:
    args = parse("--tp-size", "8")
    before = vars(copy.deepcopy(args))
    env: dict[str, str] = {}
    applied = apply(args, device="h200", env=env)
    after = vars(args)
    changed = {k: (before[k], after[k]) for k in after if before[k] != after[k]}
    assert changed == {
        "kv_cache_dtype": ("auto", "bfloat16"),
        "nsa_prefill_backend": (None, "flashmla_sparse"),
        "nsa_decode_backend": (None, "fa3"),
        "page_size": (None, 64),
    }
    assert env == {NSA_ENV: "2048"}
    assert applied.written == {k: v[1] for k, v in changed.items()}
    assert applied.previous["kv_cache_dtype"] == "auto"
    assert after["attention_backend"] is None  # sglang sets it itself; its value was renamed across versions
    assert applied.decision.heads_per_rank == 16  # --tp-size 8 reached the policy through tensor_parallel_size


def test_explicit_values_are_never_replaced() -> None:
    args = parse("--kv-cache-dtype", "fp8_e4m3", "--nsa-decode-backend", "flashmla_kv", "--page-size", "64")
    env = {NSA_ENV: "4096"}
    applied = apply(args, device="h200", env=env)
    assert (args.kv_cache_dtype, args.nsa_decode_backend, args.page_size) == ("fp8_e4m3", "flashmla_kv", 64)
    assert args.nsa_prefill_backend == "flashmla_kv"  # the one unset side, filled for fp8 on sm90
    assert applied.written == {"nsa_prefill_backend": "flashmla_kv"}
    assert env == {NSA_ENV: "4096"} and applied.env_set == {}
    assert applied.decision.provenance["dense_attn_kv_len_threshold"].source == "env"


def test_bf16_alias_counts_as_explicit_and_agrees() -> None:
    args = parse("--kv-cache-dtype", "bf16")
    applied = apply(args, device="b200", env={})
    assert args.kv_cache_dtype == "bf16" and "kv_cache_dtype" not in applied.written
    assert applied.kept == {}
    assert (args.nsa_prefill_backend, args.nsa_decode_backend) == ("flashmla_sparse", "trtllm")


def test_applying_twice_changes_nothing() -> None:
    args = parse("--tp-size", "4", "--nsa-prefill-backend", "trtllm")
    env: dict[str, str] = {}
    first = apply(args, device="b200", env=env)
    assert first.changed
    snapshot, env_snapshot = vars(copy.deepcopy(args)), dict(env)
    second = apply(args, device="b200", env=env)
    assert vars(args) == snapshot and env == env_snapshot
    assert not second.changed and second.written == {} and second.env_set == {}
    outputs = ("kv_cache_dtype", "prefill_backend", "decode_backend", "page_size", "dense_attn_kv_len_threshold")
    assert {f: getattr(second.decision, f) for f in outputs} == {f: getattr(first.decision, f) for f in outputs}


def test_rejected_configuration_raises_with_the_explanation_and_writes_nothing(caplog) -> None:
    args = parse("--kv-cache-dtype", "bfloat16")
    before = vars(copy.deepcopy(args))
    env: dict[str, str] = {}
    with caplog.at_level(logging.INFO, logger="nsa_policy.startup"):
        with pytest.raises(StartupRejected) as exc:
            apply(args, device="rtx-pro-6000", env=env)
    assert isinstance(exc.value, PolicyError) and exc.value.decision.errors
    text = str(exc.value)
    assert "NSA106" in text and "rtx-pro-6000 (sm120)" in text
    assert "at fault: --kv-cache-dtype" in text and "valid here: fp8_e4m3" in text
    assert vars(args) == before and env == {}
    [record] = caplog.records
    assert record.levelno == logging.ERROR and record.nsa_policy["status"] == "rejected"
    assert record.nsa_policy["errors"][0]["code"] == "NSA106"


def test_one_structured_log_record_per_apply(caplog) -> None:
    args = parse("--tp-size", "8")
    with caplog.at_level(logging.INFO, logger="nsa_policy.startup"):
        applied = apply(args, device="h200", env={})
    [record] = caplog.records
    data = record.nsa_policy
    assert record.nsa_decision is applied.decision
    assert data["status"] == "applied" and data["device"] == "h200" and data["policy"] == "default"
    assert data["decision"]["prefill_backend"] == "flashmla_sparse"
    assert data["provenance"]["prefill_backend"] == "rule backends.hopper-bf16"
    assert data["written"]["kv_cache_dtype"] == "bfloat16" and data["previous"]["kv_cache_dtype"] == "auto"
    assert data["env_set"] == {NSA_ENV: "2048"}
    assert [w["code"] for w in data["warnings"]] == ["NSA205"]  # 16 heads per rank padded to 64
    assert record.levelno == logging.WARNING
    assert "kv_cache_dtype=bfloat16 (was 'auto'" in record.getMessage()


def test_dsa_spelling_writes_dsa_fields_and_the_dsa_variable() -> None:
    args = parse(dsa=True)
    env: dict[str, str] = {}
    apply(args, device="b200", env=env)
    assert (args.dsa_prefill_backend, args.dsa_decode_backend) == ("trtllm", "trtllm")
    assert not hasattr(args, "nsa_prefill_backend")
    assert env == {DSA_ENV: "2048"}


def test_threshold_goes_into_an_attribute_when_the_engine_has_one() -> None:
    args = parse()
    args.dense_attn_kv_len_threshold = None
    env: dict[str, str] = {}
    apply(args, device="h200", env=env)
    assert args.dense_attn_kv_len_threshold == 2048 and env == {}


def test_a_threshold_under_the_name_the_release_ignores_is_carried_to_the_name_it_reads() -> None:
    # the nsa_* namespace is 0.5.10-0.5.12's shape: those releases read only SGLANG_NSA_…
    env = {DSA_ENV: "1024"}
    applied = apply(parse(), device="h200", env=env)
    assert env == {DSA_ENV: "1024", NSA_ENV: "1024"} and applied.env_set == {NSA_ENV: "1024"}
    assert applied.decision.dense_attn_kv_len_threshold == 1024
    assert applied.release.version == "0.5.12.post1" and any(DSA_ENV in n and "not read" in n for n in applied.notes)
    # 0.5.23 ignores SGLANG_NSA_…: with only that one set, apply sets SGLANG_DSA_… to the user's value
    env = {NSA_ENV: "4096"}
    applied = apply(parse(dsa=True), device="h200", env=env, sglang_version="0.5.23")
    assert env == {NSA_ENV: "4096", DSA_ENV: "4096"} and applied.decision.dense_attn_kv_len_threshold == 4096
    # both set: the release reads its own; the other is neither honoured nor touched
    env = {NSA_ENV: "4096", DSA_ENV: "1024"}
    applied = apply(parse(dsa=True), device="h200", env=env, sglang_version="0.5.23")
    assert env == {NSA_ENV: "4096", DSA_ENV: "1024"} and applied.decision.dense_attn_kv_len_threshold == 1024
    assert not applied.changed or applied.env_set == {}


def test_not_a_dsa_model_writes_nothing(tmp_path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text('{"architectures": ["Qwen3MoeForCausalLM"], "num_attention_heads": 64}')
    args = sglang_parser().parse_args(["--model-path", str(cfg)])
    before = vars(copy.deepcopy(args))
    env: dict[str, str] = {}
    applied = apply(args, device="h200", env=env)
    assert not applied.decision.applies and not applied.changed
    assert vars(args) == before and env == {}


def test_compat_bundle_disagreeing_with_an_explicit_value_is_kept_and_reported(caplog) -> None:
    # sglang 0.5.10 overwrote an explicit prefill backend on Blackwell fp8 (#22401); apply never does.
    args = parse("--kv-cache-dtype", "fp8_e4m3", "--nsa-prefill-backend", "flashmla_sparse")
    with caplog.at_level(logging.INFO, logger="nsa_policy.startup"):
        applied = apply(args, policy="sglang-0.5.10", device="b200", env={})
    assert args.nsa_prefill_backend == "flashmla_sparse"
    assert applied.kept == {"nsa_prefill_backend": {"explicit": "flashmla_sparse", "decided": "trtllm"}}
    assert caplog.records[0].levelno == logging.WARNING
    assert "kept explicit nsa_prefill_backend=flashmla_sparse (policy decided trtllm)" in caplog.records[0].getMessage()


@dataclasses.dataclass
class ServerArgsLike:
    """Shaped like sglang's ServerArgs dataclass (before __post_init__ fills anything)."""

    model_path: str
    kv_cache_dtype: str = "auto"
    nsa_prefill_backend: Optional[str] = None
    nsa_decode_backend: Optional[str] = None
    page_size: Optional[int] = None
    tp_size: int = 1
    dp_size: int = 1
    enable_dp_attention: bool = False


def test_dataclass_and_mapping_targets() -> None:
    sa = ServerArgsLike(model_path=DS, tp_size=8, dp_size=8, enable_dp_attention=True)
    apply(sa, device="b200", env={})
    assert (sa.kv_cache_dtype, sa.nsa_prefill_backend, sa.nsa_decode_backend, sa.page_size) == \
        ("fp8_e4m3", "trtllm", "trtllm", 64)
    mapping = {"model_path": DS, "kv_cache_dtype": "auto", "nsa_prefill_backend": None, "unrelated_flag": 3}
    apply(mapping, device="h200", env={})
    assert mapping == {"model_path": DS, "kv_cache_dtype": "bfloat16", "nsa_prefill_backend": "flashmla_sparse",
                       "unrelated_flag": 3}


def test_unwritable_target_is_an_input_error_naming_the_field() -> None:
    @dataclasses.dataclass(frozen=True)
    class Frozen:
        model_path: str = DS
        kv_cache_dtype: str = "auto"

    with pytest.raises(InputError) as exc:
        apply(Frozen(), device="h200", env={})
    assert exc.value.field == "server_args.kv_cache_dtype"


def test_bad_input_is_an_input_error_not_a_traceback() -> None:
    args = parse()
    args.model_path = "deepseek-ai/DeepSeek-V3.3"
    with pytest.raises(InputError) as exc:
        apply(args, device="h200", env={})
    assert exc.value.field == "model" and exc.value.suggestion == DS


EXTRAS = ([], ["--kv-cache-dtype", "fp8_e4m3"], ["--kv-cache-dtype", "bf16"], ["--tp-size", "8"],
          ["--tp-size", "8", "--dp-size", "8", "--enable-dp-attention"], ["--nsa-prefill-backend", "trtllm"],
          ["--enable-hisparse", "--disable-radix-cache"])


def test_default_policy_is_a_fixed_point_on_every_catalog_device_and_model() -> None:
    """apply twice on every device × model × a few flag sets: nothing changes, the decision is the same."""
    from nsa_policy.catalog.store import load_catalog

    catalog = load_catalog()
    quiet = logging.getLogger("nsa_policy.startup.fixed-point")
    quiet.addHandler(logging.NullHandler())
    quiet.propagate = False
    outputs = ("kv_cache_dtype", "prefill_backend", "decode_backend", "page_size", "dense_attn_kv_len_threshold",
               "kv_cache_layout")
    applied_count = rejected = 0
    for device in catalog.device_names:
        for model in catalog.model_ids:
            for extra in EXTRAS:
                args = sglang_parser().parse_args(["--model-path", model, *extra])
                env: dict[str, str] = {}
                try:
                    first = apply(args, device=device, env=env, logger=quiet)
                except StartupRejected:
                    rejected += 1
                    continue
                snapshot, env_snapshot = vars(copy.deepcopy(args)), dict(env)
                second = apply(args, device=device, env=env, logger=quiet)
                where = (device, model, extra)
                assert vars(args) == snapshot and env == env_snapshot and not second.changed, where
                assert second.kept == {}, where
                assert [getattr(second.decision, f) for f in outputs] == [getattr(first.decision, f) for f in outputs], where
                applied_count += 1
    assert applied_count > 100 and rejected > 0  # both paths were exercised


def test_compat_bundle_that_treats_explicit_flags_differently_is_reported_on_the_second_pass() -> None:
    # sglang-pre-21783 forces the 128k threshold for an EXPLICIT trtllm prefill only. After the first
    # pass wrote the default trtllm as a flag, that engine would apply the override: apply still
    # changes nothing, and says so in `kept`.
    args = parse("--kv-cache-dtype", "fp8_e4m3")
    env: dict[str, str] = {}
    first = apply(args, policy="sglang-pre-21783", device="b200", env=env)
    assert first.decision.dense_attn_kv_len_threshold == 2048 and args.nsa_prefill_backend == "trtllm"
    second = apply(args, policy="sglang-pre-21783", device="b200", env=env)
    assert not second.changed and env == {NSA_ENV: "2048"}
    assert second.decision.dense_attn_kv_len_threshold == 131072
    assert second.kept == {NSA_ENV: {"explicit": "2048", "decided": 131072}}


def _check_0_5_23_namespace(args) -> None:
    """apply on what 0.5.23's parser returns: dsa_* filled, SGLANG_DSA_… set, idempotent, never overwrites."""
    env: dict[str, str] = {NSA_ENV: "4096"}  # 0.5.23 does not read this name
    before = dict(vars(args))
    applied = apply(args, device="b200", env=env, sglang_version="0.5.23")
    assert (args.dsa_prefill_backend, args.dsa_decode_backend, args.kv_cache_dtype, args.page_size) == \
        ("flashmla_kv", "flashmla_kv", "fp8_e4m3", 64)  # the explicit decode side kept; fp8 pairs it off trtllm
    assert not hasattr(args, "nsa_prefill_backend") and args.attention_backend is None
    assert env == {NSA_ENV: "4096", DSA_ENV: "4096"} and applied.env_set == {DSA_ENV: "4096"}
    assert applied.decision.dense_attn_kv_len_threshold == 4096 and applied.release.version == "0.5.23"
    assert applied.decision.heads_per_rank == 128  # --attn-dp-size 8 with --tp-size 8: attention TP 1
    changed = {k for k in vars(args) if vars(args)[k] != before.get(k)}
    assert changed == {"dsa_prefill_backend", "kv_cache_dtype", "page_size"}
    snapshot, env_snapshot = dict(vars(args)), dict(env)
    second = apply(args, device="b200", env=env, sglang_version="0.5.23")
    assert not second.changed and dict(vars(args)) == snapshot and env == env_snapshot


def test_apply_on_a_0_5_23_shaped_namespace() -> None:
    from .sglang_args import sglang_0_5_23_parser

    args = sglang_0_5_23_parser().parse_args(["--model-path", DS, "--tp-size", "8", "--attn-dp-size", "8",
                                              "--dsa-decode-backend", "flashmla_kv"])
    _check_0_5_23_namespace(args)


def test_apply_on_the_namespace_0_5_23s_real_parser_returns() -> None:
    """Opt-in: the values sglang 0.5.23's own parser returns (scripts/sglang_oracle side environment)."""
    import os
    import sys
    from pathlib import Path
    from types import SimpleNamespace

    oracle = Path(__file__).resolve().parents[2] / "scripts" / "sglang_oracle"
    root = os.environ.get("NSA_POLICY_SGLANG_ENVS")
    if not root or not (Path(root) / "envs.json").is_file():
        pytest.skip("opt-in: NSA_POLICY_SGLANG_ENVS (side environments from scripts/sglang_oracle/build_envs.sh)")
    sys.path.insert(0, str(oracle))
    try:
        from run import SideEnvs
    finally:
        sys.path.remove(str(oracle))
    envs = SideEnvs.find(root)
    if envs is None or "0.5.23" not in envs.releases:
        pytest.skip("no sglang 0.5.23 side environment")
    [parsed] = envs.parse("0.5.23", [["--model-path", DS, "--tp-size", "8", "--attn-dp-size", "8",
                                      "--dsa-decode-backend", "flashmla_kv"]])
    assert parsed["accepted"], parsed["error"]
    _check_0_5_23_namespace(SimpleNamespace(**parsed["values"]))
