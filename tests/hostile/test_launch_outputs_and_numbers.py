"""Issue 23, E, F and H: outputs that would overwrite inputs, launch overriding what the command gives or
writing a command the release refuses, decision logs for vLLM, and numbers no reader converts (exit 2, never 3)."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nsa_policy import InputError
from nsa_policy.engines.sglang.launch import plan_launch
from nsa_policy.engines.vllm.launch import plan_vllm_launch

DS = "deepseek-ai/DeepSeek-V3.2"
SERVER = ["python", "-m", "sglang.launch_server", "--model-path", DS]
QUIET = logging.getLogger("nsa_policy.tests.hostile.outputs")
QUIET.propagate = False
QUIET.addHandler(logging.NullHandler())
CLEAN = {"SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD": None, "SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD": None,
         "LOCAL_RANK": None, "CUDA_VISIBLE_DEVICES": None}
BIG = "1" * 5000


def cli(*args: str, env: dict | None = None):
    from nsa_policy.cli import app

    return CliRunner().invoke(app, list(args), env={**CLEAN, **(env or {})})


# E: outputs that overwrite inputs -----------------------------------------------------------------------
def test_lint_output_never_replaces_a_file_lint_read(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("requirements.txt").write_text("sglang==0.5.10\n")
    Path("common.sh").write_text("B=trtllm\n")
    Path("run.sh").write_text("#!/bin/bash\n. ./common.sh\npython -m sglang.launch_server --model-path m "
                              "--nsa-prefill-backend $B\n")
    for target in ("requirements.txt", "common.sh"):
        before = Path(target).read_text()
        result = cli("lint", "run.sh", "--output", target)
        assert result.exit_code == 2 and "--output" in result.output, result.output
        assert Path(target).read_text() == before


def test_a_decision_log_never_appends_to_the_models_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m").mkdir()
    config = tmp_path / "m" / "config.json"
    config.write_text('{"architectures": ["DeepseekV32ForCausalLM"], "index_topk": 2048, "num_attention_heads": 128}')
    before = config.read_text()
    result = cli("resolve", "--device", "h200", "--model", "./m", "--log-decisions", "m/config.json")
    assert result.exit_code == 2 and "--log-decisions" in result.output
    assert config.read_text() == before


# F: launch keeps what the command gives ---------------------------------------------------------------------
@pytest.mark.parametrize("given", [
    ["--attention_backend", "FLASHMLA_SPARSE", "--kv_cache_dtype", "bfloat16", "--block_size", "64"],
    ["--attention-back", "FLASHMLA_SPARSE", "--kv-cache-dt", "bfloat16", "--block", "64"],
])
def test_vllm_launch_never_overrides_underscores_or_abbreviations(given):
    plan = plan_vllm_launch(["vllm", "serve", DS, *given], device="b200", env={}, vllm_version="0.33.0")
    assert plan.added_flags == [] and plan.argv == ["vllm", "serve", DS, *given]


def test_vllm_launch_reads_config_merge_keys(tmp_path):
    cfg = tmp_path / "vllm.yaml"
    cfg.write_text("base: &base\n  attention-backend: FLASHMLA_SPARSE\n  kv-cache-dtype: bfloat16\n  block-size: 64\n"
                   f"<<: *base\nmodel: {DS}\n")
    plan = plan_vllm_launch(["vllm", "serve", "--config", str(cfg)], device="b200", env={}, vllm_version="0.33.0")
    assert plan.added_flags == []


def test_sglang_config_values_count_as_given(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("kv_cache_dtype: bf16\nnsa-prefill-backend: flashmla_sparse\nnsa_decode_backend: flashmla_kv\n"
                   "page-size: 64\n")
    plan = plan_launch(SERVER + ["--config", str(cfg)], device="b200", env={}, sglang_version="0.5.10", logger=QUIET)
    added = " ".join(plan.added_flags)
    for flag in ("--kv-cache-dtype", "--nsa-prefill-backend", "--nsa-decode-backend", "--page-size"):
        assert flag not in added, plan.added_flags
    assert any("read --config" in n for n in plan.notes)


def test_a_respelt_legacy_switch_carries_the_mode_it_implied():
    plan = plan_launch(SERVER + ["--tp-size", "8", "--enable-nsa-prefill-context-parallel"], device="b200", env={},
                       sglang_version="0.5.16", logger=QUIET)
    argv = list(plan.argv)
    assert "--enable-prefill-cp" in argv and argv[argv.index("--cp-strategy") + 1] == "interleave"
    assert not plan.decision.errors
    from nsa_policy import resolve

    # the project's own 0.5.16 bundle accepts the final command (it refused it without --cp-strategy)
    final = {"tp_size": 8, "enable_prefill_cp": True, "cp_strategy": "interleave"}
    assert not resolve(final, device="b200", model=DS, policy="sglang-0.5.16", env={}, raise_on_error=False).errors


@pytest.mark.parametrize("release", ["0.5.13", "0.5.19", "0.5.23"])
def test_an_abbreviation_of_a_spelling_the_release_lacks_is_refused(release):
    with pytest.raises(InputError) as exc:
        plan_launch(SERVER + ["--nsa-prefill", "trtllm"], device="b200", env={}, sglang_version=release, logger=QUIET)
    assert exc.value.field == "--nsa-prefill"


# H: decision logs, sglang-only flags, numbers ------------------------------------------------------------------
def test_vllm_launch_and_resolve_write_the_decision_log(tmp_path):
    log = tmp_path / "d.log"
    r = cli("launch", "--device", "h200", "--dry-run", "--log-decisions", str(log), "--", "vllm", "serve", DS)
    assert r.exit_code == 0, r.output
    r = cli("resolve", "--engine", "vllm", "--device", "h200", "--model", DS, "--log-decisions", str(log))
    assert r.exit_code == 0, r.output
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [x["origin"] for x in lines] == ["cli.launch", "cli.resolve"]
    for argv in (["launch", "--device", "h200", "--dry-run", "--log-decisions", str(tmp_path / "no" / "d.log"), "--",
                  "vllm", "serve", DS],
                 ["resolve", "--engine", "vllm", "--device", "h200", "--model", DS, "--log-decisions",
                  str(tmp_path / "no" / "d.log")]):
        r = cli(*argv)
        assert r.exit_code == 2 and "--log-decisions" in r.output


@pytest.mark.parametrize("extra", [["--package", "flashinfer-python=0.6.7"], ["--nsa-prefill-backend", "trtllm"],
                                   ["--enable-hisparse"]])
def test_resolve_engine_vllm_refuses_what_it_does_not_read(extra):
    r = cli("resolve", "--engine", "vllm", "--device", "h200", "--model", DS, *extra)
    assert r.exit_code == 2 and extra[0] in r.output


def _model_dir(tmp_path: Path, body: str) -> str:
    (tmp_path / "m").mkdir(exist_ok=True)
    (tmp_path / "m" / "config.json").write_text(body)
    return str(tmp_path / "m")


@pytest.mark.parametrize("argv,env", [
    (["--device", "auto", "--model", DS], {"LOCAL_RANK": "²"}),
    (["--device", "auto:²", "--model", DS], {}),
    (["--device", "h200", "--model", DS, "--package", f"flashinfer-python=0.{BIG}"], {}),
])
def test_numbers_no_reader_converts_are_exit_2(argv, env):
    r = cli("resolve", *argv, env=env)
    assert r.exit_code == 2, r.output
    assert "internal error" not in r.output


@pytest.mark.parametrize("body", ['{"architectures": {"a": 1}, "index_topk": 2048}',
                                  '{"architectures": ["DeepseekV32ForCausalLM"], "index_topk": ' + BIG + "}"])
def test_bad_model_configs_are_exit_2(tmp_path, body):
    r = cli("resolve", "--device", "h200", "--model", _model_dir(tmp_path, body))
    assert r.exit_code == 2 and "internal error" not in r.output, r.output
    assert "config.json" in r.output


def test_a_huge_cuda_visible_devices_entry_is_an_input_error():
    from nsa_policy.integration.discovery import read_node

    class OneGpu:  # NVML with one H200
        def nvmlInit(self): pass
        def nvmlShutdown(self): pass
        def nvmlDeviceGetCount(self): return 1
        def nvmlDeviceGetHandleByIndex(self, i): return i
        def nvmlDeviceGetName(self, h): return b"NVIDIA H200"
        def nvmlDeviceGetCudaComputeCapability(self, h): return (9, 0)
        def nvmlSystemGetDriverVersion(self): return b"575.0"

    for cvd in (BIG, "²"):
        with pytest.raises(InputError) as exc:
            read_node(OneGpu(), env={"CUDA_VISIBLE_DEVICES": cvd})
        assert exc.value.field == "CUDA_VISIBLE_DEVICES"


def test_a_rule_file_with_a_huge_integer_is_a_rule_file_error(tmp_path):
    from nsa_policy.base.errors import NsaPolicyError
    from nsa_policy.core.bundle import get_bundle

    folder = tmp_path / "site"
    folder.mkdir()
    (folder / "bundle.yaml").write_text("name: site\ndescription: big\nextends: default\n")
    (folder / "50-page-size.yaml").write_text("stage: page_size\nrules:\n  - id: site.page\n    description: x\n"
                                              f"    when: {{device.vendor: nvidia}}\n    set: {{page_size: {BIG}}}\n")
    with pytest.raises(NsaPolicyError) as exc:
        get_bundle(str(folder))
    assert "50-page-size.yaml" in str(exc.value)


def test_ensure_agreement_without_numpy_is_an_agreement_error(monkeypatch):
    """torch's object collectives raise a bare RuntimeError without NumPy: it is said as one error of ours."""
    torch_dist = pytest.importorskip("torch.distributed")
    from nsa_policy import resolve
    from nsa_policy.integration.distributed import AgreementError, ensure_agreement

    def no_numpy(*a, **k):
        raise RuntimeError("Numpy is not available")

    monkeypatch.setattr(torch_dist, "is_available", lambda: True)
    monkeypatch.setattr(torch_dist, "is_initialized", lambda: True)
    monkeypatch.setattr(torch_dist, "get_world_size", lambda group=None: 2)
    monkeypatch.setattr(torch_dist, "get_rank", lambda group=None: 0)
    monkeypatch.setattr(torch_dist, "all_gather_object", no_numpy)
    with pytest.raises(AgreementError, match="NumPy"):
        ensure_agreement(resolve({}, device="h200", model=DS, env={}))
