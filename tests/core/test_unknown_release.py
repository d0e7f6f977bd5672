"""A release newer than the newest nsa-policy knows is answered, with a note (NSA209) that says so and names the
bundle that answers; a known release answered by an older bundle gets no such note."""
from __future__ import annotations

import textwrap

from typer.testing import CliRunner

import nsa_policy
from nsa_policy.cli import app
from nsa_policy.engines.sglang.args import load_args
from nsa_policy.lint import LintOptions, lint_paths

DS = "deepseek-ai/DeepSeek-V3.2"


def _notes(policy: str, **kw: object) -> list:
    d = nsa_policy.resolve({"tp_size": 8}, device="h200", model=DS, policy=policy, env={}, **kw)  # type: ignore[arg-type]
    return [f for f in d.notes if f.code == "NSA209"]


def test_a_newer_sglang_release_gets_the_note() -> None:
    newest = load_args().newest
    (n,) = _notes("sglang-0.5.99")
    assert "sglang 0.5.99" in n.message and f"newest release nsa-policy knows ({newest})" in n.message
    assert "sglang-0.5.22's rules" in n.message


def test_known_releases_get_none() -> None:
    for policy in ("sglang-0.5.23", "sglang-0.5.15", "sglang-0.5.22", "default"):
        assert not _notes(policy), policy


def test_a_newer_vllm_release_gets_the_note_and_a_patch_of_the_known_series_none() -> None:
    (n,) = _notes("vllm-0.99", engine="vllm")
    assert "vLLM 0.99" in n.message and "vllm-0.33's rules" in n.message
    assert not _notes("vllm-0.33.1", engine="vllm")


def test_resolve_cli_prints_it_and_exits_0() -> None:
    r = CliRunner().invoke(app, ["resolve", "--device", "h200", "--model", DS, "--policy", "sglang-0.5.99"])
    assert r.exit_code == 0, r.output
    assert "NSA209 sglang 0.5.99 is newer than the newest release" in r.output


def test_lint_says_which_bundle_answers(tmp_path) -> None:
    p = tmp_path / "serve.sh"
    p.write_text(textwrap.dedent(f"""\
        # nsa-policy: device=h200
        python -m sglang.launch_server --model-path {DS} --tp-size 8
        """))
    report = lint_paths([str(p)], LintOptions(sglang_version="0.5.99", policy="sglang-0.5.99"))
    by_code = {d.code: d.message for d in report.diagnostics}
    assert "sglang-0.5.22's rules" in by_code["NSA414"]
    assert "sglang-0.5.22's rules" in by_code["NSA209"]
    report = lint_paths([str(p)], LintOptions(sglang_version="0.5.99"))
    assert "the policy findings come from default" in {d.code: d.message for d in report.diagnostics}["NSA414"]
