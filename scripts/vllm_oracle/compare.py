"""Compare the vllm-0.33 bundle with vLLM 0.33's own decisions (oracle.py's JSONL); write the results.

    python scripts/vllm_oracle/compare.py ORACLE.jsonl [--sample tests/data/vllm/0.33.0/grid.json]

Compared per input: the attention backend (or vLLM's error / the bundle's rejection), the KV dtype at
selection, the stored KV dtype, the block size and the dense short-prefill length. Writes
benchmarks/results/vllm-0.33.{md,json}; with --sample, every 100th input for the CI replay.
"""
from __future__ import annotations

import json
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import nsa_policy
from nsa_policy.base.errors import InputError

FIELDS = ("attention_backend", "requested_kv_cache_dtype", "kv_cache_dtype", "page_size", "dense_attn_kv_len_threshold")
DEVICE = {"sm80": "a100", "sm86": "sm86", "sm89": "l40s", "sm90": "h200", "sm100": "b200", "sm103": "b300",
          "sm120": "rtx-pro-6000", "sm121": "gb10", "gfx942": "mi300x", "gfx950": "mi355x"}


GRID_TEXT = ("10 device classes × DeepSeek-V3.2, GLM-5 × TP 1/2/4/8/16 × DCP 1/2 × 9 KV dtypes × "
             "10 forced backends incl. none × block size unset/32/64")


COMPARED = ("attention backend (or vLLM's ValueError = the bundle's NSA150/NSA154), KV dtype at selection, "
            "stored KV dtype, block size, dense short-prefill length")


def policy_view(row: dict) -> dict:
    cfg = {k: row[k] for k in ("tensor_parallel_size", "decode_context_parallel_size", "kv_cache_dtype",
                               "attention_backend", "block_size") if row[k] is not None}
    try:
        d = nsa_policy.resolve(cfg, device=DEVICE[row["device"]], model=row["model"], policy="vllm-0.33",
                               raise_on_error=False, trace=False)
    except InputError as exc:
        return {"attention_backend": None, "error": str(exc)[:80]}
    # vLLM raises (NSA150/NSA154) where the bundle rejects; the bundle's other errors do not stop vLLM here
    if any(e.code in ("NSA150", "NSA154") for e in d.errors):
        return {"attention_backend": None, "error": ",".join(e.code for e in d.errors)}
    return {f: getattr(d, f) for f in FIELDS}


def same(vllm: dict, ours: dict) -> bool:
    if vllm.get("attention_backend") is None or ours.get("attention_backend") is None:
        return vllm.get("attention_backend") is None and ours.get("attention_backend") is None
    return all(vllm[f] == ours[f] for f in FIELDS)


def main(path: str, sample: str | None) -> int:
    rows = [json.loads(line) for line in Path(path).read_text().splitlines()]
    t0 = time.perf_counter()
    diffs, kept = [], []
    for i, row in enumerate(rows):
        ours = policy_view(row)
        if not same(row["vllm"], ours):
            diffs.append({**row, "nsa_policy": ours})
        if i % 100 == 0:
            kept.append(row)
    secs = time.perf_counter() - t0
    agree = len(rows) - len(diffs)
    res = {"vllm": "0.33.0", "bundle": "vllm-0.33", "inputs": len(rows), "agree": agree,
           "agreement": round(100.0 * agree / len(rows), 3), "fields": list(FIELDS),
           "policy_seconds": round(secs, 1), "machine": f"{platform.node()} ({platform.machine()}, 2 cores, no GPU)",
           "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "first_differences": diffs[:20]}
    out = Path("benchmarks/results")
    (out / "vllm-0.33.json").write_text(json.dumps(res, indent=1) + "\n")
    errors = sum(1 for r in rows if r["vllm"].get("attention_backend") is None)
    (out / "vllm-0.33.md").write_text(f"""# vllm-0.33 against vLLM 0.33.0's own code

Measured {res['date']} on {res['machine']}: `scripts/vllm_oracle/oracle.py` (vLLM 0.33.0 installed with
`--no-deps` in a side venv, torch 2.13.0 CPU; only platform probes patched) against
`scripts/vllm_oracle/compare.py` (the `vllm-0.33` bundle through `nsa_policy.resolve`).

| | |
|---|---|
| inputs | {len(rows):,} ({GRID_TEXT}) |
| agreement | **{agree:,} / {len(rows):,} = {res['agreement']} %** |
| compared | {COMPARED} |
| vLLM raised | {errors:,} inputs |
| policy time | {res['policy_seconds']} s for all inputs (trace off) |

Not compared: the per-batch masked-MHA tables on SM100, the indexer cache dtype (no -ac.indexer_kv_dtype in
the grid), PCP. ROCm: vLLM's model builds ROCM_AITER_MLA_SPARSE without the selector; the oracle reproduces
that construction and calls vLLM's block-size function on a ROCm platform. A CI replay of every 100th input
is `tests/data/vllm/0.33.0/grid.json` (`tests/check/test_vllm_replay.py`, no vLLM needed).
""")
    if sample:
        Path(sample).parent.mkdir(parents=True, exist_ok=True)
        Path(sample).write_text(json.dumps(kept, indent=0) + "\n")
    print(json.dumps({k: res[k] for k in ("inputs", "agree", "agreement", "policy_seconds")}))
    return 0 if not diffs else 1


if __name__ == "__main__":
    args = sys.argv[1:]
    smp = args[args.index("--sample") + 1] if "--sample" in args else None
    sys.exit(main(args[0], smp))
