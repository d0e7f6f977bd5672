"""Broken rule folders planted in tmp dirs: each defect is reported, with a minimal example input."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nsa_policy.base.paths import policy_dir
from nsa_policy.core.bundle import compile_bundle
from nsa_policy.verify.exhaustive import check_bundle, static_issues


def plant(tmp_path: Path, name: str, extra: dict[str, str], source: bool = True) -> str:
    """A copy of `default` (extending the shipped base) plus extra stage files."""
    folder = tmp_path / name
    shutil.copytree(policy_dir() / "default", folder)
    head = f"name: {name}\ndescription: planted defects\nextends: base\n" + ("source: a test\n" if source else "")
    (folder / "bundle.yaml").write_text(head)
    for fname, text in extra.items():
        (folder / fname).write_text(text)
    return str(folder)


def issues_of(report, kind, subject=None):
    return [i for i in report.issues if i.kind == kind and (subject is None or i.subject == subject)]


@pytest.fixture(scope="module")
def unreachable_report(tmp_path_factory):
    folder = plant(tmp_path_factory.mktemp("p1"), "planted-unreachable", {"35-planted.yaml": """\
stage: backends
rules:
  - id: planted.hopper-on-amd
    description: A condition that can never hold (a Hopper class with an AMD vendor).
    when: {device.class: sm90, device.vendor: amd}
    set: {prefill_backend: tilelang}
  - id: planted.hopper-late
    description: Matches Hopper bf16, but backends.hopper-bf16 always filled both sides first.
    when: {device.class: sm90, out.kv_cache_dtype: bfloat16}
    set: {prefill_backend: tilelang, decode_backend: tilelang}
  - id: planted.reads-page-size-early
    description: Reads the page size in the backends stage, before the page_size stage decides it.
    when: {device.class: sm100, out.page_size: null}
    emit: {code: NSA204, message: "page size not decided yet"}
"""})
    return check_bundle(folder)


def test_unreachable_rule_is_reported_with_its_nearest_miss(unreachable_report):
    [issue] = issues_of(unreachable_report, "unreachable", "planted.hopper-on-amd")
    assert "never fires" in issue.message and "device.vendor: amd" in issue.message
    ex = issue.example
    assert ex is not None
    # the nearest miss: a Hopper input with nothing else set, failing only the vendor test
    assert ex["input"] == {"device": "sm90", "model": "deepseek-ai/DeepSeek-V3.2"}
    assert ex["command"].startswith("nsa-policy resolve --device sm90 ")


def test_always_overridden_rule_is_reported_with_a_minimal_example(unreachable_report):
    [issue] = issues_of(unreachable_report, "shadowed", "planted.hopper-late")
    assert issue.count > 0
    ex = issue.example
    assert ex["input"] == {"device": "sm90", "model": "deepseek-ai/DeepSeek-V3.2"}
    assert ex["outcome"]["prefill_backend"] == "flashmla_sparse"  # what the earlier rule set
    assert "already_set" in ex["rule_trace"] and "backends.hopper-bf16" in ex["rule_trace"]
    assert not unreachable_report.ok


def test_read_before_write_is_reported(unreachable_report):
    [issue] = issues_of(unreachable_report, "order-read", "planted.reads-page-size-early")
    assert "page-size.cuda" in issue.message and "64" in issue.message
    assert issue.example["input"] == {"device": "sm100", "model": "deepseek-ai/DeepSeek-V3.2"}


@pytest.fixture(scope="module")
def trtllm_on_hopper_report(tmp_path_factory):
    folder = plant(tmp_path_factory.mktemp("p2"), "planted-invariant", {"35-planted.yaml": """\
stage: backends
rules:
  - id: planted.hopper-trtllm
    description: A default-like bundle that picks trtllm prefill on sm90, where it cannot run.
    before: backends.hopper-bf16
    when: {device.class: sm90, out.kv_cache_dtype: bfloat16}
    set: {prefill_backend: trtllm}
""", "75-planted.yaml": """\
stage: validate
# without these, a device with no backend is accepted with nothing decided
drop: [validate.device-has-backend, validate.prefill-chosen, validate.decode-chosen]
"""})
    return check_bundle(folder)


def test_undecided_inputs_are_reported(trtllm_on_hopper_report):
    found = issues_of(trtllm_on_hopper_report, "undecided")
    assert found, [i.kind for i in trtllm_on_hopper_report.issues]
    assert any(i.example["input"] == {"device": "sm80", "model": "deepseek-ai/DeepSeek-V3.2"}
               and "prefill_backend" in i.subject for i in found)


def test_invariant_violation_is_reported_with_a_minimal_example(trtllm_on_hopper_report):
    found = [i for i in issues_of(trtllm_on_hopper_report, "invariant", "backend-runs-here")
             if "planted.hopper-trtllm" in i.message]
    assert found, [i.message for i in trtllm_on_hopper_report.issues]
    issue = found[0]
    assert "trtllm" in issue.message and "sm90" in issue.message and issue.count > 0
    assert issue.example["input"] == {"device": "sm90", "model": "deepseek-ai/DeepSeek-V3.2"}
    assert issue.example["outcome"]["status"] == "rejected"


def test_undeclared_order_dependence_is_reported(trtllm_on_hopper_report):
    # HiSparse's rule fills prefill first where the planted rule would pick trtllm: nobody declared who wins
    found = issues_of(trtllm_on_hopper_report, "order-dependence", "backends.hisparse-cuda-bf16 > planted.hopper-trtllm")
    assert found and found[0].example["input"]["enable_hisparse"] is True


def test_reference_and_evidence_problems_are_static(tmp_path):
    folder = plant(tmp_path, "planted-refs", {"35-planted.yaml": """\
stage: backends
rules:
  - id: planted.misspelt
    description: A misspelt device class and backend make a rule silently dead.
    when: {device.class: sm9O, config.decode_backend: flashmla-kv}
    set: {prefill_backend: tilelang}
    wins_over: [planted.nothing-like-this]
"""}, source=False)
    issues = static_issues(compile_bundle(folder))
    text = [i.message for i in issues if i.subject == "planted.misspelt"]
    assert any("'sm9O', not a device class; did you mean 'sm90'" in t for t in text), text
    assert any("'flashmla-kv', not a backend; did you mean 'flashmla_kv'" in t for t in text), text
    assert any("wins_over 'planted.nothing-like-this'" in t for t in text), text
    assert any(i.kind == "evidence" and i.subject == "planted.misspelt" for i in issues)


def test_cli_exit_codes(tmp_path):
    from nsa_policy.cli import app

    broken = plant(tmp_path, "planted-schema", {"35-planted.yaml": "stage: backends\nrules:\n  - id: x\n    when: {}\n"})
    result = CliRunner().invoke(app, ["check", "--policy", broken, "--json"])
    assert result.exit_code == 1, result.output
    assert '"kind": "schema"' in result.output and "35-planted.yaml" in result.output
    result = CliRunner().invoke(app, ["check", "--policy", "defualt"])
    assert result.exit_code == 2
    assert "did you mean 'default'" in result.output + (result.stderr if result.stderr_bytes else "")
