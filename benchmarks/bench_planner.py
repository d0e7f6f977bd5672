"""Per-batch planner cost: `BatchPlanner.plan(...)` must take well under 1 µs per batch.

Pure Python, CPU only (no torch). Times each decision path (dense, fixed sparse, flashmla_auto on
sm90 and on Blackwell, decode) over many calls with timeit, best of several repeats, and also the
O(batch) convenience form `plan_lengths` for a few batch sizes.

Usage: python3 benchmarks/bench_planner.py [--out DIR]   (writes DIR/bench_planner.{json,md})
"""
from __future__ import annotations

import argparse
import datetime
import json
import pathlib
import platform
import sys
import timeit
import types

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from nsa_policy.runtime.planner import BatchPlanner  # noqa: E402

CALLS = 200_000
REPEATS = 7


def _decision(**kw):
    base = dict(applies=True, errors=[], device_class="sm90", kv_cache_dtype="bfloat16",
                prefill_backend="flashmla_sparse", decode_backend="fa3", index_topk=2048,
                dense_attn_kv_len_threshold=2048,
                runtime=types.SimpleNamespace(mha_chunk_capacity=131072, flashmla_auto_ratio=512,
                                              mha_one_shot=True))
    base.update(kw)
    return types.SimpleNamespace(**base)


CASES = [
    ("sm90 bf16, short prompt → dense MHA", _decision(), (1000, 1000, 1000, "extend")),
    ("sm90 bf16, long prompt → flashmla_sparse", _decision(), (9000, 9000, 9000, "extend")),
    ("sm90 fp8 flashmla_auto → flashmla_kv", _decision(kv_cache_dtype="fp8_e4m3", prefill_backend="flashmla_auto",
                                                       decode_backend="flashmla_kv"), (9000, 9000, 100, "extend")),
    ("sm100 fp8 flashmla_auto, ratio test → flashmla_sparse",
     _decision(device_class="sm100", kv_cache_dtype="fp8_e4m3", prefill_backend="flashmla_auto",
               decode_backend="trtllm"), (9000, 9000, 9000, "extend")),
    ("decode → decode backend", _decision(), (9000, 9000, 1, "decode")),
]


def best_ns(fn) -> float:
    return min(timeit.repeat(fn, number=CALLS, repeat=REPEATS)) / CALLS * 1e9


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows = []
    for name, dec, batch in CASES:
        planner = BatchPlanner.from_decision(dec)
        plan = planner.plan
        route = plan(*batch)
        # timed within this iteration, so the late-bound closure sees this iteration's values
        rows.append(dict(case=name, route=list(route), ns_per_batch=best_ns(lambda: plan(*batch))))  # noqa: B023
    empty_ns = best_ns(lambda: None)
    planner = BatchPlanner.from_decision(_decision())
    lengths = []
    for b in (1, 64, 512):
        seq, ext = [3000] * b, [100] * b
        lengths.append(dict(batch=b, ns_per_batch=best_ns(lambda: planner.plan_lengths(seq, ext))))  # noqa: B023
    env = dict(measured_utc=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               python=platform.python_version(), machine=platform.machine(),
               processor=_cpu_model(), calls=CALLS, repeats=REPEATS, empty_lambda_ns=empty_ns)
    md = [f"# Per-batch planner cost ({env['measured_utc']}, Python {env['python']}, {env['processor']})", "",
          f"Best of {REPEATS} × {CALLS} calls; an empty lambda call costs {empty_ns:.0f} ns here (included below).", "",
          "| batch | route | ns per batch |", "|---|---|---|"]
    md += [f"| {r['case']} | {r['route']} | {r['ns_per_batch']:.0f} |" for r in rows]
    md += ["", "`plan_lengths` (sums and max over per-request host lists, O(batch)):", "",
           "| requests | ns per batch |", "|---|---|"]
    md += [f"| {r['batch']} | {r['ns_per_batch']:.0f} |" for r in lengths]
    text = "\n".join(md) + "\n"
    print(text)
    if args.out:
        out = pathlib.Path(args.out)
        (out / "bench_planner.json").write_text(json.dumps(dict(environment=env, plan=rows,
                                                                plan_lengths=lengths), indent=1))
        (out / "bench_planner.md").write_text(text)


def _cpu_model() -> str:
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


if __name__ == "__main__":
    main()
