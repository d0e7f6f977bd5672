"""The pitfalls of the sglang release a launch targets (issue 10, deliverable 3): where lint reads the
release from, and that the same launch written for a release that accepts it gets no such finding.
Every expectation is derived from the argument registry, not from release numbers written here."""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from nsa_policy.engines.sglang.args import load_args
from nsa_policy.lint import LintOptions, lint_paths

from .helpers import findings, run_lint

RELEASE_CODES = ("NSA410", "NSA411", "NSA412", "NSA413", "NSA414")
DS = "deepseek-ai/DeepSeek-V3.2"
LAUNCH = f"""\
    # nsa-policy: device=b200
    export SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD=4096
    python -m sglang.launch_server --model-path {DS} --tp 8 --dp 8 --enable-dp-attention --nsa-prefill-backend trtllm \\
      --nsa-decode-backend trtllm --kv-cache-dtype fp8_e4m3
    """


def lint_text(tmp_path, name: str, text: str, **opts):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return lint_paths([str(p)], LintOptions(**opts))


def release_findings(report) -> list[tuple[str, int]]:
    return [f for f in findings(report) if f[0] in RELEASE_CODES]


def expected(release: str) -> list[tuple[str, int]]:
    """What the registry says about LAUNCH's spellings and variable on `release`."""
    args = load_args()
    out = []
    if "SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD" in args.env_vars_ignored("dense_attn_kv_len_threshold", release):
        out.append(("NSA411", 2))
    verdict = {"removed": "NSA410", "not-yet": "NSA410", "deprecated": "NSA412"}
    for flag, line in (("--enable-dp-attention", 3), ("--nsa-prefill-backend", 3), ("--nsa-decode-backend", 4)):
        code = verdict.get(args.status(flag, release) or "canonical")
        if code:
            out.append((code, line))
    return sorted(out)


@pytest.mark.parametrize("release", load_args().releases)
def test_each_release_gets_the_registrys_verdict(tmp_path, release: str) -> None:
    r = lint_text(tmp_path, "run.sh", LAUNCH, sglang_version=release)
    assert release_findings(r) == expected(release)
    for d in r.diagnostics:
        if d.code in RELEASE_CODES:
            assert f"sglang {release} from --sglang-version" in d.message


def test_the_oldest_release_accepts_the_launch_and_the_newest_refuses_it(tmp_path) -> None:
    args = load_args()
    old = lint_text(tmp_path, "a.sh", LAUNCH, sglang_version=args.oldest)
    assert release_findings(old) == []
    assert ("NSA201", 2) in findings(old)  # that release reads the variable: the policy sees its 4096
    new = lint_text(tmp_path, "b.sh", LAUNCH, sglang_version=args.newest)
    assert {c for c, _ in release_findings(new)} == {"NSA410", "NSA411", "NSA412"}
    # the ignored variable is evaluated as absent: no statement about its 4096
    assert ("NSA201", 2) not in findings(new)
    assert not any("kept as given" in d.message or "from env" in d.message for d in new.diagnostics)


def test_without_a_release_nothing_release_specific_is_said(tmp_path) -> None:
    assert release_findings(lint_text(tmp_path, "run.sh", LAUNCH)) == []


@pytest.mark.parametrize("line, source", [
    ("FROM lmsysorg/sglang:v{v}-cu129", "image tag lmsysorg/sglang:v{v}-cu129 at line 1"),
    ("# image: docker.io/lmsysorg/sglang:{v}", "image tag docker.io/lmsysorg/sglang:{v} at line 1"),
    ('pip install "sglang[all]=={v}"', "pin sglang=={v} at line 1"),
    ("pip install sglang=={v} flashinfer-python", "pin sglang=={v} at line 1"),
    ("# nsa-policy: sglang={v}", "hint comment 'nsa-policy: sglang={v}' at line 1"),
])
def test_the_release_is_read_from_a_tag_a_pin_or_a_hint(tmp_path, line: str, source: str) -> None:
    v = load_args().newest
    r = lint_text(tmp_path, "run.sh", line.format(v=v) + "\n" + textwrap.dedent(LAUNCH))
    d = next(d for d in r.diagnostics if d.code == "NSA410")
    assert f"sglang {v} from {source.format(v=v)}" in d.message


def test_the_option_overrides_the_file_and_a_hint_comes_before_a_tag(tmp_path) -> None:
    args = load_args()
    text = f"# nsa-policy: sglang={args.oldest}\nFROM lmsysorg/sglang:v{args.newest}\n" + textwrap.dedent(LAUNCH)
    assert release_findings(lint_text(tmp_path, "a.sh", text)) == []  # the hint wins over the tag
    r = lint_text(tmp_path, "b.sh", text, sglang_version=args.newest)
    assert release_findings(r) and all("from --sglang-version" in d.message for d in r.diagnostics
                                       if d.code in RELEASE_CODES)


def test_cli_option_and_a_bad_release(tmp_path) -> None:
    p = tmp_path / "run.sh"
    p.write_text(textwrap.dedent(LAUNCH))
    newest = load_args().newest
    result = run_lint("--sglang-version", newest, str(p))
    assert result.exit_code == 1 and "NSA410" in result.output
    result = run_lint("--sglang-version", "latest", str(p))
    assert result.exit_code == 2 and "--sglang-version" in result.output and "Traceback" not in result.output
    r = lint_text(tmp_path, "c.sh", "# nsa-policy: sglang=latest\n" + textwrap.dedent(LAUNCH))
    assert ("NSA407", 1) in findings(r) and release_findings(r) == []


def test_a_release_outside_the_registry_is_checked_as_the_nearest(tmp_path) -> None:
    args = load_args()
    beyond = ".".join(str(int(p) + 1) if i == 1 else p for i, p in enumerate(args.newest.split(".")))
    r = lint_text(tmp_path, "run.sh", LAUNCH, sglang_version=beyond)
    assert ("NSA414", 3) in findings(r)
    assert [f for f in release_findings(r) if f[0] != "NSA414"] == expected(args.newest)


def test_an_abbreviation_argparse_takes_is_not_refused(tmp_path) -> None:
    # --tp is nsa-policy's own name for --tp-size, and argparse takes it as an unambiguous prefix
    r = lint_text(tmp_path, "run.sh", f"python -m sglang.launch_server --model-path {DS} --tp 8\n",
                  sglang_version=load_args().newest)
    assert release_findings(r) == []


def test_a_choice_listed_only_by_later_releases(tmp_path) -> None:
    args = load_args()
    listed = {rel: set(args.choices("dsa_prefill_backend", rel) or ()) for rel in args.releases}
    value = next(v for v in listed[args.newest] if v not in listed[args.oldest])
    first = next(rel for rel in args.releases if value in listed[rel])
    text = f"python -m sglang.launch_server --model-path {DS} --nsa-prefill-backend {value}\n"
    assert ("NSA413", 1) in findings(lint_text(tmp_path, "a.sh", text, sglang_version=args.oldest))
    assert "NSA413" not in {c for c, _ in findings(lint_text(tmp_path, "b.sh", text, sglang_version=first))}
    # a value no release lists is the policy's finding (a misspelt backend), not a release finding
    typo = f"python -m sglang.launch_server --model-path {DS} --nsa-prefill-backend flashmla_sparsee\n"
    assert "NSA413" not in {c for c, _ in findings(lint_text(tmp_path, "c.sh", typo, sglang_version=args.oldest))}


def test_lint_code_holds_no_release_numbers() -> None:
    """Every release fact comes from the registry (rules/catalog/sglang/args.yaml, backends.yaml)."""
    pkg = Path(__file__).resolve().parents[2] / "nsa_policy"
    files = [pkg / "lint" / "launch_checks.py", pkg / "lint" / "text.py", *sorted(pkg.glob("engines/*/flags.py"))]
    assert len(files) >= 3
    for path in files:
        code = "\n".join(ln.split("#", 1)[0] for ln in path.read_text().splitlines())  # comments may cite
        assert not re.search(r"\b0\.\d+\.\d+\b", code), path.name


def test_attn_dp_size_is_read_as_the_attention_dp_width(tmp_path) -> None:
    newest = load_args().newest
    head = f"# nsa-policy: device=h200\npython -m sglang.launch_server --model-path {DS} --tp-size 8"
    plain = findings(lint_text(tmp_path, "a.sh", head + "\n", sglang_version=newest))
    assert ("NSA205", 2) in plain  # 16 heads per rank, padded
    assert findings(lint_text(tmp_path, "b.sh", head + " --attn-dp-size 8\n", sglang_version=newest)) == []


def test_a_pin_in_the_file_comes_before_the_requirements_beside_it(tmp_path) -> None:
    args = load_args()
    (tmp_path / "requirements.txt").write_text(f"sglang=={args.oldest}\n")
    text = f"python -m sglang.launch_server --model-path {DS} --nsa-prefill-backend trtllm\n"
    assert release_findings(lint_text(tmp_path, "a.sh", text)) == []  # the oldest release spells --nsa-*
    r = lint_text(tmp_path, "b.sh", f"pip install sglang=={args.newest}\n" + text)
    assert ("NSA410", 2) in findings(r)
