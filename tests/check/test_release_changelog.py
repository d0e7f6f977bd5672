"""docs/sglang-releases.md is what `nsa-policy diff --releases` generates.

Generating every release takes minutes, so CI generates one step (sglang-0.5.21 → sglang-0.5.22,
two runs over the space) and checks that the committed doc holds exactly that section; the rest of
the doc is checked for its structure (every release bundle and every registry release listed).
Regenerate with `nsa-policy diff --releases --format markdown --out docs/sglang-releases.md`."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nsa_policy.engines.sglang import changelog

DOC = Path(__file__).resolve().parents[2] / "docs" / "sglang-releases.md"
HOW = f"docs/sglang-releases.md is stale: run `{changelog.COMMAND}` and commit it"
STEP = "sglang-0.5.22"


@pytest.fixture(scope="module")
def log():
    return changelog.release_changelog(STEP, STEP)


def test_the_committed_section_is_what_the_generator_gives(log):
    [step] = log.steps
    assert (step.previous, step.bundle) == ("sglang-0.5.21", STEP)
    committed = changelog.step_section(DOC.read_text(encoding="utf-8"), STEP)
    assert committed is not None, HOW
    assert committed.rstrip("\n") == changelog.render_step_markdown(step).rstrip("\n"), HOW


def test_the_step_is_a_diff_with_counts_classes_and_examples(log):
    [step] = log.steps
    report = step.report
    assert report is not None and report.inputs == len(log.space) and 0 < report.changed < report.inputs
    assert sum(c.count for c in report.classes if c.kind == "status") <= report.changed
    # a compat bundle's refusals are NSA3xx errors: every status change names its first error
    for c in (c for c in report.classes if c.kind == "status"):
        ((before, after), _), = c.transitions.most_common(1)
        assert "rejected" not in (before, after) or (c.cause_a or c.cause_b), c.title()
    assert 0 < len(step.examples) <= changelog.MAX_EXAMPLES
    for ex in step.examples:  # before and after differ, as the class says
        assert ex["before"] != ex["after"], ex
        assert "nsa-policy resolve --device " in ex["command"] and "--nsa-" not in ex["command"]  # 0.5.22 spells --dsa-*
    # 0.5.22's own changes show up: --dcp-size 2 makes unset backends trtllm, page 64 × index_kpool
    outputs = {(c.what, t) for c in report.classes if c.kind == "output" for t in c.transitions}
    assert any(what == "decode_backend" and move[1] == "trtllm" for what, move in outputs), outputs
    assert ("page_size", (64, 128)) in outputs


def test_example_commands_reproduce_the_input(log, tmp_path, monkeypatch):
    """An example's command (config.json written first for model keys no flag carries) decides as the space input."""
    import shlex

    from nsa_policy.cli import app

    [step] = log.steps
    # prefer an index_kpool / learnable-sink variant: its command writes config.json first
    ex = next((e for e in step.examples if e["command"].startswith("printf ")), step.examples[0])
    monkeypatch.chdir(tmp_path)
    resolve = ex["command"]
    if ex["command"].startswith("printf "):
        write, _, resolve = ex["command"].partition(" && ")
        words = shlex.split(write)
        assert words[0] == "printf" and words[-2:] == [">", "config.json"]
        Path("config.json").write_text(words[2], encoding="utf-8")
    words = shlex.split(resolve)
    start = words.index("nsa-policy")
    env = dict(w.split("=", 1) for w in words[:start])  # VAR=value prefixes
    argv = words[start + 1:] + ["--policy", STEP, "--json"]
    assert argv[0] == "resolve"
    result = CliRunner().invoke(app, argv, env=env)
    assert result.exit_code in (0, 1), result.output
    decided = json.loads(result.output)
    from nsa_policy.catalog.store import load_catalog
    from nsa_policy.core.bundle import get_bundle
    from nsa_policy.core.evaluator import evaluate
    from nsa_policy.verify.coverage import facts_from_case_input
    from nsa_policy.verify.run import RECORD_FIELDS

    direct = evaluate(get_bundle(STEP), facts_from_case_input(ex["input"]), load_catalog(), trace=False)
    assert [decided[f] for f in RECORD_FIELDS] == [getattr(direct, f) for f in RECORD_FIELDS]
    assert [e["code"] for e in decided["errors"]] == [e.code for e in direct.errors]


def test_the_doc_lists_every_release(log):
    text = DOC.read_text(encoding="utf-8")
    assert text.startswith(f"# {changelog.TITLE}\n") and changelog.COMMAND in text.split("\n## ")[0], HOW
    assert changelog.INTRO.rstrip() in text, HOW
    for bundle in log.chain:  # a section per release bundle
        assert changelog.step_section(text, bundle) is not None, (bundle, HOW)
    owners = changelog.release_owners()
    glance = text.split("## Releases at a glance", 1)[1].split("\n## ", 1)[0]
    rows = [line.split(" | ") for line in glance.splitlines() if line.startswith("| ") and "`" in line]
    for bundle, releases in owners.items():  # and every registry release in the table, on a row of its bundle
        for release in releases:
            assert any(release in row[0].lstrip("| ").split(", ") and f"`{bundle}`" in row[1] for row in rows), \
                (release, bundle, HOW)
    assert f"{len(log.space)} inputs" in text, HOW


def test_release_chain_is_in_version_order():
    chain = changelog.release_chain()
    assert chain[0] == "sglang-0.5.10" and "sglang-pre-21783" not in chain
    from nsa_policy.base.versions import parse_version

    versions = [parse_version(b.removeprefix("sglang-")) for b in chain]
    assert versions == sorted(versions)
    owners = changelog.release_owners()
    assert "0.5.15.post1" in owners["sglang-0.5.15"] and "0.5.23" in owners["sglang-0.5.22"]


@pytest.mark.parametrize("argv, needle", [
    (["diff", "sglang-0.5.21"], "--releases"),  # one bundle and no --releases
    (["diff", "--releases", "--inputs", "x.yaml"], "--inputs"),
    (["diff", "--releases", "sglang-0.5.9"], "sglang-0.5.9"),  # older than every release bundle
    (["diff", "--releases", "sglang-0.5.22", "sglang-0.5.11"], "newer"),
])
def test_bad_release_ranges_are_one_line_usage_errors(argv, needle):
    from nsa_policy.cli import app

    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert needle in result.output and "Traceback" not in result.output
