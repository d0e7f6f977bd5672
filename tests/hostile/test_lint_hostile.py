"""lint reads untrusted files from pull requests: nothing in them may switch checks off, hang it or crash it."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hostile.test_safe_io import alias_bomb

LAUNCH = """#!/usr/bin/env bash
# nsa-policy: device=b200
{hint}
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 --kv-cache-dtype fp8_e4m3 \\
  --nsa-prefill-backend trtllm --nsa-decode-backend flashmla_kv
"""


def lint(*args: str):
    from nsa_policy.cli import app

    return CliRunner().invoke(app, ["lint", *args])


def _permissive_bundle(root: Path) -> Path:
    """What a pull request could ship: a bundle that extends default and drops every validation rule."""
    from nsa_policy.core.bundle import get_bundle

    folder = root / ".nsa" / "permissive"
    folder.mkdir(parents=True)
    ids = [r.id for rules in get_bundle("default").stages.values() for r in rules if r.id.startswith("validate.")]
    (folder / "bundle.yaml").write_text(
        "name: permissive\ndescription: drops the checks\nextends: default\ndrop: [" + ", ".join(ids) + "]\n")
    return folder


@pytest.mark.parametrize("explicit", [True, False])
def test_a_hint_cannot_load_a_rule_folder(tmp_path, explicit, monkeypatch):
    folder = _permissive_bundle(tmp_path)
    for hint in (f"# nsa-policy: policy={folder.relative_to(tmp_path)}", f"# nsa-policy: policy={folder}"):
        script = tmp_path / "serve.sh"
        script.write_text(LAUNCH.format(hint=hint))
        monkeypatch.chdir(tmp_path)
        args = ["serve.sh", "--format", "json"] + (["--policy", "default"] if explicit else [])
        result = lint(*args)
        assert result.exit_code == 1, result.output  # the mixed fp8 trtllm launch is still an error
        report = json.loads(result.output)
        codes = [d["code"] for d in report["diagnostics"]]
        assert "NSA103" in codes
        assert "NSA407" in codes  # the hint is reported, not obeyed


def test_a_hint_may_pick_a_shipped_bundle_only_without_explicit_policy(tmp_path, monkeypatch):
    from nsa_policy.lint import LintOptions, lint_paths

    script = tmp_path / "serve.sh"
    script.write_text(LAUNCH.format(hint="# nsa-policy: policy=sglang-0.5.10"))
    hinted = lint_paths([str(script)], LintOptions())
    forced = lint_paths([str(script)], LintOptions(policy="default", policy_explicit=True))
    assert any(d.rule and d.rule.startswith("sglang.") for d in hinted.diagnostics)
    assert not any(d.rule and d.rule.startswith("sglang.") for d in forced.diagnostics)


def test_same_named_local_folder_does_not_shadow_a_shipped_bundle(tmp_path, monkeypatch):
    from nsa_policy.core.bundle import get_bundle

    shadow = tmp_path / "default"
    shadow.mkdir()
    (shadow / "bundle.yaml").write_text("name: default\ndescription: shadow\nextends: default\ndrop: []\n")
    monkeypatch.chdir(tmp_path)
    assert "shadow" not in (get_bundle("default").description or "")


def test_alias_bomb_in_the_tree_does_not_stall_lint(tmp_path):
    (tmp_path / "values.yaml").write_text("# sglang\n" + alias_bomb())
    start = time.perf_counter()
    result = lint(str(tmp_path), "--format", "json")
    assert time.perf_counter() - start < 10
    report = json.loads(result.output)
    [diag] = [d for d in report["diagnostics"] if d["code"] == "NSA404"]
    assert "YAML nodes" in diag["message"]


@pytest.mark.parametrize("name,text", [
    ("deep.json", '{"sglang": ' + "[" * 100_000 + "]" * 100_000 + "}"),
    ("deep.toml", "sglang = " + "[" * 100_000 + "]" * 100_000),
    ("deep.yaml", "sglang: " + "[" * 100_000),
])
def test_deep_nesting_is_a_finding_not_a_traceback(tmp_path, name, text):
    (tmp_path / name).write_text(text)
    result = lint(str(tmp_path / name), "--format", "json")
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    report = json.loads(result.output)
    assert [d["code"] for d in report["diagnostics"]] == ["NSA404"]


def test_a_fifo_named_on_the_command_line_is_reported_not_read(tmp_path):
    fifo = tmp_path / "pipe.sh"
    os.mkfifo(fifo)
    result = lint(str(fifo))
    assert result.exit_code == 2
    assert "not a regular file" in result.output or "FIFO" in result.output


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any folder; permissions cannot be taken away")
def test_an_unreadable_folder_is_reported(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "serve.sh").write_text(LAUNCH.format(hint=""))
    locked.chmod(0)
    try:
        result = lint(str(tmp_path))
    finally:
        locked.chmod(0o755)
    assert result.exit_code == 2


def test_output_never_overwrites_a_linted_file(tmp_path, monkeypatch):
    script = tmp_path / "s.sh"
    script.write_text(LAUNCH.format(hint=""))
    before = script.read_text()
    for target in (str(script), str(tmp_path)):
        result = lint(target, "--output", str(script))
        assert result.exit_code == 2, result.output
        assert "--output" in result.output
        assert script.read_text() == before


def test_output_to_a_bad_path_fails_before_work(tmp_path):
    script = tmp_path / "s.sh"
    script.write_text(LAUNCH.format(hint=""))
    for bad in (str(tmp_path / "missing" / "r.txt"), str(tmp_path), "/dev/full"):
        result = lint(str(script), "--output", bad)
        assert result.exit_code == 2, (bad, result.output)


def test_output_written_atomically(tmp_path):
    script = tmp_path / "s.sh"
    script.write_text(LAUNCH.format(hint=""))
    out = tmp_path / "reports" / "r.json"
    out.parent.mkdir()
    result = lint(str(script), "--format", "json", "--output", str(out))
    assert result.exit_code == 1
    assert json.loads(out.read_text())["diagnostics"]
    assert sorted(p.name for p in out.parent.iterdir()) == ["r.json"]
