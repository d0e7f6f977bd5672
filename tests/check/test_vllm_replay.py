"""Replay vLLM 0.33.0's own decisions (recorded by scripts/vllm_oracle/oracle.py: every 100th input of the
54,000-input grid and of the 100,000 seeded inputs drawn over the whole domain, benchmarks/results/vllm-0.33.md)
through the vllm-0.33 bundle. No vLLM needed."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "vllm" / "0.33.0"


def _compare():
    spec = importlib.util.spec_from_file_location("vllm_compare", ROOT / "scripts" / "vllm_oracle" / "compare.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _disagreements(rows: list[dict]) -> list[tuple[str, dict]]:
    cmp = _compare()
    out = []
    for r in rows:
        ours = cmp.policy_view(r)
        if ours.get("sparse") is False and r["vllm"].get("stage") in ("ParallelConfig", "ModelConfig"):
            continue  # a model without DSA: out of the decision's scope (counted apart in the results)
        if not cmp.same(r["vllm"], ours):
            out.append((cmp.disagreement_class(r, ours), r))
    return out


def test_vllm_033_recorded_grid_replays() -> None:
    rows = json.loads((DATA / "grid.json").read_text())
    assert len(rows) >= 500
    bad = _disagreements(rows)
    assert not bad, bad[:3]
    # the grid covers every device class, both models, errors and successes
    assert {r["device"] for r in rows} >= {"sm90", "sm100", "sm120", "gfx942"}
    assert any(r["vllm"].get("attention_backend") is None for r in rows)
    assert {r["vllm"].get("attention_backend") for r in rows} >= {"FLASHMLA_SPARSE", "FLASHINFER_MLA_SPARSE",
                                                                 "ROCM_AITER_MLA_SPARSE", "FLASHINFER_MLA_SPARSE_SM120"}
    # the parallel-shape check is reached (tp 1 with dcp 2 is in the grid)
    assert any(r["vllm"].get("stage") == "ParallelConfig" for r in rows)


def test_vllm_033_recorded_sample_replays() -> None:
    rows = json.loads((DATA / "sampled.json").read_text())
    assert len(rows) >= 900
    results = json.loads((ROOT / "benchmarks" / "results" / "vllm-0.33.json").read_text())
    bad = _disagreements(rows)
    # each class the full run still reports is allowed here, no other
    known = set(results["sampled"]["classes"])
    assert not [b for b in bad if b[0] not in known], [b for b in bad if b[0] not in known][:3]
    assert {r["device"][:3] for r in rows} >= {"sm9", "sm1", "gfx", "xpu", "cpu"}
    assert {r["vllm"].get("stage") for r in rows} >= {"ParallelConfig", "ModelConfig", "selector"}
