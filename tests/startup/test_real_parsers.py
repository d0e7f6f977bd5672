"""`nsa-policy launch` output parsed by sglang's REAL parsers (issue 10, deliverable 4). Opt-in.

Runs when NSA_POLICY_SGLANG_ENVS points at side environments built by
scripts/sglang_oracle/build_envs.sh (e.g. NSA_POLICY_SGLANG_ENVS=/work/sgenv); skipped otherwise.
The releases are NSA_POLICY_SGLANG_RELEASES (comma-separated), default 0.5.10,0.5.13,0.5.20,0.5.23.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from packaging.version import Version

ORACLE = Path(__file__).resolve().parents[2] / "scripts" / "sglang_oracle"
ROOT = os.environ.get("NSA_POLICY_SGLANG_ENVS")

pytestmark = pytest.mark.skipif(
    not ROOT or not (Path(ROOT) / "envs.json").is_file(),
    reason="opt-in: set NSA_POLICY_SGLANG_ENVS to the side environments built by "
           "scripts/sglang_oracle/build_envs.sh (e.g. /work/sgenv)")

RELEASES = [r for r in os.environ.get("NSA_POLICY_SGLANG_RELEASES", "0.5.10,0.5.13,0.5.20,0.5.23").split(",") if r]


@pytest.fixture(scope="module")
def oracle():
    sys.path.insert(0, str(ORACLE))
    try:
        import acceptance
        import run
    finally:
        sys.path.remove(str(ORACLE))
    envs = run.SideEnvs.find(ROOT)
    missing = [r for r in RELEASES if r not in envs.releases]
    if missing:
        pytest.skip(f"no side environment for sglang {', '.join(missing)} under {ROOT}")
    return run, acceptance, envs


def test_the_real_parser_refuses_what_the_release_removed(oracle) -> None:
    """The harness itself: the parser answers with argparse's own error, and accepts the canonical spelling."""
    run, _, envs = oracle
    if "0.5.23" not in envs.releases:
        pytest.skip("needs sglang 0.5.23")
    old, new = envs.parse("0.5.23", [["--model-path", "m", "--nsa-prefill-backend", "trtllm"],
                                     ["--model-path", "m", "--dsa-prefill-backend", "trtllm"]])
    assert not old["accepted"] and old["exit_code"] == 2
    assert "unrecognized arguments: --nsa-prefill-backend" in old["error"]
    assert new["accepted"] and new["values"]["dsa_prefill_backend"] == "trtllm"


@pytest.mark.parametrize("release", RELEASES)
def test_launch_argv_is_accepted_and_agrees_with_the_decision(oracle, release: str) -> None:
    _, acceptance, envs = oracle
    sig = acceptance.planner_signature()
    result = acceptance.run_release(envs, release, sig["version_param"])
    assert result["parsed"] > 0
    problems = [f"{f['id']}: {f['parser_error'] or '; '.join(f['mismatches'])}\n    {f['command']}"
                for f in result["failures"]]
    assert not problems, f"sglang {release}: {len(problems)} of {result['parsed']} scenarios fail:\n" + "\n".join(
        problems[:20])


def test_committed_0_5_23_answers_are_what_sglang_answers_today(oracle) -> None:
    """The replay data in tests/data/sglang/0.5.23 is reproducible from sglang 0.5.23's own pipeline (a sample)."""
    import json

    run, _, envs = oracle
    if "0.5.23" not in envs.releases:
        pytest.skip("needs sglang 0.5.23")
    data = Path(__file__).resolve().parents[1] / "data" / "sglang" / "0.5.23"
    grid = [json.loads(line) for line in (data / "grid.jsonl").read_text().splitlines() if line.strip()]
    answers = [json.loads(line) for line in (data / "answers.jsonl").read_text().splitlines() if line.strip()]
    assert len(grid) == len(answers) and [g["id"] for g in grid] == [a["id"] for a in answers]
    sample = list(range(0, len(grid), 25))
    out = envs.run_script("0.5.23", "policy_oracle.py", "".join(json.dumps(grid[i]) + "\n" for i in sample))
    fresh = run.in_input_order([json.loads(line) for line in out.splitlines() if line.strip()],
                               [grid[i] for i in sample], "sglang 0.5.23")
    fields = [k for k in answers[0] if k != "ms"]
    diffs = [(answers[i]["id"], {k: (answers[i][k], f.get(k)) for k in fields if answers[i][k] != f.get(k)})
             for i, f in zip(sample, fresh)]
    assert [d for d in diffs if d[1]] == []
    assert any(not answers[i]["ok"] for i in sample) and any(answers[i]["ok"] for i in sample)


# Flag spellings, on the command line and as --config keys: where the real parser refuses one, the release
# bundle refuses it (NSA319); where it warns, the bundle warns with the same text (NSA320). From 0.5.20 on,
# where the bundles judge every spelling (0.5.13-0.5.19 bundles judge only deprecated aliases).
SPELLINGS = [["--nsa-prefill-backend", "flashmla_kv"], ["--dsa-prefill-backend", "flashmla_kv"],
             ["--nsa-decode-backend", "flashmla_kv"], ["--enable-nsa-prefill-context-parallel"],
             ["--enable-dsa-prefill-context-parallel"], ["--enable-prefill-context-parallel"],
             ["--nsa-prefill-cp-mode", "in-seq-split"], ["--dsa-prefill-cp-mode", "in-seq-split"],
             ["--prefill-cp-mode", "in-seq-split"], ["--enable-prefill-cp"], ["--attn-dp-size", "2"],
             ["--dcp-size", "2"]]


@pytest.mark.parametrize("release", [r for r in RELEASES if Version(r) >= Version("0.5.20")])
def test_release_bundles_judge_spellings_as_the_real_parser(oracle, release: str, tmp_path) -> None:
    from nsa_policy.api import resolve
    from nsa_policy.core.bundle import release_bundle

    _, _, envs = oracle
    cases = []
    for flag in SPELLINGS:
        value = True if len(flag) == 1 else (int(flag[1]) if flag[1].isdigit() else flag[1])
        cases.append((flag, {flag[0]: value}))
        config = tmp_path / f"{flag[0][2:]}.yaml"
        config.write_text(f"{flag[0][2:]}: {'true' if value is True else value}\n")
        cases.append((["--config", str(config)], {flag[0][2:]: value}))  # a --config key, as sglang spells it
    answers = envs.parse(release, [["--model-path", "m", *argv] for argv, _ in cases])
    bundle = release_bundle(f"sglang-{release}")
    disagree = []
    for (argv, mapping), real in zip(cases, answers):
        d = resolve(mapping, device="h200", model="deepseek-ai/DeepSeek-V3.2", policy=bundle, env={},
                    raise_on_error=False)
        refused = any(f.code == "NSA319" for f in d.errors)
        warned = " ".join(f.message.split(": ", 1)[1] for f in d.warnings if f.code == "NSA320")
        said = " ".join(m for m in real["messages"] if "deprecated" in m)
        if refused != (not real["accepted"]) or (not refused and warned != said):
            disagree.append((argv, real["error"], said, refused, warned))
    assert disagree == []
    assert any(not real["accepted"] for real in answers) and any(real["accepted"] for real in answers)


# Prefill CP as the start-up library call reads the real parser's namespace: the legacy mode attributes hold
# their parser defaults whether or not their switch is on, and a legacy switch left off sits beside the new one.
def _cp_cases(release: str) -> list[tuple[list[str], tuple[bool, object]]]:
    flag = "dsa" if Version(release) >= Version("0.5.13") else "nsa"
    return [
        (["--enable-prefill-cp", "--cp-strategy", "zigzag"], (True, "zigzag")),
        (["--enable-prefill-cp", "--cp-strategy", "interleave"], (True, "interleave")),
        (["--enable-prefill-cp"], (True, None)),
        ([f"--enable-{flag}-prefill-context-parallel"], (True, "interleave")),
        ([f"--enable-{flag}-prefill-context-parallel", f"--{flag}-prefill-cp-mode", "in-seq-split"], (True, "zigzag")),
        ([], (False, None)),
    ]


@pytest.mark.parametrize("release", sorted({*RELEASES, "0.5.14", "0.5.16"}, key=Version))
def test_prefill_cp_is_read_from_the_real_namespace(oracle, release: str) -> None:
    from types import SimpleNamespace

    from nsa_policy.inputs import config_from

    run, _, envs = oracle
    if release not in envs.releases:
        pytest.skip(f"no side environment for sglang {release}")
    cases = _cp_cases(release)
    answers = envs.parse(release, [["--model-path", "m", *argv] for argv, _ in cases])
    checked = 0
    for (argv, want), got in zip(cases, answers):
        if not got["accepted"]:
            continue  # a spelling this release does not have (argparse refuses it; NSA319 says so)
        cfg = config_from(SimpleNamespace(**got["values"]))
        have = (cfg.enable_prefill_cp, cfg.cp_strategy)
        if want == (False, None):
            assert not cfg.enable_prefill_cp, (release, argv, got["values"])
        else:
            assert have == want, (release, argv, got["values"], have)
        checked += 1
    assert checked >= 3
