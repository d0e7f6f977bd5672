"""Each release bundle's KV layout against the pool row width that release's own code computes, replayed
without sglang (recorded by benchmarks/sglang_kv_layout.py --record from each release's
calculate_mla_kv_cache_dim; benchmarks/results/sglang-kv-layout.md)."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from nsa_policy.engines.sglang.replay import layout_width

DATA = Path(__file__).resolve().parents[1] / "data" / "sglang" / "kv_layout.jsonl"


def test_every_release_bundle_stores_the_row_width_its_release_computes() -> None:
    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    assert {r["release"] for r in rows} >= {"0.5.10", "0.5.14", "0.5.20", "0.5.22", "0.5.23"}
    compared, bad = Counter(), []
    for r in rows:
        mine = layout_width(r["release"], r)
        if mine is None:
            continue  # the input stage refused the pair: no layout decided
        compared[r["release"]] += 1
        if mine != r["dim"]:
            bad.append((r["release"], r["hip"], r["prefill"], r["decode"], r["kv"], r["dim"], mine))
    assert not bad, bad[:5]
    # both widths occur, on both platforms: the comparison can fail
    assert {r["dim"] for r in rows} == {576, 656} and min(compared.values()) >= 150
