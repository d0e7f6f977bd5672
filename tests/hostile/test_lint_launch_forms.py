"""Issue 23, A and B: launch forms lint used to miss (a wrong backend reported clean) or misread (false errors),
each as a real deployment file; and a fuzzer over the extractors: every generated launch is found, or
reported as NSA409 (lint cannot see what it runs)."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nsa_policy.lint import LintOptions, lint_paths

MODEL = "deepseek-ai/DeepSeek-V3.2"
# On B200 an fp8 KV cache with trtllm prefill and flashmla_kv decode is an error (NSA103): a form that hides
# one of these flags from lint reads as clean.
KV, PREFILL, DECODE = "--kv-cache-dtype fp8_e4m3", "--nsa-prefill-backend trtllm", "--nsa-decode-backend flashmla_kv"
ARGS = f"--model-path {MODEL} {KV} {PREFILL} {DECODE}"
WRONG = "NSA103"


def lint_codes(root: Path, *names: str, **opts) -> list[tuple[str, str, int]]:
    report = lint_paths([str(root / n) for n in names] if names else [str(root)], LintOptions(**opts))
    return [(d.code, Path(d.loc.path).name, d.loc.line) for d in report.diagnostics]


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text).lstrip("\n"))
    return root


SGLANG_FORMS = {
    "abbreviated flags": {"serve.sh": f"""
        #!/bin/bash
        # nsa-policy: device=b200
        python -m sglang.launch_server --model-path {MODEL} --kv-cache-dt fp8_e4m3 --nsa-prefill-back trtllm \\
          --dsa-decode flashmla_kv
        """},
    "bash -lc": {"serve.sh": f"""
        #!/bin/bash
        # nsa-policy: device=b200
        exec bash -lc "python -m sglang.launch_server {ARGS}"
        """},
    "sh -xc": {"serve.sh": f"""
        #!/bin/sh
        # nsa-policy: device=b200
        sh -xc 'python3 -m sglang.launch_server {ARGS}'
        """},
    "bash -c --": {"serve.sh": f"""
        #!/bin/bash
        # nsa-policy: device=b200
        bash -c -- "python -m sglang.launch_server {ARGS}"
        """},
    "Dockerfile CMD bash -c": {"Dockerfile": f"""
        FROM lmsysorg/sglang:v0.5.10
        # nsa-policy: device=b200
        CMD ["bash", "-c", "python3 -m sglang.launch_server {ARGS}"]
        """},
    "flags in a variable": {"serve.sh": f"""
        #!/bin/bash
        # nsa-policy: device=b200
        EXTRA='{PREFILL} {DECODE}'
        python -m sglang.launch_server --model-path {MODEL} {KV} $EXTRA
        """},
    "the command in a variable": {"serve.sh": f"""
        #!/bin/bash
        # nsa-policy: device=b200
        CMD="python -m sglang.launch_server {ARGS}"
        $CMD
        """},
    "compose ${EXTRA_ARGS} from .env": {
        ".env": f"EXTRA_ARGS={PREFILL} {DECODE}\n",
        "compose.yaml": f"""
        # nsa-policy: device=b200
        services:
          llm:
            image: lmsysorg/sglang:v0.5.10
            command: python3 -m sglang.launch_server --model-path {MODEL} {KV} ${{EXTRA_ARGS}}
        """},
    "compose $$BACKEND with environment": {"compose.yaml": f"""
        # nsa-policy: device=b200
        services:
          llm:
            image: lmsysorg/sglang:v0.5.10
            environment:
              BACKEND: trtllm
            command: sh -c "python3 -m sglang.launch_server --model-path {MODEL} {KV} --nsa-prefill-backend $$BACKEND {DECODE}"
        """},
    "bash array": {"serve.sh": f"""
        #!/bin/bash
        # nsa-policy: device=b200
        ARGS=(--model-path {MODEL} {KV})
        ARGS+=({PREFILL} {DECODE})
        python -m sglang.launch_server "${{ARGS[@]}}"
        """},
    "python3 -msglang.launch_server": {"serve.sh": f"""
        #!/bin/bash
        # nsa-policy: device=b200
        python3 -msglang.launch_server {ARGS}
        """},
    "YAML escapes": {"pod.yaml": f"""
        # nsa-policy: device=b200
        apiVersion: v1
        kind: Pod
        metadata: {{name: llm}}
        spec:
          containers:
            - name: llm
              image: lmsysorg/sglang:v0.5.10
              command: ["python3", "-m", "\\x73glang.launch_server"]
              args: ["--model-path", "{MODEL}", "--kv-cache-dtype", "fp8_e4m3", "--nsa-prefill-backend", "trtllm",
                     "--nsa-decode-backend", "flashmla_kv"]
        """},
    "sglang --config": {
        "cfg.yaml": "kv_cache_dtype: fp8_e4m3\nnsa-prefill-backend: trtllm\nnsa-decode-backend: flashmla_kv\n",
        "serve.sh": f"""
        #!/bin/bash
        # nsa-policy: device=b200
        python -m sglang.launch_server --model-path {MODEL} --config cfg.yaml
        """},
}


@pytest.mark.parametrize("form", sorted(SGLANG_FORMS))
def test_sglang_launch_forms_are_found(tmp_path, form):
    found = lint_codes(write(tmp_path, SGLANG_FORMS[form]))
    assert WRONG in [c for c, _, _ in found], found


VLLM_WRONG = "NSA150"  # FA3 sparse forced with DCP 2 on H200: vLLM's own validation raises
VLLM_FORMS = {
    "underscores": "vllm serve {m} -tp 8 --decode_context_parallel_size 2 --attention_backend FLASH_ATTN_MLA_SPARSE",
    "abbreviation": "vllm serve {m} -tp 8 -dcp 2 --attention-back FLASH_ATTN_MLA_SPARSE",
    "-dcp=2": "vllm serve {m} -tp 8 -dcp=2 --attention-backend=FLASH_ATTN_MLA_SPARSE",
    "model after the flags": "vllm serve -tp 8 -dcp 2 --attention-backend FLASH_ATTN_MLA_SPARSE {m}",
}


@pytest.mark.parametrize("form", sorted(VLLM_FORMS))
def test_vllm_spellings_are_read_as_vllm_reads_them(tmp_path, form):
    write(tmp_path, {"serve.sh": "#!/bin/sh\n# nsa-policy: device=h200\n" + VLLM_FORMS[form].format(m=MODEL) + "\n"})
    assert VLLM_WRONG in [c for c, _, _ in lint_codes(tmp_path)]


def test_an_ambiguous_abbreviation_is_an_error(tmp_path):
    write(tmp_path, {"serve.sh": f"#!/bin/bash\npython -m sglang.launch_server --model-path {MODEL} --nsa-prefill trtllm\n"})
    assert ("NSA401", "serve.sh", 2) in lint_codes(tmp_path)


def test_vllm_config_merge_keys(tmp_path):
    write(tmp_path, {
        "base.yaml": "",
        "vllm.yaml": f"""
        common: &common
          attention-backend: FLASH_ATTN_MLA_SPARSE
          decode-context-parallel-size: 2
        <<: *common
        model: {MODEL}
        tensor-parallel-size: 8
        """,
        "serve.sh": "#!/bin/sh\n# nsa-policy: device=h200\nvllm serve --config vllm.yaml\n"})
    assert VLLM_WRONG in [c for c, _, _ in lint_codes(tmp_path, "serve.sh")]


def test_a_later_pip_pin_names_the_release(tmp_path):
    write(tmp_path, {"Dockerfile": f"""
        FROM lmsysorg/sglang:v0.5.23
        RUN pip install "sglang==0.5.10"
        # nsa-policy: device=b200
        CMD python3 -m sglang.launch_server --model-path {MODEL} --dsa-prefill-backend trtllm
        """})
    found = lint_codes(tmp_path)
    assert ("NSA410", "Dockerfile", 4) in found  # 0.5.10 has no --dsa-* flags


def test_a_permissive_hint_cannot_lower_a_default_error(tmp_path):
    """docs/lint.md's CI command (no --policy): a file naming the shipped permissive bundle keeps default's error."""
    write(tmp_path, {"serve.sh": f"""
        #!/bin/bash
        # nsa-policy: device=b200 policy=sglang-pre-21783
        python -m sglang.launch_server {ARGS}
        """})
    report = lint_paths([str(tmp_path)])
    errors = [d for d in report.diagnostics if d.level == "error"]
    assert any(d.code == "NSA103" for d in errors), [(d.code, d.level) for d in report.diagnostics]


# B: false errors --------------------------------------------------------------------------------------------
def test_escaped_quotes_in_a_json_sh_c_string(tmp_path):
    doc = {"containers": [{"name": "llm", "image": "lmsysorg/sglang:v0.5.10",
                           "command": ["sh", "-c", f'python3 -m sglang.launch_server --model-path "{MODEL}" '
                                                   '--nsa-prefill-backend "flashmla_sparse" '
                                                   '--nsa-decode-backend "flashmla_kv"']}],
           "nsa-policy": {"device": "h200"}}
    (tmp_path / "task.json").write_text(json.dumps(doc, indent=2))
    found = lint_codes(tmp_path)
    assert not [f for f in found if f[0] in ("NSA050", "NSA001", "NSA406")], found
    assert not any("is not a backend" in d.message for d in lint_paths([str(tmp_path)]).diagnostics)


def test_multi_stage_dockerfile_takes_the_final_stage_release(tmp_path):
    write(tmp_path, {"Dockerfile": f"""
        FROM lmsysorg/sglang:v0.5.10 AS old
        RUN echo build tools
        FROM lmsysorg/sglang:v0.5.23
        # nsa-policy: device=h200
        CMD python3 -m sglang.launch_server --model-path {MODEL} --dsa-prefill-backend flashmla_sparse
        """})
    found = lint_codes(tmp_path)
    assert not [f for f in found if f[0] == "NSA410"], found  # 0.5.23 spells it --dsa-*; 0.5.10 would refuse


def test_legacy_prefill_cp_switch_implies_interleave(tmp_path):
    write(tmp_path, {"serve.sh": f"""
        #!/bin/bash
        # nsa-policy: device=b200 sglang=0.5.16
        python -m sglang.launch_server --model-path {MODEL} --tp-size 8 --enable-nsa-prefill-context-parallel
        """})
    found = lint_codes(tmp_path)
    assert not [f for f in found if f[0] == "NSA111"], found
    assert ("NSA412", "serve.sh", 3) in found


# the fuzzer -------------------------------------------------------------------------------------------------
FUZZ = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# how the prefill flag is written: (setup lines, the words in the launch, whether lint can see it)
HIDE = {
    "inline": ([], PREFILL, True),
    "equals": ([], "--nsa-prefill-backend=trtllm", True),
    "abbreviated": ([], "--nsa-prefill-b trtllm", True),
    "underscores": ([], "--nsa_prefill_backend trtllm", True),
    "variable": (["EXTRA='--nsa-prefill-backend trtllm'"], "$EXTRA", True),
    "default": ([], "${EXTRA:---nsa-prefill-backend=trtllm}", True),
    "array": (["A=(--nsa-prefill-backend trtllm)"], '"${A[@]}"', True),
    "value variable": (["B=trtllm"], "--nsa-prefill-backend $B", True),
    "unset variable": ([], "$EXTRA_ARGS", False),
    "positional": ([], '"$@"', False),
}
HEADS = ["python -m sglang.launch_server", "python3 -msglang.launch_server", "python3 -u -m sglang.launch_server",
         "/opt/venv/bin/python -m sglang.launch_server", "sglang serve", "exec python -m sglang.launch_server",
         "env A=1 python -m sglang.launch_server", "nohup python -m sglang.launch_server"]
SHELLS = ["", "sh -c", "bash -lc", "sh -xc", "bash -c --", "/bin/bash -ec"]
CONTAINERS = ["script", "dockerfile-shell", "dockerfile-exec", "compose", "kubernetes"]


def _files(container: str, setup: list[str], line: str, shell: str) -> dict[str, str]:
    if shell:
        line = f"{shell} '{line}'" if "'" not in line else f'{shell} "{line}"'
    if container == "script":
        return {"serve.sh": "#!/bin/bash\n# nsa-policy: device=b200\n" + "".join(s + "\n" for s in setup) + line + "\n"}
    if container.startswith("dockerfile"):
        inner = "; ".join(setup + [line])
        if container == "dockerfile-exec":
            cmd = json.dumps(["bash", "-c", inner])
        else:
            cmd = inner if not setup else "bash -c " + json.dumps(inner)
        return {"Dockerfile": f"FROM lmsysorg/sglang:v0.5.10\n# nsa-policy: device=b200\nCMD {cmd}\n"}
    script = "; ".join(setup + [line]).replace("$", "$$") if container == "compose" else "; ".join(setup + [line])
    if container == "compose":
        return {"compose.yaml": "# nsa-policy: device=b200\nservices:\n  llm:\n    image: lmsysorg/sglang:v0.5.10\n"
                                f"    command: {json.dumps(['bash', '-c', script])}\n"}
    return {"pod.yaml": "# nsa-policy: device=b200\napiVersion: v1\nkind: Pod\nmetadata: {name: llm}\nspec:\n"
                        "  containers:\n    - name: llm\n      image: lmsysorg/sglang:v0.5.10\n"
                        f"      command: [bash, -c]\n      args: [{json.dumps(script)}]\n"}


@FUZZ
@given(container=st.sampled_from(CONTAINERS), hide=st.sampled_from(sorted(HIDE)), head=st.sampled_from(HEADS),
       shell=st.sampled_from(SHELLS), order=st.permutations([0, 1, 2]))
def test_every_generated_launch_is_found_or_nsa409(tmp_path_factory, container, hide, head, shell, order):
    setup, prefill, visible = HIDE[hide]
    parts = [f"--model-path {MODEL} {KV}", prefill, DECODE]
    line = f"{head} " + " ".join(parts[i] for i in order)
    root = write(tmp_path_factory.mktemp("fuzz"), _files(container, setup, line, shell))
    found = [c for c, _, _ in lint_codes(root)]
    assert WRONG in found or "NSA409" in found, (container, hide, head, shell, found)
    if visible:
        assert WRONG in found, (container, hide, head, shell, found)
