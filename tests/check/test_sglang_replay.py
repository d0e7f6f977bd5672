"""Each release bundle against its sglang release's own answers, replayed without sglang installed.

tests/data/sglang/<X>/replay.jsonl holds a deterministic sample of the full differential grid
(benchmarks/sglang_release_agreement.py --write-replay K): each input in policy_oracle.py's format and
what sglang==X's real start-up pipeline answered. nsa-policy must agree on every one (the same
refusal; where both accept, the same DSA outputs), except refusals from sglang's dense-model code for
a model the release does not run as DSA, which are counted apart and must stay rare.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from nsa_policy.engines.sglang.replay import agree, answer, as_given, outside

DATA = Path(__file__).resolve().parents[1] / "data" / "sglang"
RELEASES = sorted((p.parent.name for p in DATA.glob("*/replay.jsonl")), key=lambda r: tuple(int(x) for x in r.split(".")))


def _lines(release: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / release / "replay.jsonl").read_text().splitlines() if line.strip()]


def test_every_release_bundle_has_replay_data() -> None:
    from nsa_policy.core.bundle import concrete_bundles

    bundles = {b.removeprefix("sglang-") for b in concrete_bundles() if b.startswith("sglang-0")}
    assert bundles <= set(RELEASES), f"no replay data for {sorted(bundles - set(RELEASES))}"


@pytest.mark.parametrize("release", RELEASES)
def test_bundle_agrees_with_the_release_on_its_replay_sample(release: str) -> None:
    lines = _lines(release)
    assert len(lines) >= 300 and {ln["release"] for ln in lines} == {release}
    bad, apart = [], 0
    for ln in lines:
        mine = answer(release, ln["input"])
        if agree(mine, ln["sglang"], as_given(release, ln["input"])):
            continue
        if outside(mine, ln["sglang"]):
            apart += 1
            continue
        bad.append((ln["input"]["argv"], ln["input"]["device"], ln["sglang"], mine))
    assert not bad, f"{len(bad)} of {len(lines)} disagree with sglang {release}; first: {bad[0]}"
    assert apart <= len(lines) // 100  # sglang's dense-model refusals stay a small, separately counted class
    # the sample exercises both sides: refusals and accepted DSA decisions
    assert any(not ln["sglang"]["ok"] for ln in lines) and any(ln["sglang"]["attention_backend"] in ("nsa", "dsa")
                                                             for ln in lines if ln["sglang"]["ok"])
