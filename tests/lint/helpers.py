"""Shared helpers for the lint tests."""
from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

DATA = Path(__file__).resolve().parent.parent / "data" / "lint"
CORPUS = DATA / "corpus"


def run_lint(*args: str):
    from nsa_policy.cli import app

    return CliRunner().invoke(app, ["lint", *args])


def findings(report, path: Path | str | None = None) -> list[tuple[str, int]]:
    """(code, line) of every diagnostic, sorted; for one file when path is given."""
    return sorted((d.code, d.loc.line) for d in report.diagnostics if path is None or Path(d.loc.path) == Path(path))
