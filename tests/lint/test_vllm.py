"""lint finds `vllm serve` launches (scripts, Dockerfiles, Kubernetes, compose) and checks each with the
vLLM bundles: vllm-default by default, vllm-0.33 when asked; VLLM_ATTENTION_BACKEND is reported where it is set."""
from __future__ import annotations

from pathlib import Path

from nsa_policy.engines.vllm.lint import launch_start as vllm_launch_start
from nsa_policy.engines.vllm.lint import parse_vllm_cli
from nsa_policy.lint import LintOptions, lint_paths
from nsa_policy.lint.report import Location

from .helpers import DATA, findings

VLLM = DATA / "vllm"
BAD = VLLM / "bad"

EXPECTED = {
    # B200: VLLM_ATTENTION_BACKEND exported (ignored since 0.15); ROCM_AITER_MLA_SPARSE forced on CUDA,
    # which vLLM accepts and then crashes on (default refuses); a second launch with a misspelt backend.
    "scripts/serve_b200.sh": [("NSA050", 10), ("NSA153", 6), ("NSA252", 3)],
    # H200 (comment): FA3 sparse forced with DCP 2 - vLLM's own validation raises.
    "docker/Dockerfile": [("NSA150", 8)],
    # RTX PRO 6000 (nodeSelector): bf16 KV has no sparse path on sm120 (vLLM stores fp8_ds_mla);
    # no dense short prefill there; VLLM_ATTENTION_BACKEND in the container env.
    "k8s/deployment.yaml": [("NSA153", 24), ("NSA250", 24), ("NSA251", 19), ("NSA252", 29)],
    # H200 (comment), GLM-5: the mxfp4 indexer cache needs SM10x.
    "compose/docker-compose.yaml": [("NSA152", 11)],
    # The vllm/vllm-openai image's ENTRYPOINT ["vllm", "serve"] with Kubernetes `args` only: H200
    # (nodeSelector), GLM-5, FA3 sparse forced with DCP 2.
    "image/deployment.yaml": [("NSA150", 25)],
    # The same image in compose (`command` = the arguments): bf16 KV on GB10 (sm121).
    "image/compose.yaml": [("NSA153", 7), ("NSA250", 7), ("NSA251", 7)],
}


def test_bad_files_give_exactly_the_expected_findings():
    report = lint_paths([str(BAD)])
    assert report.launches == 7
    for rel, expected in EXPECTED.items():
        assert findings(report, BAD / rel) == sorted(expected), rel
    assert {Path(d.loc.path).relative_to(BAD).as_posix() for d in report.diagnostics} == set(EXPECTED)


def test_clean_twins_are_clean():
    report = lint_paths([str(VLLM / "clean")])
    assert report.launches == 2
    assert report.diagnostics == []


def test_compat_bundle_warns_where_default_refuses():
    report = lint_paths([str(BAD / "scripts" / "serve_b200.sh")], LintOptions(policy="vllm-0.33", policy_explicit=True))
    codes = findings(report)
    assert ("NSA350", 6) in codes and ("NSA153", 6) not in codes
    assert all(d.level != "error" or d.code == "NSA050" for d in report.diagnostics)


def test_finding_carries_alternatives_and_rule():
    report = lint_paths([str(BAD / "docker" / "Dockerfile")])
    (d,) = report.diagnostics
    assert d.alternatives == ("FLASHMLA_SPARSE",)
    assert d.loc.col == 6 and d.rule


def test_launch_forms_and_attention_config(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(
        "#!/bin/sh\n"
        "# nsa-policy: device=h200\n"
        "python -m vllm.entrypoints.openai.api_server --model deepseek-ai/DeepSeek-V3.2 \\\n"
        "  -ac '{\"indexer_kv_dtype\": \"mxfp4\"}'\n"
        "/opt/venv/bin/vllm serve deepseek-ai/DeepSeek-V3.2 -tp 8 -dcp 2 --attention-config.backend=FLASH_ATTN_MLA_SPARSE\n")
    report = lint_paths([str(script)])
    assert report.launches == 2
    assert findings(report) == [("NSA150", 5), ("NSA152", 4)]


def test_non_dsa_model_and_unknown_device(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\nvllm serve meta-llama/Llama-3.1-8B-Instruct -tp 1\n"
                      "vllm serve deepseek-ai/DeepSeek-V3.2 --kv-cache-dtype fp8\n")
    report = lint_paths([str(script)])
    codes = findings(report)
    assert ("NSA009", 2) in codes  # not a DSA model: nothing to decide
    assert ("NSA405", 3) in codes  # no device: device-dependent checks skipped, and said so
    assert all(d.level != "error" for d in report.diagnostics)


def test_parse_vllm_cli():
    loc = Location("f", 1, 1)
    words = ["vllm", "serve", "deepseek-ai/DeepSeek-V3.2", "-tp", "8", "--block-size=64", "--enforce-eager",
             "-ac.sparse_mla_force_mqa", "true"]
    start = vllm_launch_start(words)
    assert start == 2
    args = parse_vllm_cli((w, loc, None) for w in words[start:])
    assert [(a.spelling, a.value) for a in args] == [
        ("--model", "deepseek-ai/DeepSeek-V3.2"), ("-tp", "8"), ("--block-size", "64"), ("--enforce-eager", True),
        ("-ac.sparse_mla_force_mqa", "true")]
    assert vllm_launch_start(["vllm", "bench", "serve"]) is None


def test_force_mqa_flag_is_evaluated(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\n# nsa-policy: device=h200\n"
                      "vllm serve deepseek-ai/DeepSeek-V3.2 -ac.sparse_mla_force_mqa true\n"
                      "vllm serve deepseek-ai/DeepSeek-V3.2 -ac.sparse_mla_force_mqa maybe\n")
    report = lint_paths([str(script)])
    assert findings(report) == [("NSA251", 3), ("NSA406", 4)]


def test_vllm_image_with_its_entrypoint_replaced_is_no_launch(tmp_path):
    manifest = tmp_path / "pod.yaml"
    manifest.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  containers:\n"
                        "    - name: tool\n      image: vllm/vllm-openai:v0.33.0\n"
                        "      command: [python3, tool.py]\n      args: [--port, '9000']\n")
    report = lint_paths([str(manifest)], LintOptions(device="sm120"))
    assert report.launches == 0 and report.diagnostics == []
