"""The generated docs are not stale: matrix.md is what the data gives now, and the PNG/SVG carry the
digest of that same data; migration-from-sglang.md is what `diff sglang-0.5.23 default` gives now.
Regenerate with `python scripts/gen_docs.py`."""
from __future__ import annotations

from pathlib import Path

import pytest

from nsa_policy.verify.matrix import data_digest, markdown_digest, matrix_data, picture_digest, render_markdown

DOCS = Path(__file__).resolve().parents[2] / "docs"
HOW = "stale: run `python scripts/gen_docs.py` and commit docs/"


def test_matrix_markdown_is_fresh():
    data = matrix_data()
    committed = (DOCS / "matrix.md").read_text(encoding="utf-8")
    assert committed == render_markdown(data, image="matrix.png"), HOW


def test_matrix_pictures_were_drawn_from_the_same_data():
    digest = data_digest(matrix_data())
    assert markdown_digest((DOCS / "matrix.md").read_text(encoding="utf-8")) == digest, HOW
    for name in ("matrix.png", "matrix.svg"):
        path = DOCS / name
        assert path.is_file() and path.stat().st_size > 10_000, f"{name} missing: {HOW}"
        assert picture_digest(path) == digest, f"{name} {HOW}"


def test_migration_report_is_fresh():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_docs", DOCS.parent / "scripts" / "gen_docs.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert (DOCS / "migration-from-sglang.md").read_text(encoding="utf-8") == gen.migration_markdown(), HOW


def test_readme_matrix_is_fresh_if_embedded():
    """The README may embed `nsa-policy matrix --image docs/matrix.png`; if it does, it must be current."""
    readme = DOCS.parent / "README.md"
    text = readme.read_text(encoding="utf-8") if readme.is_file() else ""
    if markdown_digest(text) is None:
        pytest.skip("README.md does not embed the generated matrix (no matrix-data digest in it)")
    assert markdown_digest(text) == data_digest(matrix_data()), (
        "README.md embeds a stale support matrix: replace it with `nsa-policy matrix --image docs/matrix.png`")
    assert render_markdown(matrix_data(), image="docs/matrix.png") in text, "README.md matrix block differs"
