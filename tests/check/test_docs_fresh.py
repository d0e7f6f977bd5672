"""The generated docs are not stale: matrix.md is what the data gives now, and the PNG/SVG carry the
digest of that same data; migration-from-sglang.md is what `diff sglang-0.5.10 default` gives now.
Regenerate with `python scripts/gen_docs.py`."""
from __future__ import annotations

from pathlib import Path

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
