"""Extractors: where each argument of each launch was written, and how values are resolved."""
from __future__ import annotations

import textwrap

from nsa_policy.lint import lint_paths
from nsa_policy.lint.runner import LintReport, scan_file


def launches(tmp_path, name: str, text: str, extra: dict | None = None):
    for rel, body in (extra or {}).items():
        (tmp_path / rel).write_text(textwrap.dedent(body))
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    kinds = {"sh": "shell", "yaml": "yaml", "yml": "yaml", "json": "json", "toml": "toml", "env": "env"}
    kind = kinds.get(name.rsplit(".", 1)[-1], "dockerfile")
    return scan_file(str(p), kind, LintReport()).launches


def args(launch) -> list[tuple[str, object, int]]:
    """(spelling, value, line) of each argument; and each column must point at the spelling itself."""
    with open(launch.path) as fh:
        lines = fh.read().splitlines()
    for a in launch.args:
        at = lines[a.loc.line - 1][a.loc.col - 1:]
        assert at.lstrip("\"'").startswith(a.spelling), (a, at)
    return [(a.spelling, a.value, a.loc.line) for a in launch.args]


def test_shell_continuations_quotes_defaults_and_redirects(tmp_path) -> None:
    [la] = launches(tmp_path, "run.sh", """\
        #!/bin/sh
        KV="${KV:-fp8_e4m3}"
        B=flashmla_kv; export SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD=${T:=2048}
        CUDA_VISIBLE_DEVICES=0,1 nohup python3 -m sglang.launch_server --model-path 'deepseek-ai/DeepSeek-V3.2' \\
            --kv-cache-dtype=$KV --nsa-decode-backend "${B}" \\
            --enable-dp-attention --tp-size $TP >log 2>&1 &
        """)
    assert args(la) == [
        ("--model-path", "deepseek-ai/DeepSeek-V3.2", 4),
        ("--kv-cache-dtype", "fp8_e4m3", 5),
        ("--nsa-decode-backend", "flashmla_kv", 5),
        ("--enable-dp-attention", True, 6),
        ("--tp-size", "$TP", 6),
    ]
    assert la.args[-1].unresolved == "TP"
    assert la.loc.line == 4 and la.loc.col == 26  # the command word (nohup), after the prefix assignment
    assert la.env["SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD"].value == "2048"
    assert la.env["CUDA_VISIBLE_DEVICES"].value == "0,1"


def test_shell_sources_env_file_and_sees_set_a(tmp_path) -> None:
    [la] = launches(tmp_path, "run.sh", """\
        set -a
        . ./gpu.env
        set +a
        sglang serve --model-path deepseek-ai/DeepSeek-V3.2 --nsa-prefill-backend $PREFILL
        """, {"gpu.env": "PREFILL=trtllm\nSGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD=131072\n"})
    assert la.args[-1].value == "trtllm"
    ev = la.env["SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD"]
    assert ev.value == "131072" and ev.loc.path.endswith("gpu.env") and ev.loc.line == 2


def test_kubernetes_command_args_env_and_var_refs(tmp_path) -> None:
    [la] = launches(tmp_path, "dep.yaml", """\
        spec:
          template:
            spec:
              affinity:
                nodeAffinity:
                  requiredDuringSchedulingIgnoredDuringExecution:
                    nodeSelectorTerms:
                      - matchExpressions:
                          - key: nvidia.com/gpu.product
                            operator: In
                            values: [NVIDIA-B200, NVIDIA-H200]
              containers:
                - name: s
                  command: [python3, -m, sglang.launch_server]
                  args: ["--model-path", "deepseek-ai/DeepSeek-V3.2", "--nsa-prefill-backend", "$(BACKEND)"]
                  env:
                    - {name: BACKEND, value: trtllm}
        """)
    assert la.kind == "kubernetes"
    assert args(la) == [("--model-path", "deepseek-ai/DeepSeek-V3.2", 15),
                        ("--nsa-prefill-backend", "trtllm", 15)]
    assert [(h.value, h.loc.line) for h in la.hints if h.key == "device"] == [("NVIDIA-B200", 11), ("NVIDIA-H200", 11)]


def test_sh_c_string_inside_a_manifest(tmp_path) -> None:
    [la] = launches(tmp_path, "pod.yaml", """\
        containers:
          - name: s
            command:
              - /bin/bash
              - -c
              - |
                pip list
                exec python3 -m sglang.launch_server \\
                  --model-path deepseek-ai/DeepSeek-V3.2 --kv-cache-dtype fp8_e4m3
        """)
    assert args(la) == [("--model-path", "deepseek-ai/DeepSeek-V3.2", 9), ("--kv-cache-dtype", "fp8_e4m3", 9)]


def test_compose_string_command_env_file_and_dotenv_interpolation(tmp_path) -> None:
    [la] = launches(tmp_path, "docker-compose.yml", """\
        services:
          s:
            env_file: [sglang.env]
            command: python3 -m sglang.launch_server --model-path ${MODEL} --tp ${TP:-8}
        """, {".env": "MODEL=zai-org/GLM-5\n", "sglang.env": "SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD=4096\n"})
    assert args(la) == [("--model-path", "zai-org/GLM-5", 4), ("--tp", "8", 4)]
    assert la.env["SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD"].value == "4096"


def test_dockerfile_shell_form_with_env_and_stages(tmp_path) -> None:
    first, la = launches(tmp_path, "Dockerfile", """\
        FROM python:3.11 AS build
        CMD ["python3", "-m", "sglang.launch_server", "--model-path", "ignored/first-stage"]
        FROM lmsysorg/sglang:v0.5.10
        ARG BACKEND=fa3
        ENV MODEL=deepseek-ai/DeepSeek-V3.2 \\
            SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD=2048
        CMD python3 -m sglang.launch_server --model-path $MODEL \\
            --nsa-decode-backend ${BACKEND}
        """)
    assert args(first) == [("--model-path", "ignored/first-stage", 2)]  # each stage can be a build target
    assert args(la) == [("--model-path", "deepseek-ai/DeepSeek-V3.2", 7), ("--nsa-decode-backend", "fa3", 8)]
    assert la.env["SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD"].loc.line == 6


def test_toml_and_json_keys_located(tmp_path) -> None:
    [la] = launches(tmp_path, "s.toml", """\
        title = "x"
        [sglang.server]
        "model-path" = "deepseek-ai/DeepSeek-V3.2"
        kv_cache_dtype   =   "bf16"
        """)
    assert args(la) == [("model-path", "deepseek-ai/DeepSeek-V3.2", 3), ("kv_cache_dtype", "bf16", 4)]
    [la] = launches(tmp_path, "s.json", '{"a": [1, {"kv-cache-dtype": "fp8_e4m3",\n  "nsa-decode-backend": "trtllm"}]}')
    assert args(la) == [("kv-cache-dtype", "fp8_e4m3", 1), ("nsa-decode-backend", "trtllm", 2)]


def test_unrelated_yaml_is_not_a_launch(tmp_path) -> None:
    assert launches(tmp_path, "app.yaml", "page_size: 20\nport: 8080\nmodel: gpt\n") == []
    assert launches(tmp_path, "ci.yaml", "steps:\n  - run: pip install sglang\n") == []


def test_helm_template_is_skipped_and_said(tmp_path) -> None:
    (tmp_path / "t.yaml").write_text("args:\n{{- range .Values.sglang.args }}\n  - {{ . }}\n{{- end }}\n")
    report = lint_paths([str(tmp_path)])
    assert report.diagnostics == [] and report.templates_skipped == [str(tmp_path / "t.yaml")]


def test_launch_inside_a_shell_function(tmp_path) -> None:
    [la] = launches(tmp_path, "f.sh", """\
        start() {
          local B=trtllm
          python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 --nsa-prefill-backend $B
        }
        if [ -n "$X" ]; then start; fi
        """)
    assert args(la) == [("--model-path", "deepseek-ai/DeepSeek-V3.2", 3), ("--nsa-prefill-backend", "trtllm", 3)]


def test_non_utf8_file_is_one_diagnostic(tmp_path) -> None:
    (tmp_path / "bin.json").write_bytes(b'\xff\xfe{"a": 1}')
    (tmp_path / "ok.env").write_text("SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD=131072\n")
    report = lint_paths([str(tmp_path)])
    assert sorted((d.code, d.loc.path.rsplit("/", 1)[-1]) for d in report.diagnostics if d.level != "info") == [
        ("NSA202", "ok.env"), ("NSA404", "bin.json")]
    assert "not UTF-8" in next(d.message for d in report.diagnostics if d.code == "NSA404")


def test_server_config_needs_more_than_one_key(tmp_path) -> None:
    assert launches(tmp_path, "rule.yaml", "set: {kv_cache_dtype: fp8_e4m3}\n") == []
    assert launches(tmp_path, "result.json", '{"kv_cache_dtype": "bfloat16", "page_size": 64, "a": 1, "b": 2, "c": 3}') == []
    assert len(launches(tmp_path, "cfg.yaml", "kv-cache-dtype: bfloat16\npage-size: 64\n")) == 1
