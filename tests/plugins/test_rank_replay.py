"""Replays the per-rank runs recorded against the real engines (scripts/plugin_harness/rank.py --write:
sglang's run_scheduler_process and vLLM's init_worker, benchmarks/results/plugins/rank-*.json) without
the engines: each rank's decision, made again from the inputs the starting process exported on the
device that rank read, has the recorded digest; the starting process's has the recorded parent digest;
agreement is their equality; and the run met every check (refused exactly in enforce on a disagreement)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from nsa_policy.engines.sglang import plugin as sglang_plugin
from nsa_policy.engines.vllm import plugin as vllm_plugin
from nsa_policy.integration.fleet import agreement_digest, agreement_view, view_digest

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "plugins"
FILES = sorted(RESULTS.glob("rank-*.json"))
def _digest(engine: str, inputs: dict, device: str, tmp_path: Path) -> str:
    if engine == "sglang":  # the exported inputs hold the model's config itself
        return agreement_digest(sglang_plugin.decide_from_inputs(inputs, device))
    # vLLM's process 0 exported the path it read (a temp dir of the recording, gone): the same config.json
    # in a folder here, and the decision's model named as process 0 named it (the view holds the path)
    folder = tmp_path / Path(inputs["fields"]["model"]).name
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(inputs["model"]))
    decision = vllm_plugin.decide_from_inputs({**inputs, "model": None, "fields": {**inputs["fields"], "model": str(folder)}},
                                              device)
    view = agreement_view(decision)
    assert view["model"] == str(folder)
    return view_digest({**view, "model": inputs["fields"]["model"]})


def test_both_engines_recorded():
    names = {f.name for f in FILES}
    assert {"rank-sglang-0.5.23.json", "rank-vllm-0.33.0.json"} <= names, names


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_rank_run_replays(path, tmp_path):
    result = json.loads(path.read_text())
    assert result["failures"] == []
    engine = result["engine"]
    outcomes = set()
    for case in result["cases"]:
        inputs = case["inputs"]
        assert inputs, case["case"]
        parent_digest = _digest(engine, inputs, case["parent_device"], tmp_path)
        ranks = [e for e in case["log"] if e["status"] == "rank_check"]
        assert len(ranks) == case["case"]["tp"]
        for entry in ranks:
            assert entry["parent_digest"] == parent_digest
            assert _digest(engine, inputs, entry["device"], tmp_path) == entry["digest"], entry
            assert entry["agreement"] == ("agrees" if entry["digest"] == parent_digest else "disagrees")
            refused = case["ranks"][str(entry["rank"])]["refused_by_plugin"]
            assert refused == (entry["agreement"] == "disagrees" and case["case"]["mode"] == "enforce")
            outcomes.add((case["case"]["mode"], entry["agreement"], refused))
    assert ("enforce", "disagrees", True) in outcomes and ("fill", "disagrees", False) in outcomes
    assert ("enforce", "agrees", False) in outcomes
