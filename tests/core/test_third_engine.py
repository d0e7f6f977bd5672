"""A third serving engine, planted in a temporary directory and registered only through the
`nsa_policy.engines` entry point: a package with a bundle and an argument registry, and no edit to
nsa-policy. The commands know it as they know sglang and vLLM."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

ENGINE_CODE = '''
"""toyserve: a serving engine nsa-policy does not ship."""
from pathlib import Path

import yaml

from nsa_policy.engines.base import Engine

HERE = Path(__file__).resolve().parent


class ToyEngine(Engine):
    name = "toyserve"
    title = "ToyServe"
    default_bundle = "toyserve-default"
    policy_roots = (HERE / "bundles",)
    # the argument registry: flag (no dashes) -> ServingConfig field
    arguments = yaml.safe_load((HERE / "args.yaml").read_text())["arguments"]
    # ToyServe decides only the KV dtype and the page size
    optional_outputs = frozenset({"attention_backend", "dense_attn_kv_len_threshold", "kv_cache_layout", "index_topk"})

    def known_releases(self):
        return ("1.0", "1.1")

    def launch_start(self, words):
        return next((k for k, w in enumerate(words) if w == "toyserve-serve"), None)


ENGINE = ToyEngine()
'''

ARGS = """
arguments:
  kv-dtype: kv_cache_dtype
  tensor-parallel: tp_size
  block: page_size
"""

BUNDLE = {
    "bundle.yaml": """
name: toyserve-default
description: ToyServe's DSA start-up, as its 1.0 release runs it.
engine: toyserve
source: the toyserve 1.0 wheel, toyserve/attention.py
""",
    "20-kv-cache.yaml": """
stage: kv_cache
rules:
  - id: toy.kv.fp8
    description: ToyServe stores fp8 KV on every device (toyserve/attention.py).
    when: {config.kv_cache_dtype: auto}
    set: {kv_cache_dtype: fp8_e4m3}
    evidence: ["toyserve 1.0 toyserve/attention.py"]
  - id: toy.kv.bf16-refused
    description: ToyServe refuses bf16 KV (toyserve/attention.py raises).
    when: {config.kv_cache_dtype: bfloat16}
    emit:
      code: NSA101
      message: "ToyServe runs fp8 KV only; use {alternatives}"
      fields: [kv_cache_dtype]
      alternatives: {values: [kv_cache_dtype fp8_e4m3]}
    evidence: ["toyserve 1.0 toyserve/attention.py"]
""",
    "50-page-size.yaml": """
stage: page_size
rules:
  - id: toy.page-size
    description: ToyServe pages by 32 tokens (toyserve/attention.py).
    when: {model.is_dsa: true}
    set: {page_size: 32}
    evidence: ["toyserve 1.0 toyserve/attention.py"]
""",
}


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("third-engine")
    pkg = root / "toyserve_nsa"
    (pkg / "bundles" / "toyserve-default").mkdir(parents=True)
    (pkg / "__init__.py").write_text(textwrap.dedent(ENGINE_CODE))
    (pkg / "args.yaml").write_text(ARGS)
    for name, text in BUNDLE.items():
        (pkg / "bundles" / "toyserve-default" / name).write_text(textwrap.dedent(text).lstrip())
    dist = root / "toyserve_nsa-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toyserve-nsa\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[nsa_policy.engines]\ntoyserve = toyserve_nsa:ENGINE\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    return env


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from nsa_policy.cli import main; main()", *args],
                          capture_output=True, text=True, env=env, timeout=300)


def test_not_known_without_its_entry_point():
    r = _cli(dict(os.environ), "resolve", "--engine", "toyserve", "--device", "h200",
             "--model", "deepseek-ai/DeepSeek-V3.2")
    assert r.returncode == 2, r.stderr
    assert "toyserve" in r.stderr and "sglang" in r.stderr and "vllm" in r.stderr  # the registered ones are named


def test_resolve_uses_its_bundle_and_its_argument_names(planted):
    r = _cli(planted, "resolve", "--engine", "toyserve", "--device", "h200", "--model", "deepseek-ai/DeepSeek-V3.2",
             "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert (d["engine"], d["policy"], d["kv_cache_dtype"], d["page_size"]) == ("toyserve", "toyserve-default",
                                                                               "fp8_e4m3", 32)
    assert d["provenance"]["page_size"]["detail"] == "toy.page-size"
    # the library reads a mapping in the engine's own argument names
    code = ("import nsa_policy; d = nsa_policy.resolve({'kv-dtype': 'bfloat16'}, device='h200', "
            "model='deepseek-ai/DeepSeek-V3.2', engine='toyserve', raise_on_error=False); "
            "print(d.policy, [e.code for e in d.errors])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=planted, timeout=120)
    assert out.stdout.split() == ["toyserve-default", "['NSA101']"], out.stderr


def test_policies_lists_its_bundle_and_releases(planted):
    r = _cli(planted, "policies", "--json")
    assert r.returncode == 0, r.stderr
    rows = {row["name"]: row for row in json.loads(r.stdout)}
    assert rows["toyserve-default"]["engine"] == "toyserve"
    assert {"default", "vllm-default"} <= set(rows)


def test_check_runs_over_its_space(planted):
    r = _cli(planted, "check", "--policy", "toyserve-default", "--json")
    out = json.loads(r.stdout)
    report = out["bundles"][0]
    assert report["bundle"] == "toyserve-default" and report["inputs"] > 1000, r.stdout[:500]
    assert out["ok"] and r.returncode == 0, r.stdout[:2000] + r.stderr


def test_matrix_marks_its_picks(planted):
    r = _cli(planted, "matrix", "--engine", "toyserve", "--format", "json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["policy"] == "toyserve-default"
    assert set(data["auto_kv"].values()) == {"fp8_e4m3"}


def test_an_entry_point_cannot_replace_a_builtin(tmp_path):
    dist = tmp_path / "evil-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: evil\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[nsa_policy.engines]\nsglang = os:path\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    code = "from nsa_policy import engines; print(type(engines.get('sglang')).__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.stdout.strip() == "SglangEngine", out.stderr


def test_a_broken_entry_point_is_one_line(tmp_path):
    dist = tmp_path / "broken-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[nsa_policy.engines]\nbroken = no_such_module:ENGINE\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    r = _cli(env, "resolve", "--engine", "broken", "--device", "h200", "--model", "deepseek-ai/DeepSeek-V3.2")
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "no_such_module" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_policies_show_flattens_the_chain(planted):
    r = _cli(planted, "policies", "--show", "toyserve-default", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["engine"] == "toyserve" and data["chain"] == ["toyserve-default"]
    assert [(x["id"], x["stage"], x["bundle"]) for x in data["rules"]] == [
        ("toy.kv.fp8", "kv_cache", "toyserve-default"), ("toy.kv.bf16-refused", "kv_cache", "toyserve-default"),
        ("toy.page-size", "page_size", "toyserve-default")]


def test_lint_reads_its_launches(planted, tmp_path):
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    (deploy / "serve.sh").write_text("#!/bin/sh\n# nsa-policy: device=h200\n"
                                     "toyserve-serve --model deepseek-ai/DeepSeek-V3.2 --kv-dtype bfloat16 --block 32\n")
    r = _cli(planted, "lint", str(deploy), "--format", "json")
    assert r.returncode == 1, r.stdout + r.stderr
    found = json.loads(r.stdout)
    items = found["diagnostics"] if isinstance(found, dict) else found
    hits = [d for d in items if d["code"] == "NSA101"]
    assert hits and "fp8 KV only" in hits[0]["message"], items
    assert hits[0]["line"] == 3
    (deploy / "serve.sh").write_text("#!/bin/sh\n# nsa-policy: device=h200\n"
                                     "toyserve-serve --model deepseek-ai/DeepSeek-V3.2 --kv-dtype fp8_e4m3\n")
    r = _cli(planted, "lint", str(deploy), "--format", "json")
    assert r.returncode == 0, r.stdout + r.stderr


def test_launch_appends_the_decided_outputs_in_its_own_flags(planted):
    r = _cli(planted, "launch", "--device", "h200", "--dry-run", "--",
             "toyserve-serve", "--model", "deepseek-ai/DeepSeek-V3.2", "--tensor-parallel", "8")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ("toyserve-serve --model deepseek-ai/DeepSeek-V3.2 --tensor-parallel 8 "
                                "--kv-dtype fp8_e4m3 --block 32")
    refused = _cli(planted, "launch", "--device", "h200", "--dry-run", "--",
                   "toyserve-serve", "--model", "deepseek-ai/DeepSeek-V3.2", "--kv-dtype", "bfloat16")
    assert refused.returncode == 1 and "NSA101" in refused.stderr and refused.stdout == ""
