"""A site bundle is input too: every malformed shape is a file:line error with exit 2, never a traceback or a hang."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hostile.bounded import run_bounded

STAGE_HEAD = "stage: page_size\nrules:\n"


def _bundle(root: Path, stage_text: bytes | None) -> Path:
    folder = root / "site"
    folder.mkdir()
    (folder / "bundle.yaml").write_text("name: site\ndescription: a site bundle\nextends: default\n")
    if stage_text is not None:
        (folder / "50-page-size.yaml").write_bytes(stage_text)
    return folder


def _resolve(folder: Path):
    from nsa_policy.cli import app

    box = run_bounded(lambda: CliRunner().invoke(app, ["resolve", "--device", "h200", "--model",
                                                      "deepseek-ai/DeepSeek-V3.2", "--policy", str(folder)]),
                      timeout=20)
    return box["value"]


@pytest.mark.parametrize("name,text,line,words", [
    ("non-utf8", STAGE_HEAD.encode() + b"  - id: x\n    description: caf\xe9\n", 4, "UTF-8"),
    ("sequence-key", STAGE_HEAD.encode() + b"  - id: x\n    [a, b]: 1\n", 4, "mapping key"),
    ("deep", STAGE_HEAD.encode() + b"  - id: x\n    description: " + b"[" * 5000 + b"\n", None, "deeper"),
    ("alias-bomb", None, None, "YAML nodes"),
])
def test_malformed_rule_files_are_file_line_errors(tmp_path, name, text, line, words):
    if text is None:
        from hostile.test_safe_io import alias_bomb

        text = (alias_bomb() + STAGE_HEAD).encode()
    folder = _bundle(tmp_path, text)
    result = _resolve(folder)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    where = f"50-page-size.yaml:{line}" if line else "50-page-size.yaml"
    assert where in result.output and words in result.output, result.output
    assert "Traceback" not in result.output


def test_a_fifo_rule_file_is_refused_without_blocking(tmp_path):
    folder = _bundle(tmp_path, None)
    os.mkfifo(folder / "50-page-size.yaml")
    result = _resolve(folder)
    assert result.exit_code == 2
    assert "FIFO" in result.output


@pytest.mark.parametrize("condition,words", [
    ("{device.class: {in: [[sm90], {b: 1}]}}", "list of plain values"),
    ("{device.class: {not_in: [[sm90]]}}", "list of plain values"),
    ("{pkg.flashinfer-python: {version_ge: garbage}}", "PEP 440"),
])
def test_condition_shapes_are_file_line_errors(tmp_path, condition, words):
    text = (STAGE_HEAD + "  - id: site.x\n    description: x\n    when: " + condition + "\n    set: {page_size: 64}\n")
    result = _resolve(_bundle(tmp_path, text.encode()))
    assert result.exit_code == 2, result.output
    assert "50-page-size.yaml:5" in result.output and words in result.output, result.output
