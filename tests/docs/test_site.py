"""The documentation site's sources: the finding-code pages are what scripts/gen_docs.py generates
from rules/codes.yaml now, and every page the nav names exists. (`mkdocs build --strict` itself runs
in .ci/run: it needs mkdocs and mkdocs-material, which the test extra does not install.)"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import yaml

from nsa_policy.catalog.codes import load_codes

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
HOW = "stale: run `python scripts/gen_docs.py --only codes` and commit docs/codes/"


def _gen():
    spec = importlib.util.spec_from_file_location("gen_docs", REPO / "scripts" / "gen_docs.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    return gen


def test_code_pages_are_fresh() -> None:
    pages = _gen().code_pages(DOCS)
    committed = set((DOCS / "codes").glob("*.md"))
    assert committed == set(pages), f"docs/codes/ has other pages than rules/codes.yaml gives: {HOW}"
    for path, text in pages.items():
        assert path.read_text(encoding="utf-8") == text, f"{path.name} {HOW}"


def test_one_page_per_code() -> None:
    codes = set(load_codes().codes)
    assert {p.stem for p in (DOCS / "codes").glob("NSA*.md")} == codes


def _nav_files(node) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [f for item in node for f in _nav_files(item)]
    if isinstance(node, dict):
        return [f for v in node.values() for f in _nav_files(v)]
    return []


def test_every_nav_entry_exists() -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    assert config["strict"] is True
    missing = [f for f in _nav_files(config["nav"]) if not (DOCS / f).is_file()]
    assert not missing, f"mkdocs.yml names pages that do not exist: {missing}"
