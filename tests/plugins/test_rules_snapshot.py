"""The parsed-rules snapshot the wheel ships (hatch_build.py, nsa_policy/base/rules_snapshot.py): load_yaml
answers a shipped file from it exactly as parsing does, line numbers included, and parses a file whose
bytes changed since the build."""
from __future__ import annotations

from pathlib import Path

import pytest

from nsa_policy.base import rules_snapshot, yaml_lines
from nsa_policy.base.paths import packaged_rules_dir

ROOT = Path(__file__).resolve().parents[2]


def _hook_build(rules: Path) -> bytes:
    """What hatch_build.py writes into the wheel, built as it builds it (hatchling itself is not needed here)."""
    assert "parse_yaml(path)" in (ROOT / "hatch_build.py").read_text()
    parsed = {p.relative_to(rules).as_posix(): (p.read_bytes(), yaml_lines.parse_yaml(p)) for p in sorted(rules.rglob("*.yaml"))}
    return rules_snapshot.build(parsed)


@pytest.fixture
def snapshot(tmp_path, monkeypatch):
    shipped = packaged_rules_dir()
    assert shipped is not None
    path = tmp_path / "_rules_snapshot.pickle"
    path.write_bytes(_hook_build(shipped))
    monkeypatch.setattr(rules_snapshot, "SNAPSHOT", path)
    monkeypatch.setattr(rules_snapshot, "_loaded", [])
    return shipped


def _same(a, b) -> bool:
    if isinstance(a, dict):
        return (type(a) is type(b) and a.keys() == b.keys() and getattr(a, "line", None) == getattr(b, "line", None)
                and getattr(a, "key_lines", None) == getattr(b, "key_lines", None) and all(_same(a[k], b[k]) for k in a))
    if isinstance(a, list):
        return (type(a) is type(b) and len(a) == len(b) and getattr(a, "line", None) == getattr(b, "line", None)
                and getattr(a, "item_lines", None) == getattr(b, "item_lines", None) and all(map(_same, a, b)))
    return a == b and type(a) is type(b)


def test_snapshot_answers_as_parsing_does(snapshot, monkeypatch):
    calls = []
    parse = yaml_lines.parse_yaml
    monkeypatch.setattr(yaml_lines, "parse_yaml", lambda *a, **k: calls.append(a) or parse(*a, **k))
    files = [snapshot / "policy" / "default" / "30-backends.yaml", snapshot / "catalog" / "devices.yaml",
             snapshot / "codes.yaml"]
    for f in files:
        got = yaml_lines.load_yaml(f)
        assert _same(got, parse(f)), f
        assert got is not yaml_lines.load_yaml(f)  # a fresh value per call, as parsing gives
    assert calls == []  # none parsed
    assert rules_snapshot.available()


def test_changed_bytes_are_parsed_again(snapshot, monkeypatch):
    f = snapshot / "catalog" / "models.yaml"
    real = f.read_bytes()
    assert rules_snapshot.lookup(f, real, snapshot) is not rules_snapshot.MISS
    assert rules_snapshot.lookup(f, real + b"# edited\n", snapshot) is rules_snapshot.MISS  # the digest no longer matches


def test_no_snapshot_in_a_checkout(monkeypatch, tmp_path):
    monkeypatch.setattr(rules_snapshot, "SNAPSHOT", tmp_path / "absent.pickle")
    monkeypatch.setattr(rules_snapshot, "_loaded", [])
    assert not rules_snapshot.available()
    f = packaged_rules_dir() / "codes.yaml"
    assert rules_snapshot.lookup(f, f.read_bytes(), packaged_rules_dir()) is rules_snapshot.MISS
