"""The KV layout each release bundle decides against the KV-pool row width that release's own code computes.

    python benchmarks/sglang_kv_layout.py [--release X ...] [--record]

sglang's side: scripts/sglang_oracle/layout_probe.py in the release's side environment calls the release's
calculate_mla_kv_cache_dim (a function from 0.5.16, a ModelRunner method before) for DeepSeek-V3.2's shape,
on HIP or CUDA, for every pair of DSA backend names the release lists and both KV dtypes. nsa-policy's side:
`--policy sglang-X` with those backends and that KV dtype on an MI300X (HIP) or an H200 (CUDA); its
kv_cache_layout maps to a row width (bf16-576 and fp8-576-per-tensor: 576; fp8-656-blockwise: 656).
Agreement = the same width. --record writes tests/data/sglang/kv_layout.jsonl (replayed in CI) and the
table in benchmarks/results/sglang-kv-layout.md.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from nsa_policy.engines.sglang.replay import layout_width  # noqa: E402  (shared with the CI replay)

PROBE = REPO / "scripts" / "sglang_oracle" / "layout_probe.py"
REPLAY = REPO / "tests" / "data" / "sglang" / "kv_layout.jsonl"
DOC = REPO / "benchmarks" / "results" / "sglang-kv-layout.md"


def grid(release: str) -> list[dict[str, Any]]:
    from nsa_policy.engines.sglang.args import load_args

    names = [n for n in load_args().choices("dsa_prefill_backend", release) or ()]
    decode = [n for n in load_args().choices("dsa_decode_backend", release) or ()]
    return [{"id": i, "hip": hip, "prefill": p, "decode": d, "kv": kv} for i, (hip, p, d, kv) in enumerate(
        itertools.product((True, False), names, decode, ("fp8_e4m3", "bfloat16")))]


def theirs(release: str, items: list[dict[str, Any]]) -> dict[int, int]:
    envs = json.loads((Path(os.environ.get("NSA_POLICY_SGLANG_ENVS", "/work/sgenv")) / "envs.json").read_text())
    e = envs[release]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "SGL_", "PYTHON"))}
    env.update(PYTHONPATH=":".join(e["pythonpath"]), PYTHONNOUSERSITE="1")
    out = subprocess.run([e["python"], str(PROBE)], input="".join(json.dumps(i) + "\n" for i in items),
                         capture_output=True, text=True, env=env, check=True).stdout
    return {r["id"]: r["dim"] for r in map(json.loads, out.splitlines())}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--release", action="append")
    ap.add_argument("--record", action="store_true")
    a = ap.parse_args()
    releases = a.release or ["0.5.10", "0.5.11", "0.5.12", "0.5.13", "0.5.14", "0.5.15", "0.5.16", "0.5.17",
                             "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"]
    rows, replay = [], []
    for release in releases:
        items = grid(release)
        dims = theirs(release, items)
        compared = [(i, dims[i["id"]], layout_width(release, i)) for i in items]
        decided = [(i, t, m) for i, t, m in compared if m is not None]
        bad = [(i, t, m) for i, t, m in decided if t != m]
        rows.append((release, len(items), len(decided), len(decided) - len(bad), bad[:3]))
        replay += [{"release": release, **{k: v for k, v in i.items() if k != "id"}, "dim": t} for i, t, _ in compared]
        print(f"{release}: {len(decided) - len(bad)} of {len(decided)} decided layouts agree "
              f"({len(items)} backend/dtype/platform combinations)" + (f"; e.g. {bad[:2]}" if bad else ""))
    if a.record:
        REPLAY.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in replay))
        when = datetime.now(timezone.utc).isoformat(timespec="seconds")
        lines = ["# KV layout: each release bundle vs the release's own pool row width", "",
                 f"Measured {when} on the development machine (2-core x86_64, no GPU) with "
                 "`python benchmarks/sglang_kv_layout.py --record`: the release's calculate_mla_kv_cache_dim "
                 "(scripts/sglang_oracle/layout_probe.py, its side environment) against the width of the "
                 "bundle's kv_cache_layout, for every pair of DSA backend names the release lists × "
                 "fp8_e4m3/bfloat16 × HIP/CUDA (MI300X/H200). A combination where the decision sets no layout "
                 "(the input stage refused it) is not compared. CI replays `tests/data/sglang/kv_layout.jsonl`.",
                 "", "| release | combinations | layouts decided | agree |", "|---|---|---|---|"]
        lines += [f"| {r} | {n:,} | {d:,} | {g:,} ({100 * g / d:.2f} %) |" for r, n, d, g, _ in rows]
        DOC.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
