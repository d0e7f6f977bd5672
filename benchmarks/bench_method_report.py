"""Issue 25's figures against three ways of timing the same adapter calls (gpu_bench_method.py's output).

  python benchmarks/bench_method_report.py METHOD.jsonl [METHOD.jsonl ...]   prints Markdown

Methods: bench's rounds taken in turns with a 1 GiB flush (`ours_ms`); triton.testing.do_bench medians
with its 256 MiB flush (`do_bench_ms`, one value per pass); do_bench with the plan made inside each call
(`do_bench_plan_per_call_ms`). Every ratio of two backends pairs times of the same file and pass.

"Reproduced within ±10 %": a range claim a–b when the measured lowest ratio is within 10 % of a and the
highest within 10 % of b; a "within ±x" claim when no ratio is further than 1.1·x from 1; an "up to m"
claim when the highest ratio is within 10 % of m.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Callable, Optional

BF16, FP8 = "bfloat16", "fp8_e4m3"
FA3, FM, KV = f"{BF16}/fa3", f"{BF16}/flashmla_sparse", f"{FP8}/flashmla_kv"
# (claim, phase, sizes kept, ratio of the times at one point, kind, claimed figures)
CLAIMS = [
    ("bf16 decode, batch ≤ 32: fa3 1.3–4.3× faster than flashmla_sparse", "decode", lambda s: s <= 32,
     lambda t: t[FM] / t[FA3], "range", (1.3, 4.3)),
    ("bf16 decode, batch ≥ 128: the two within ±8 %", "decode", lambda s: s >= 128,
     lambda t: t[FM] / t[FA3], "band", 0.08),
    ("bf16 prefill: the two within ±6 % at every shape", "prefill", lambda s: True,
     lambda t: t[FA3] / t[FM], "band", 0.06),
    ("fp8 decode, batch ≥ 32: flashmla_kv 1.23–1.5× the best bf16", "decode", lambda s: s >= 32,
     lambda t: t[KV] / min(t[FA3], t[FM]), "range", (1.23, 1.5)),
    ("fp8 decode, batch 1: up to 5× the best bf16", "decode", lambda s: s == 1,
     lambda t: t[KV] / min(t[FA3], t[FM]), "upto", 5.0),
]


def load(paths: list[str]) -> list[dict]:
    rows = []
    for i, p in enumerate(paths):
        for line in Path(p).read_text().splitlines():
            r = json.loads(line)
            if "backend" in r and "error" not in r:
                rows.append(dict(r, file=i))
    return rows


def methods(rows: list[dict]) -> dict[str, Callable[[dict], list[Optional[float]]]]:
    passes = max((len(r["do_bench_ms"]) for r in rows), default=0)
    return {
        "bench: rounds in turns, 1 GiB flush": lambda r: [r["ours_ms"]] + [None] * (passes - 1),
        "do_bench medians (256 MiB flush)": lambda r: list(r["do_bench_ms"]),
        "do_bench, plan made in each call": lambda r: [r["do_bench_plan_per_call_ms"]] + [None] * (passes - 1),
    }


def ratios(rows: list[dict], times: Callable[[dict], list[Optional[float]]], phase: str,
           keep: Callable[[int], bool], ratio: Callable[[dict], float]) -> list[tuple[dict, float]]:
    points: dict[tuple, dict] = {}
    for r in rows:
        if r["phase"] == phase and keep(r["size"]):
            points.setdefault((r["file"], r["heads"], r["size"]), {})[f"{r['kv']}/{r['backend']}"] = times(r)
    out = []
    for (f, heads, size), by in points.items():
        if not {FA3, FM, KV} <= set(by):
            continue
        for i in range(len(by[FA3])):
            t = {k: v[i] for k, v in by.items()}
            if all(x is not None for x in t.values()):
                out.append((dict(heads=heads, size=size, file=f, pass_=i), ratio(t)))  # type: ignore[arg-type]
    return out


def verdict(kind: str, claimed, lo: float, hi: float) -> tuple[str, str]:
    """(strictly inside the claim?, reproduced within ±10 %?)."""
    if kind == "range":
        a, b = claimed
        return (("yes" if a <= lo and hi <= b else "no"),
                ("yes" if abs(lo / a - 1) <= 0.1 and abs(hi / b - 1) <= 0.1 else "no"))
    if kind == "band":
        dev = max(abs(lo - 1), abs(hi - 1))
        return ("yes" if dev <= claimed else "no"), ("yes" if dev <= 1.1 * claimed else "no")
    return ("yes" if hi <= claimed else "no"), ("yes" if abs(hi / claimed - 1) <= 0.1 else "no")


def render(paths: list[str]) -> str:
    rows = load(paths)
    heads = sorted({r["heads"] for r in rows})
    lines = [f"Issue 25's figures (K = 2048, 32k context, {'/'.join(map(str, heads))} heads per rank) against "
             f"three ways of timing the same adapter calls, from "
             f"{', '.join(Path(p).parent.name + '/' + Path(p).name for p in paths)}.",
             "", "| claim | method | measured ratio | inside the claim | reproduced within ±10 % |",
             "|---|---|---|---|---|"]
    for text, phase, keep, ratio, kind, claimed in CLAIMS:
        for name, times in methods(rows).items():
            got = [x for _, x in ratios(rows, times, phase, keep, ratio)]
            if not got:
                continue
            lo, hi = min(got), max(got)
            inside, within = verdict(kind, claimed, lo, hi)
            lines.append(f"| {text} | {name} | {lo:.2f}–{hi:.2f} ({len(got)}) | {inside} | {within} |")
    lines += ["", f"Decode at ≤ 32 rows, from {Path(paths[0]).parent.name}: ms per call by each method, and "
              "the host's µs to enqueue one call "
              "(30 calls without waiting). do_bench's two passes are shown; bench's figure is the median of "
              "20 rounds.", "",
              "| heads | rows | backend | bench ms | do_bench ms (passes) | do_bench − bench | host µs |",
              "|---|---|---|---|---|---|---|"]
    for r in sorted((r for r in rows if r["phase"] == "decode" and r["size"] <= 32 and r["file"] == 0),
                    key=lambda r: (r["heads"], r["size"], r["kv"], r["backend"])):
        db = r["do_bench_ms"]
        lines.append(f"| {r['heads']} | {r['size']} | {r['backend']} ({'fp8' if r['kv'] == FP8 else 'bf16'}) | "
                     f"{r['ours_ms']:.4f} | {' / '.join(f'{x:.4f}' for x in db)} | "
                     f"{min(db) - r['ours_ms']:+.4f} to {max(db) - r['ours_ms']:+.4f} | {r['host_us']:.0f} |")
    big = [(r, x) for r in rows if r["ours_ms"] >= 0.3 for x in r["do_bench_ms"]]
    small = [(r, x) for r in rows if r["phase"] == "decode" and r["size"] <= 32 for x in r["do_bench_ms"]]
    if big and small:
        def spread(pairs):
            q = sorted(x / r["ours_ms"] for r, x in pairs)
            return f"{q[0]:.2f}–{q[-1]:.2f}× (median {q[len(q) // 2]:.2f}×, {len(q)} values)"
        lines += ["", f"do_bench / bench where a call takes ≥ 0.3 ms: {spread(big)}; at decode ≤ 32 rows: "
                  f"{spread(small)}."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: bench_method_report.py METHOD.jsonl [METHOD.jsonl ...]")
    sys.stdout.write(render(sys.argv[1:]))
