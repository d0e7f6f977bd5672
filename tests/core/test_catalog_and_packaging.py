"""Catalogs match POLICY.md; the JSON Schemas export; the wheel ships rules/; the policy path stays light."""
from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nsa_policy.catalog.store import load_catalog

POLICY_DEVICES = {"h100": "sm90", "h200": "sm90", "h20": "sm90", "gh200": "sm90", "b200": "sm100", "gb200": "sm100",
                  "b300": "sm103", "gb300": "sm103", "rtx-pro-6000": "sm120", "rtx-5090": "sm120", "gb10": "sm121",
                  "a100": "sm80", "l40s": "sm89", "mi300x": "gfx942", "mi325x": "gfx942", "mi350x": "gfx950",
                  "mi355x": "gfx950"}


def test_every_policy_device_is_in_the_catalog() -> None:
    cat = load_catalog()
    for name, cls in POLICY_DEVICES.items():
        assert cat.device(name).device_class == cls
    for spec in ("sm80", "sm86", "sm89", "sm90", "sm100", "sm103", "sm120", "sm121", "gfx942", "gfx950", "cpu"):
        assert cat.device(spec).device_class == spec
    assert cat.device("mi300x").compute_capability == (9, 4) and cat.device("gfx950").compute_capability == (9, 5)


def test_models_catalog() -> None:
    cat = load_catalog()
    for mid in ("deepseek-ai/DeepSeek-V3.2", "deepseek-ai/DeepSeek-V3.2-Exp", "deepseek-ai/DeepSeek-V3.2-Speciale",
                "zai-org/GLM-5", "zai-org/GLM-5-FP8", "zai-org/GLM-5.1"):
        m = cat.model(mid)
        assert m.is_dsa and m.index_topk == 2048
    assert cat.model("deepseek-ai/DeepSeek-V3.2").num_attention_heads == 128
    assert cat.model("DeepSeek-V3.2").model_id == "deepseek-ai/DeepSeek-V3.2"  # the repo name alone works
    assert cat.family_of("MistralLarge3ForCausalLM", 2048) == "mistral_large3"
    assert cat.family_of("MistralLarge3ForCausalLM", None) is None


@pytest.mark.parametrize(("backend", "device", "kv", "phase", "runs"), [
    ("flashmla_sparse", "sm90", "bfloat16", "decode", True),
    ("flashmla_sparse", "sm100", "fp8_e4m3", "decode", False),   # fp8 decode unsupported
    ("flashmla_sparse", "sm100", "fp8_e4m3", "prefill", True),   # ragged dequant
    ("flashmla_auto", "sm90", "fp8_e4m3", "decode", False),      # prefill only
    ("fa3", "sm100", "bfloat16", "decode", False),               # Hopper only
    ("tilelang", "sm90", "fp8_e4m3", "decode", False),           # CUDA graph crash, sglang#31346
    ("tilelang", "gfx950", "fp8_e4m3", "decode", True),
    ("aiter", "gfx942", "bfloat16", "decode", True),
    ("aiter", "sm90", "bfloat16", "decode", False),
    ("trtllm", "sm103", "fp8_e4m3", "prefill", True),
    ("trtllm", "sm120", "fp8_e4m3", "decode", False),            # sglang#29562
    ("flashinfer_sparse_mla", "sm121", "fp8_e4m3", "prefill", True),
    ("flashinfer_sparse_mla", "sm121", "bfloat16", "prefill", False),
    ("flashmla_sparse_q8", "sm90", "fp8_e4m3", "prefill", True),
    ("flashmla_sparse_q8", "sm90", "fp8_e4m3", "decode", False),
])
def test_capability_matrix_matches_policy(backend, device, kv, phase, runs) -> None:
    assert load_catalog().capability(backend, device, kv, phase).runs is runs


def test_cli_listings() -> None:
    from nsa_policy.cli import app

    r = CliRunner()
    devices = json.loads(r.invoke(app, ["devices", "--json"]).stdout)
    assert {d["name"] for d in devices} >= set(POLICY_DEVICES)
    models = json.loads(r.invoke(app, ["models", "--json"]).stdout)
    assert any(m["model_id"] == "zai-org/GLM-5" for m in models)
    backends = json.loads(r.invoke(app, ["backends", "--json"]).stdout)
    assert {b["backend"] for b in backends} >= {"flashmla_sparse", "flashmla_kv", "fa3", "tilelang", "aiter", "trtllm",
                                                 "flashinfer_sparse_mla"}
    policies = json.loads(r.invoke(app, ["policies", "--json"]).stdout)
    names = {p["name"] for p in policies}
    assert names >= {"default", "sglang-0.5.10", "sglang-pre-21783"}
    # the other shipped bundles are the per-release compatibility bundles (issue 11)
    # and the vLLM bundles (issue 14): vllm-<release> compatibility bundles and vllm-default
    assert all(n.startswith(("sglang-0.5.", "vllm-")) for n in names - {"default", "sglang-pre-21783"})
    version = r.invoke(app, ["--version"])
    assert version.exit_code == 0 and version.stdout.startswith("nsa-policy ")


def test_json_schema_export() -> None:
    from nsa_policy.cli import app

    out = CliRunner().invoke(app, ["schema"])
    schemas = json.loads(out.stdout)
    assert set(schemas) == {"device", "model", "config", "facts", "decision"}
    assert schemas["config"]["additionalProperties"] is False
    assert "prefill_backend" in schemas["config"]["properties"]


def test_policy_path_never_imports_torch_or_flashinfer(tmp_path: Path) -> None:
    code = ("import sys, json\nimport nsa_policy.cli as cli\n"
            "import nsa_policy\n"
            "nsa_policy.resolve({}, device='b200', model='deepseek-ai/DeepSeek-V3.2', env={})\n"
            "from typer.testing import CliRunner\n"
            "CliRunner().invoke(cli.app, ['resolve', '--device', 'h200', '--model', 'zai-org/GLM-5', '--explain'])\n"
            "CliRunner().invoke(cli.app, ['backends'])\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'flashinfer', 'triton'))))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_built_wheel_ships_rules_and_cli(tmp_path: Path, repo: Path) -> None:
    """A plain `pip install .` must find rules/: the wheel carries it as nsa_policy/_rules."""
    pytest.importorskip("hatchling", reason="hatchling (the build backend) is installed by .ci/run")
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                          "-w", str(tmp_path), str(repo)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    [wheel] = list(tmp_path.glob("nsa_policy-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "nsa_policy/cli.py" in names
    for rel in ("codes.yaml", "catalog/backends.yaml", "policy/default/bundle.yaml", "policy/sglang-0.5.10/bundle.yaml",
                "policy/sglang-pre-21783/bundle.yaml"):
        assert f"nsa_policy/_rules/{rel}" in names, rel
    source_rules = {str(p.relative_to(repo / "rules")) for p in (repo / "rules").rglob("*.yaml")}
    shipped = {n[len("nsa_policy/_rules/"):] for n in names if n.startswith("nsa_policy/_rules/")}
    assert source_rules <= shipped
    # install it into a fresh target and resolve from there, away from the checkout
    target = tmp_path / "site"
    inst = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                          capture_output=True, text=True)
    assert inst.returncode == 0, inst.stderr
    code = ("import nsa_policy, nsa_policy.base.paths as p; d = nsa_policy.resolve({}, device='gb10', "
            "model='zai-org/GLM-5', env={}); print(p.rules_dir(), d.prefill_backend)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                         env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr
    rules_at, backend = run.stdout.split()
    assert rules_at.startswith(str(target)) and backend == "flashinfer_sparse_mla"
