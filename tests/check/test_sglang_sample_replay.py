"""Each release bundle against its sglang release's own answers on the sampled inputs, replayed without sglang.

tests/data/sglang/<X>/sample.jsonl holds every K-th input of the seeded sample that
benchmarks/sglang_release_agreement.py --grid sample drew from the whole domain of every input
(benchmarks/sglang_release_sample.py), and sample-catalog.jsonl the same for --grid sample-catalog (the model
drawn from every catalog model, GLM-5.2/5.3/5.3-Flash included), each with what sglang==X's real start-up
pipeline answered. Every line must
agree, be one of sglang's refusals for a model the release does not run as DSA (counted apart), or fall in a
disagreement class the sampled run recorded as known for that release (benchmarks/results/sglang-releases.json,
same grid): a change that makes a new class fails here.
"""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from nsa_policy.engines.sglang.replay import FIELDS, agree, answer, as_given, outside

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "sglang"
RESULTS = REPO / "benchmarks" / "results" / "sglang-releases.json"
GRIDS = ("sample", "sample-catalog")


def _v(release: str) -> tuple[int, ...]:
    return tuple(int(x) for x in release.split("."))


RELEASES = sorted((p.parent.name for p in DATA.glob("*/sample.jsonl")), key=_v)
FILES = sorted(((p.parent.name, p.stem) for g in GRIDS for p in DATA.glob(f"*/{g}.jsonl")), key=lambda f: (_v(f[0]), f[1]))


def _classifier():
    spec = importlib.util.spec_from_file_location("sglang_release_sample", REPO / "benchmarks" / "sglang_release_sample.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("sglang_release_sample", mod)
    spec.loader.exec_module(mod)
    return mod.disagreement_class


def _known(release: str, grid: str) -> set[str]:
    runs = json.loads(RESULTS.read_text())["runs"]
    run = next(r for r in runs if r["grid"] == grid and r["release"] == release)
    return {c["class"] for c in run.get("disagreement_classes", [])}


def test_the_newest_releases_have_sampled_replay_data() -> None:
    assert {"0.5.20", "0.5.21", "0.5.22", "0.5.23"} <= set(RELEASES)


def test_every_sampled_release_has_its_catalog_sample() -> None:
    assert {r for r, g in FILES if g == "sample-catalog"} == set(RELEASES)


@pytest.mark.parametrize("release,grid", FILES)
def test_bundle_agrees_with_the_release_on_its_sampled_inputs(release: str, grid: str) -> None:
    lines = [json.loads(ln) for ln in (DATA / release / f"{grid}.jsonl").read_text().splitlines() if ln.strip()]
    assert len(lines) >= 300 and {ln["release"] for ln in lines} == {release} and {ln["grid"] for ln in lines} == {grid}
    classify, known = _classifier(), _known(release, grid)
    agreed, new = 0, []
    for ln in lines:
        mine = answer(release, ln["input"])
        if agree(mine, ln["sglang"], as_given(release, ln["input"])):
            agreed += 1
        elif not outside(mine, ln["sglang"], anywhere=True):
            cls = classify(mine, ln["sglang"], FIELDS)
            if cls not in known:
                new.append((cls, ln["input"]))
    assert not new, f"{len(new)} of {len(lines)} disagree with sglang {release} outside its known classes; first: {new[0]}"
    assert agreed >= len(lines) // 2
    # the sample exercises both sides: refusals and accepted DSA decisions
    assert any(not ln["sglang"]["ok"] for ln in lines) and any(ln["sglang"]["attention_backend"] in ("nsa", "dsa")
                                                             for ln in lines if ln["sglang"]["ok"])
