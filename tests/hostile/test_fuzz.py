"""Fuzzing the surfaces that take untrusted input: only the documented outcomes may come back.

Library: a Decision, or an NsaPolicyError (InputError / PolicyError). CLI: exit 0, 1 or 2, one line
on error, never a traceback. Every example runs under an alarm, so a hang fails instead of blocking.
"""
from __future__ import annotations

import signal
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import nsa_policy
from nsa_policy.base.errors import NsaPolicyError

FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

BACKENDS = ["flashmla_sparse", "flashmla_kv", "fa3", "trtllm", "tilelang", "flashinfer_sparse_mla"]
LOOKALIKES = ["trtllм", "fа3", "flashmla_ѕparse", "ｔｒｔｌｌｍ", "trtllm\u200b", "TRTLLM", " fa3 "]
DEVICES = ["h200", "b200", "rtx-pro-6000", "mi300x", "sm90", "gfx950", "a100", "cpu"]
MODELS = ["deepseek-ai/DeepSeek-V3.2", "zai-org/GLM-5", "Qwen/Qwen3"]
HUGE = [0, -1, 1, 64, 2**31, 10**30, -(10**30)]

text = st.text(max_size=40)
names = st.one_of(st.sampled_from(BACKENDS + LOOKALIKES), text)
scalars = st.one_of(st.none(), st.booleans(), st.sampled_from(HUGE), st.integers(), st.floats(allow_nan=True), text)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(text, inner, max_size=3)), max_leaves=8)


@contextmanager
def alarm(seconds: int = 10):
    def boom(signum, frame):
        raise TimeoutError(f"no answer within {seconds} s")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


CONFIG_KEYS = ["kv_cache_dtype", "nsa_prefill_backend", "dsa_decode_backend", "tp_size", "dp_size",
               "enable_dp_attention", "page_size", "dense_attn_kv_len_threshold", "quantization",
               "enable_hisparse", "speculative_eagle_topk", "dcp_size"]


@FUZZ
@given(config=st.dictionaries(st.one_of(st.sampled_from(CONFIG_KEYS), text), st.one_of(names, values), max_size=5),
       device=st.one_of(st.sampled_from(DEVICES + LOOKALIKES), text),
       model=st.one_of(st.sampled_from(MODELS), text,
                       st.fixed_dictionaries({"architectures": values, "index_topk": values,
                                              "num_attention_heads": values})),
       env=st.dictionaries(st.sampled_from(["SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD",
                                            "SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD", "SGLANG_USE_AITER"]),
                           st.one_of(text, st.sampled_from(["2048", "-5", "1e9", "99999999999999999999"])),
                           max_size=2))
def test_library_answers_or_raises_a_policy_error(config, device, model, env):
    if device == "auto":
        device = "h200"  # NVML is not the subject here
    with alarm():
        try:
            decision = nsa_policy.resolve(config, device=device, model=model, env=env)
        except NsaPolicyError:
            return
    assert decision.policy


FLAG_VALUES = {
    "--kv-cache-dtype": st.one_of(st.sampled_from(["auto", "bf16", "fp8_e4m3", "fp8_e5m2"]), text),
    "--dsa-prefill-backend": names, "--dsa-decode-backend": names,
    "--tp-size": st.one_of(st.sampled_from([str(v) for v in HUGE]), text),
    "--page-size": st.one_of(st.sampled_from([str(v) for v in HUGE]), text),
    "--dense-attn-kv-len-threshold": st.one_of(st.sampled_from([str(v) for v in HUGE]), text),
    "--package": st.one_of(st.sampled_from(["flashinfer-python=0.6.7+cu130", "FlashInfer_Python=0.6.13rc1",
                                            "foo=bar", "flashinfer-python=garbage", "flashinfer-python==0.6.13"]),
                           text),
    "--device": st.one_of(st.sampled_from(DEVICES + LOOKALIKES), text),
}


@FUZZ
@given(flags=st.dictionaries(st.sampled_from(sorted(FLAG_VALUES)), st.just(None), min_size=1, max_size=4).flatmap(
    lambda chosen: st.fixed_dictionaries({flag: FLAG_VALUES[flag] for flag in chosen})))
def test_resolve_flags_exit_0_1_or_2(flags):
    from nsa_policy.cli import app

    argv = ["resolve", "--model", "deepseek-ai/DeepSeek-V3.2"]
    if "--device" not in flags:
        argv += ["--device", "b200"]
    for flag, value in flags.items():
        if value.startswith("-"):
            argv.append(f"{flag}={value}")
        else:
            argv += [flag, value]
    with alarm():
        result = CliRunner().invoke(app, argv)
    assert result.exit_code in (0, 1, 2), (argv, result.exit_code, result.output)
    assert "Traceback" not in result.output, argv


@FUZZ
@given(body=st.one_of(st.binary(max_size=300), text.map(str.encode),
                      st.sampled_from([b"stage: page_size\nrules:\n  - id: x\n    set: {page_size: sixty-four}\n",
                                       b"stage: page_size\nrules:\n  - id: x\n    when: {device.class: {in: [[a]]}}\n",
                                       b"stage: nope\n", b"rules: 5\n", b"- - - -\n", b"{" * 200])))
def test_rule_files_exit_0_1_or_2(tmp_path_factory, body):
    from nsa_policy.cli import app

    folder = tmp_path_factory.mktemp("site")
    (folder / "bundle.yaml").write_text("name: site\ndescription: fuzz\nextends: default\n")
    (folder / "50-page-size.yaml").write_bytes(body)
    with alarm():
        result = CliRunner().invoke(app, ["resolve", "--device", "h200", "--model", "deepseek-ai/DeepSeek-V3.2",
                                          "--policy", str(folder)])
    assert result.exit_code in (0, 1, 2), (body, result.output)
    assert "Traceback" not in result.output and "internal error" not in result.output, (body, result.output)


LINT_NAMES = ["serve.sh", "values.yaml", "config.json", "server.toml", "sglang.env", "Dockerfile"]


@FUZZ
@given(name=st.sampled_from(LINT_NAMES),
       body=st.one_of(st.binary(max_size=400), text.map(str.encode),
                      st.sampled_from([b"#!/bin/sh\npython -m sglang.launch_server --kv-cache-dtype \xff\n",
                                       b"sglang: " + b"[" * 500, b'{"sglang": ' + b"[" * 500,
                                       b"args: [--nsa-prefill-backend, trtll\xd0\xbc]\n"])))
def test_lint_inputs_never_crash(tmp_path_factory, name, body):
    from nsa_policy.cli import app

    folder = tmp_path_factory.mktemp("lint")
    target = folder / name
    target.write_bytes(b"#!/bin/bash\n" + body if name.endswith(".sh") else body)
    before = target.read_bytes()
    with alarm():
        result = CliRunner().invoke(app, ["lint", str(target), "--format", "json"])
    assert result.exit_code in (0, 1, 2), (name, body, result.output)
    assert "Traceback" not in result.output and "internal error" not in result.output, (name, body, result.output)
    assert target.read_bytes() == before  # lint never writes its inputs


@pytest.mark.parametrize("literal", ["sixty-four", "'64'", "64.0", "true"])
def test_a_bundle_page_size_must_be_an_integer(tmp_path, literal):
    """A custom bundle may not set page_size to a string (resolve used to exit 0, launch to emit it)."""
    from nsa_policy.base.errors import RuleFileError
    from nsa_policy.core.bundle import get_bundle

    folder = tmp_path / "site"
    folder.mkdir()
    (folder / "bundle.yaml").write_text("name: site\ndescription: typed sets\nextends: default\n")
    (folder / "50-page-size.yaml").write_text(
        "stage: page_size\nrules:\n  - id: site.page\n    description: x\n    when: {device.vendor: nvidia}\n"
        f"    set: {{page_size: {literal}}}\n")
    with pytest.raises(RuleFileError) as info:
        get_bundle(str(folder))
    assert "50-page-size.yaml:" in str(info.value) and "page_size" in str(info.value)
