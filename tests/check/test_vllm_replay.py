"""Replay vLLM 0.33.0's own decisions (recorded by scripts/vllm_oracle/oracle.py; every 100th input of
the 54,000-input grid in benchmarks/results/vllm-0.33.md) through the vllm-0.33 bundle. No vLLM needed."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GRID = ROOT / "tests" / "data" / "vllm" / "0.33.0" / "grid.json"


def _compare():
    spec = importlib.util.spec_from_file_location("vllm_compare", ROOT / "scripts" / "vllm_oracle" / "compare.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_vllm_033_recorded_decisions_replay() -> None:
    rows = json.loads(GRID.read_text())
    cmp = _compare()
    assert len(rows) >= 500
    bad = [(r, cmp.policy_view(r)) for r in rows if not cmp.same(r["vllm"], cmp.policy_view(r))]
    assert not bad, bad[:3]
    # the grid covers every device class, both models, errors and successes
    assert {r["device"] for r in rows} >= {"sm90", "sm100", "sm120", "gfx942"}
    assert any(r["vllm"]["attention_backend"] is None for r in rows)
    assert {r["vllm"]["attention_backend"] for r in rows} >= {"FLASHMLA_SPARSE", "FLASHINFER_MLA_SPARSE",
                                                             "ROCM_AITER_MLA_SPARSE", "FLASHINFER_MLA_SPARSE_SM120"}
