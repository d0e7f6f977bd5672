"""The lint command: exit codes, --fail-level, --exit-zero, formats (SARIF checked against its schema), rule CODE."""
from __future__ import annotations

import json
import re

import jsonschema
import pytest
from typer.testing import CliRunner

from nsa_policy.catalog.codes import load_codes

from .helpers import CORPUS, DATA, run_lint
from .test_corpus import EXPECTED

BAD, CLEAN = CORPUS / "bad", CORPUS / "clean"


def test_exit_codes_and_fail_level(tmp_path) -> None:
    env_only = BAD / "env" / "sglang.env"  # one warning (NSA202) and notes, no error
    assert run_lint(str(env_only)).exit_code == 0
    assert run_lint("--fail-level", "warning", str(env_only)).exit_code == 1
    assert run_lint("--fail-level", "info", str(CLEAN / "env" / "sglang.env")).exit_code == 1
    assert run_lint(str(BAD / "config" / "sglang.json")).exit_code == 1
    assert run_lint("--exit-zero", str(BAD / "config" / "sglang.json")).exit_code == 0


@pytest.mark.parametrize("args, needle", [
    (["--device", "h2000", "."], "did you mean 'h200'"),
    (["--policy", "defualt", "."], "did you mean 'default'"),
    (["--format", "xml", "."], "valid: text, json, github, sarif"),
    (["--fail-level", "fatal", "."], "valid: info, warning, error"),
    (["does/not/exist"], "no such file or folder"),
])
def test_usage_errors_exit_2_with_a_clear_line(args, needle) -> None:
    result = run_lint(*args)
    assert result.exit_code == 2
    assert needle in result.output
    assert "Traceback" not in result.output


def test_text_format_groups_by_file_with_summary() -> None:
    out = run_lint(str(BAD / "scripts")).output
    lines = out.splitlines()
    assert re.match(r".*serve_b200\.sh:9:5: NSA205 \[warning\] ", lines[0])
    assert out.index("serve_b200.sh") < out.index("serve_h200.sh")
    assert lines[-1].startswith("5 error(s), 2 warning(s), 1 note(s) in 2 file(s); 2 file(s) scanned, 3 launch(es)")


def test_json_format() -> None:
    out = json.loads(run_lint("--format", "json", str(BAD / "helm")).output)
    assert out["summary"]["errors"] == 4 and out["summary"]["launches"] == 1
    d = next(d for d in out["diagnostics"] if d["code"] == "NSA101")
    assert (d["line"], d["column"], d["level"], d["rule"]) == (10, 3, "error", "validate.decode-runs-here")
    assert d["alternatives"] == ["flashmla_kv"] and d["fix"]


def test_github_annotations() -> None:
    lines = run_lint("--format", "github", str(BAD / "release")).output.splitlines()
    ann = [ln for ln in lines if ln.startswith("::")]
    assert len(ann) == sum(len(v) for k, v in EXPECTED.items() if k.startswith("release/"))
    rx = re.compile(r"^::(error|warning|notice) file=[^,]+,line=\d+,col=\d+,title=NSA\d{3}::.+")
    assert all(rx.match(ln) for ln in ann), ann
    assert any(ln.startswith("::notice ") and "title=NSA405" in ln for ln in ann)
    assert any(ln.startswith("::error ") and "title=NSA410" in ln for ln in ann)


@pytest.fixture(scope="module")
def sarif_schema():
    return json.loads((DATA / "sarif-schema-2.1.0.json").read_text())


def test_sarif_validates_against_the_2_1_0_schema(sarif_schema) -> None:
    result = run_lint("--format", "sarif", str(BAD))
    assert result.exit_code == 1
    doc = json.loads(result.output)
    jsonschema.Draft4Validator.check_schema(sarif_schema)
    jsonschema.Draft4Validator(sarif_schema).validate(doc)
    run = doc["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == sorted(load_codes().codes)  # one rule per code, with its documentation
    assert all(r["help"]["text"] and r["shortDescription"]["text"] for r in rules)
    assert len(run["results"]) == sum(len(v) for v in EXPECTED.values())
    for res in run["results"]:
        assert rules[res["ruleIndex"]]["id"] == res["ruleId"]
        assert res["level"] in ("error", "warning", "note")
        assert res["locations"][0]["physicalLocation"]["region"]["startLine"] >= 1


def test_sarif_schema_rejects_a_broken_document(sarif_schema) -> None:
    """The schema file is the real one: it catches what a hand-written subset might not."""
    doc = json.loads(run_lint("--format", "sarif", str(BAD / "config")).output)
    doc["runs"][0]["results"][0]["level"] = "fatal"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft4Validator(sarif_schema).validate(doc)


def test_output_file(tmp_path) -> None:
    target = tmp_path / "lint.sarif"
    result = run_lint("--format", "sarif", "--output", str(target), str(CLEAN))
    assert result.exit_code == 0 and result.output == ""
    assert json.loads(target.read_text())["version"] == "2.1.0"


def test_every_code_has_documentation() -> None:
    from nsa_policy.cli import app

    runner = CliRunner()
    for code, doc in load_codes().codes.items():
        result = runner.invoke(app, ["rule", code.lower()])
        assert result.exit_code == 0, result.output
        assert result.output.startswith(f"{code} {doc.name} ({doc.level})")
        assert doc.explanation in result.output and f"Fix: {doc.fix}" in result.output
    listing = runner.invoke(app, ["rule"]).output.splitlines()
    assert len(listing) == len(load_codes().codes)
    bad = runner.invoke(app, ["rule", "NSA499"])
    assert bad.exit_code == 2 and "did you mean" in bad.output
    as_json = json.loads(runner.invoke(app, ["rule", "NSA202", "--json"]).output)
    assert as_json["code"] == "NSA202" and as_json["name"] == "removed-128k-override"


def test_exclude_option(tmp_path, monkeypatch) -> None:
    (tmp_path / "legacy").mkdir()
    (tmp_path / "legacy" / "old.env").write_text("SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD=abc\n")
    (tmp_path / "new.env").write_text("SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD=2048\n")
    monkeypatch.chdir(tmp_path)
    assert run_lint(".").exit_code == 1
    result = run_lint(".", "--exclude", "legacy/")
    assert result.exit_code == 0 and "1 file(s) scanned" in result.output
