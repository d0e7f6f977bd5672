"""Late refusals (issue 21): each sglang release's build-time checks against its bundle's NSA321.

tests/data/sglang/late/<X>.jsonl holds a seeded sample of scripts/sglang_oracle/late_checks.py's run: each
input and what the release's own checks (executed from its wheel) raised while building the DSA indexer and
attention backend with the values the bundle's start-up decision gives them. CI replays it without the
wheels: the bundle must warn NSA321 exactly where the release raised, with the release's message first.

With NSA_POLICY_SGLANG_WHEELS=<folder of sglang-<X>-*.whl> the checks also run from the wheels themselves
on a fresh sample (opt-in; skipped cleanly without it).
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
from pathlib import Path

import pytest

from nsa_policy.api import decide

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "sglang" / "late"
RELEASES = sorted((p.stem for p in DATA.glob("*.jsonl")), key=lambda r: tuple(int(x) for x in r.split(".")))


def _script():
    spec = importlib.util.spec_from_file_location("late_checks", REPO / "scripts" / "sglang_oracle" / "late_checks.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


LATE = _script()


def _norm(text: str) -> str:
    # sglang's union message also prints num_q_heads * union ("i.e. 64 rows"); the rule cannot multiply
    return re.sub(r"\s+", " ", re.sub(r", i\.e\. \d+ rows", "", text)).strip()


def test_every_release_from_0_5_16_has_late_replay_data() -> None:
    assert set(LATE.RELEASES) <= set(RELEASES), f"no late-check replay data for {sorted(set(LATE.RELEASES) - set(RELEASES))}"


@pytest.mark.parametrize("release", RELEASES)
def test_bundle_warns_exactly_where_the_release_refuses(release: str) -> None:
    lines = [json.loads(ln) for ln in (DATA / f"{release}.jsonl").read_text().splitlines() if ln.strip()]
    assert len(lines) >= 150 and {ln["release"] for ln in lines} == {release}
    refused = sum(ln["wheel"] is not None for ln in lines)
    assert 0 < refused < len(lines), "the sample must hold both refused and built inputs"
    bad = []
    for ln in lines:
        d = decide(LATE._facts(ln["input"]), f"sglang-{release}", trace=False)
        late = [w.message for w in d.warnings if w.code == "NSA321"]
        wheel = ln["wheel"]
        if wheel is None and late:
            bad.append((ln["input"], "the release builds it", late[0]))
        elif wheel is not None and not (late and _norm(wheel) in _norm(late[0])):
            bad.append((ln["input"], wheel, late[:1]))
    assert not bad, f"{len(bad)} of {len(lines)} disagree; first: {bad[0]}"


WHEELS = os.environ.get("NSA_POLICY_SGLANG_WHEELS")


@pytest.mark.skipif(not WHEELS, reason="set NSA_POLICY_SGLANG_WHEELS to a folder of sglang wheels (opt-in)")
@pytest.mark.parametrize("release", LATE.RELEASES)
def test_release_checks_from_the_wheel_agree_on_a_fresh_sample(release: str) -> None:
    pytest.importorskip("torch")
    wheel = next(iter(sorted(Path(str(WHEELS)).glob(f"sglang-{release}-*.whl"))), None)
    if wheel is None:
        pytest.skip(f"no sglang {release} wheel in {WHEELS}")
    checks = LATE.ReleaseChecks(release, wheel)
    rows = [LATE.compare(release, checks, inp) for inp in LATE.sample(release, 2000, seed=1221)]
    built = [r for r in rows if r["outcome"] != "not built"]
    assert built and any(r["outcome"] == "agree: refused" for r in rows)
    bad = [r for r in built if r["outcome"] == "disagree"]
    first = bad[0] if bad else {}
    assert not bad, f"{len(bad)} of {len(built)} disagree; first: {first.get('params')} wheel={first.get('wheel')!r} " \
                    f"bundle={first.get('bundle_late')}"
