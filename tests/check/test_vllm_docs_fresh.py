"""The generated vLLM docs are not stale: docs/matrix-vllm.md is what `nsa-policy matrix --engine vllm`
gives now, docs/migration-from-vllm.md what `nsa-policy diff vllm-0.33 default --engine vllm` gives now.
Regenerate with `python scripts/gen_docs.py --only vllm`."""
from __future__ import annotations

import importlib.util
from pathlib import Path

from typer.testing import CliRunner

from nsa_policy.cli import app

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
HOW = "stale: run `python scripts/gen_docs.py --only vllm` and commit docs/"


def _gen():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    return gen


def test_vllm_matrix_is_fresh_and_is_what_the_cli_prints():
    committed = (DOCS / "matrix-vllm.md").read_text(encoding="utf-8")
    assert committed == _gen().vllm_matrix_markdown(), HOW
    result = CliRunner().invoke(app, ["matrix", "--engine", "vllm"])
    assert result.exit_code == 0 and result.output == committed


def test_vllm_migration_report_is_fresh():
    text = (DOCS / "migration-from-vllm.md").read_text(encoding="utf-8")
    assert text == _gen().vllm_migration_markdown(), HOW
    # the classes an operator must see: what default refuses, and the backend/KV it chooses instead
    assert "accepted → rejected (first error NSA153)" in text and "FLASHINFER_MLA_SPARSE" in text


def test_diff_default_names_the_engines_bundle():
    result = CliRunner().invoke(app, ["diff", "vllm-0.33", "default", "--engine", "vllm", "--inputs",
                                      str(ROOT / "rules" / "policy" / "vllm-default" / "tests" / "recommend.yaml")])
    assert result.exit_code == 0, result.output
    bad = CliRunner().invoke(app, ["diff", "vllm-0.33", "default", "--engine", "vlm"])
    assert bad.exit_code == 2 and "--engine: 'vlm' is not valid" in bad.output
