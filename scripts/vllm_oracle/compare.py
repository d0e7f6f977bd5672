"""Compare the vllm-0.33 bundle with vLLM 0.33's own decisions (oracle.py's JSONL); write the results.

    python scripts/vllm_oracle/compare.py GRID.jsonl [--sampled SAMPLED.jsonl] [--sample tests/data/vllm/0.33.0/grid.json]
        [--sampled-replay tests/data/vllm/0.33.0/sampled.json]

Compared per input: the attention backend (or vLLM's error / the bundle's rejection), the KV dtype at
selection, the stored KV dtype, the block size and the dense short-prefill length; for a model without DSA,
that vLLM builds no sparse layer and the decision does not apply. Writes benchmarks/results/vllm-0.33.{md,json}
with the grid's figure and the sampled run's beside it, each disagreement counted by class; with --sample /
--sampled-replay, every 100th input of each run for the CI replay.
"""
from __future__ import annotations

import json
import platform
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

import nsa_policy
from nsa_policy.base.errors import InputError

FIELDS = ("attention_backend", "requested_kv_cache_dtype", "kv_cache_dtype", "page_size", "dense_attn_kv_len_threshold")
# Intel XPU: vLLM's XPU platform picks the backend; its KV layout and block size are not compared there
XPU_FIELDS = ("attention_backend", "requested_kv_cache_dtype")
DEVICE = {"sm80": "a100", "sm86": "sm86", "sm89": "l40s", "sm90": "h200", "sm100": "b200", "sm103": "b300",
          "sm120": "rtx-pro-6000", "sm121": "gb10", "gfx942": "mi300x", "gfx950": "mi355x", "xpu": "xpu", "cpu": "cpu"}
# the bundle's findings that stand for a refusal vLLM raises before it serves
REFUSALS = ("NSA003", "NSA050", "NSA150", "NSA154", "NSA155")


GRID_TEXT = ("10 device classes × DeepSeek-V3.2, GLM-5 × TP 1/2/4/8/16 × DCP 1/2 × 9 KV dtypes × "
             "10 forced backends incl. none × block size unset/32/64")
SAMPLED_TEXT = ("seeded draws over every device class of the catalog (CUDA, ROCm, XPU, CPU) × every catalog model × "
                "every AttentionBackendEnum name and CacheDType vLLM 0.33 registers × TP 1-32, DCP 1-16, PCP 1-4 "
                "(invalid shapes included) × block size unset/1/16/32/48/64/128/256")
COMPARED = ("attention backend (or vLLM's error = the bundle's refusal: NSA003/NSA050/NSA150/NSA154/NSA155), KV dtype "
            "at selection, stored KV dtype, block size, dense short-prefill length; XPU: backend and KV dtype at "
            "selection; a model without DSA: no sparse layer = the decision does not apply")


def policy_view(row: dict) -> dict:
    cfg = {k: row[k] for k in ("tensor_parallel_size", "decode_context_parallel_size", "kv_cache_dtype",
                               "attention_backend", "block_size", "prefill_context_parallel_size")
           if row.get(k) is not None}
    try:
        d = nsa_policy.resolve(cfg, device=DEVICE[row["device"]], model=row["model"], policy="vllm-0.33",
                               raise_on_error=False, trace=False)
    except InputError as exc:
        return {"attention_backend": None, "error": str(exc)[:80]}
    if not d.applies:
        return {"sparse": False}
    # vLLM raises where the bundle refuses; the bundle's other errors do not stop vLLM here
    if any(e.code in REFUSALS for e in d.errors):
        return {"attention_backend": None, "error": ",".join(e.code for e in d.errors)}
    return {f: getattr(d, f) for f in FIELDS}


def same(vllm: dict, ours: dict) -> bool:
    if vllm.get("sparse") is False or ours.get("sparse") is False:
        return vllm.get("sparse") is False and ours.get("sparse") is False
    if vllm.get("attention_backend") is None or ours.get("attention_backend") is None:
        return vllm.get("attention_backend") is None and ours.get("attention_backend") is None
    fields = XPU_FIELDS if vllm.get("platform") == "xpu" else FIELDS
    return all(vllm[f] == ours[f] for f in fields)


def _kind(res: dict) -> str:
    if res.get("sparse") is False:
        return "no sparse layer"
    if res.get("attention_backend") is None:
        return f"raises ({res.get('stage') or res.get('error', '')[:24]})"
    return "runs"


def disagreement_class(row: dict, ours: dict) -> str:
    """One class per (vendor, what vLLM does, what the bundle says[, the fields that differ])."""
    vendor = "rocm" if row["device"].startswith("gfx") else row["device"] if row["device"] in ("xpu", "cpu") else "cuda"
    v, o = _kind(row["vllm"]), _kind(ours)
    if v == o == "runs":
        fields = XPU_FIELDS if row["vllm"].get("platform") == "xpu" else FIELDS
        o = "runs, differs in " + "/".join(f for f in fields if row["vllm"][f] != ours[f])
    elif o.startswith("raises"):
        o = f"refuses ({ours.get('error', '')[:40]})"
    return f"{vendor}: vLLM {v}; nsa-policy {o}"


def run(rows: list[dict]) -> dict:
    t0 = time.perf_counter()
    diffs, classes, host, not_dsa = [], Counter(), 0, Counter()
    for row in rows:
        if row["vllm"].get("stage") == "other":  # an exception of this GPU-less host, not vLLM's answer
            host += 1
            continue
        ours = policy_view(row)
        if ours.get("sparse") is False and row["vllm"].get("stage") in ("ParallelConfig", "ModelConfig"):
            # a model without DSA: vLLM checks its parallel shape first; nsa-policy decides nothing for it
            not_dsa[row["vllm"]["stage"]] += 1
            continue
        if not same(row["vllm"], ours):
            diffs.append({**row, "nsa_policy": ours})
            classes[disagreement_class(row, ours)] += 1
    n = len(rows) - host - sum(not_dsa.values())
    agree = n - len(diffs)
    return {"inputs": len(rows), "compared": n, "host_limited": host, "not_dsa_refused": dict(not_dsa), "agree": agree,
            "agreement": round(100.0 * agree / n, 3) if n else None, "classes": dict(classes.most_common()),
            "vllm_raised": sum(1 for r in rows if r["vllm"].get("attention_backend") is None
                               and r["vllm"].get("sparse") is not False),
            "policy_seconds": round(time.perf_counter() - t0, 1), "first_differences": diffs[:20]}


def _not_compared(res: Optional[dict]) -> str:
    if res is None:
        return "-"
    refused = res.get("not_dsa_refused", {})
    return (f"sampled: {res['host_limited']:,} inputs where this GPU-less host raised inside vLLM's backend validation "
            f"(ROCm probes of torch.cuda), not an answer of vLLM's; {sum(refused.values()):,} inputs of a model without "
            f"DSA that vLLM refuses for its parallel shape ({refused}), where nsa-policy does not apply and says nothing")


def _row(label: str, res: Optional[dict]) -> str:
    if res is None:
        return f"| {label} | not run |"
    return f"| {label} | **{res['agree']:,} / {res['compared']:,} = {res['agreement']} %** |"


def main(grid_path: str, sampled_path: Optional[str], sample: Optional[str], sampled_replay: Optional[str]) -> int:
    grid_rows = [json.loads(line) for line in Path(grid_path).read_text().splitlines()]
    sampled_rows = [json.loads(line) for line in Path(sampled_path).read_text().splitlines()] if sampled_path else []
    grid = run(grid_rows)
    sampled = run(sampled_rows) if sampled_rows else None
    meta = {"vllm": "0.33.0", "bundle": "vllm-0.33", "fields": list(FIELDS),
            "machine": f"{platform.node()} ({platform.machine()}, 2 cores, no GPU)",
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d")}
    out = Path("benchmarks/results")
    (out / "vllm-0.33.json").write_text(json.dumps({**meta, "grid": grid, "sampled": sampled}, indent=1) + "\n")
    class_lines = "\n".join(f"| {name} | {count:,} |" for name, count in (sampled or {}).get("classes", {}).items())
    grid_classes = "\n".join(f"| {name} | {count:,} |" for name, count in grid["classes"].items())
    (out / "vllm-0.33.md").write_text(f"""# vllm-0.33 against vLLM 0.33.0's own code

Measured {meta['date']} on {meta['machine']}: `scripts/vllm_oracle/oracle.py` (vLLM 0.33.0 installed with
`--no-deps` in a side venv, torch 2.13.0 CPU; only platform probes patched) against
`scripts/vllm_oracle/compare.py` (the `vllm-0.33` bundle through `nsa_policy.resolve`).

| | |
|---|---|
| fixed grid | {grid['inputs']:,} inputs ({GRID_TEXT}) |
{_row('grid agreement', grid)}
| sampled | {sampled['inputs'] if sampled else 0:,} inputs ({SAMPLED_TEXT}; seed in the command below) |
{_row('sampled agreement', sampled)}
| compared | {COMPARED} |
| vLLM raised | grid {grid['vllm_raised']:,}; sampled {sampled['vllm_raised'] if sampled else 0:,} inputs |
| not compared | {_not_compared(sampled)} |
| policy time | grid {grid['policy_seconds']} s, sampled {sampled['policy_seconds'] if sampled else 0} s (trace off) |

Disagreements by class, sampled run (none listed: none left):

| class | inputs |
|---|---|
{class_lines}

Grid disagreements by class (none listed: none left):

| class | inputs |
|---|---|
{grid_classes}

Classes the sampled run found (issue 21), each a rule test before its fix: TP % DCP and PCP x DCP shapes vLLM's
ParallelConfig refuses (`vllm-base/tests/common.yaml` tp1-dcp2-refused, tp8-dcp3-refused, pcp2-dcp4-tp8-refused);
on ROCm every registered backend name and every KV dtype is taken and ignored or stored as asked
(`vllm-0.33/tests/forced.yaml` mi300x-*); on CUDA every registered name parses and fails validation, XPU_MLA_SPARSE
is accepted (h200-forced-xpu-sparse-accepted-then-crashes), CUTLASS_MSA/TRITON_MSA select automatically
(h200-msa-alias-selects-automatically); a harness gap, fixed in the oracle: dense short prefill is off under PCP+DCP.
Then (2026-12-02): on Intel XPU vLLM's platform returns XPU_MLA_SPARSE for every sparse layer, TURBOQUANT for a
turboquant_* KV dtype, whatever --attention-backend names and without validating either; `vllm-0.33` reports that
with NSA355 (`vllm-0.33/tests/forced.yaml` xpu-*) where it refused NSA155 (`vllm-default` still refuses: its KV
layout and block size there are not catalogued). FLASHMLA_SPARSE takes head 512 (GLM-5.3-Flash, NoPE) on SM90
only, with a bf16/fp16/fp8_ds_mla cache (`vllm-0.33/tests/selection.yaml` b300-glm53-flash-*).

Checks reached: ParallelConfig's own validation (`tp % dcp`, PCP x DCP: config/parallel.py, which
EngineArgs.create_engine_config runs before any model code), ModelConfig.verify_with_parallel_config (heads % TP),
AttentionConfig's parsing (the MiniMax MSA aliases leave the backend to automatic selection), the model hook, the
platform's selector (CUDA, XPU, CPU) or the ROCm model's direct construction, the KV rewrite, the block size and
the dense short-prefill test. Not compared: the per-batch masked-MHA tables on SM100, the indexer cache dtype,
XPU's KV layout and block size. Backends whose module does not import on a GPU-less host (FlashInfer's, CUTLASS
MLA, Triton-only, torchvision-dependent ones) count as refused there, as vLLM's own selector does with an
ImportError; each is a dense, non-MLA or head-512/128/192 backend that a DSA layer (head 576) fails anyway.
CI replays every 100th input of each run: `tests/data/vllm/0.33.0/grid.json` and `sampled.json`
(`tests/check/test_vllm_replay.py`, no vLLM needed).

```bash
/work/vllmenv/bin/python scripts/vllm_oracle/oracle.py /tmp/vllm-grid.jsonl
/work/vllmenv/bin/python scripts/vllm_oracle/oracle.py /tmp/vllm-sampled.jsonl --sample 100000 --seed 33
python scripts/vllm_oracle/compare.py /tmp/vllm-grid.jsonl --sampled /tmp/vllm-sampled.jsonl \\
    --sample tests/data/vllm/0.33.0/grid.json --sampled-replay tests/data/vllm/0.33.0/sampled.json
```
""")
    for path, rows in ((sample, grid_rows), (sampled_replay, sampled_rows)):
        if path and rows:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            kept = [r for i, r in enumerate(rows) if i % 100 == 0 and r["vllm"].get("stage") != "other"]
            Path(path).write_text(json.dumps(kept, indent=0) + "\n")
    summary = {"grid": {k: grid[k] for k in ("inputs", "agree", "agreement", "classes")}}
    if sampled:
        summary["sampled"] = {k: sampled[k] for k in ("inputs", "compared", "agree", "agreement", "classes")}
    print(json.dumps(summary, indent=1))
    return 0 if not grid["classes"] and not (sampled or {}).get("classes") else 1


def _opt(args: list[str], name: str) -> Optional[str]:
    return args[args.index(name) + 1] if name in args else None


if __name__ == "__main__":
    argv = sys.argv[1:]
    sys.exit(main(argv[0], _opt(argv, "--sampled"), _opt(argv, "--sample"), _opt(argv, "--sampled-replay")))
