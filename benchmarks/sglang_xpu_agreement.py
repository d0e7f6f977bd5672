"""Agreement of each release bundle with that sglang release's own start-up code on an Intel XPU.

    python benchmarks/sglang_xpu_agreement.py [--release 0.5.20 ...] [--jobs 2] [--sample K]
        [--out disagreements.jsonl] [--record]

Issue 11 deliverable 2 (XPU as a device vendor). The oracle is scripts/sglang_oracle/policy_oracle.py
with its emulated XPU ("xpu": is_xpu through override_platform from 0.5.19, the imported probes before;
torch.cuda.get_device_capability answers (0, 0)), run in each release's side environment through
benchmarks/sglang_release_agreement.run_oracle. nsa-policy answers through
nsa_policy.engines.sglang.replay (the argv read with release X's spellings and choices, then
`--policy sglang-X`), on the catalog's Max 1550 (engine_replay.DEVICES["xpu"]).

The grid (XPU only): DeepSeek-V3.2 and GLM-5 x five kv spellings x seven prefill and seven decode
values (unset, intel_xpu, and CUDA/ROCm names) x two serving profiles each; every DSA architecture
(and a non-DSA one) x three kv dtypes x five backend pairs x three profiles; DeepSeek-V3.2 x every
profile x four kv dtypes x five backend pairs. Profiles are sglang_release_agreement.PROFILES
(HiSparse, dcp 2, DP attention, both threshold variables, learnable sink, index_kpool 2, TBO, page 16...).

--record writes benchmarks/results/sglang-xpu.json and the table in benchmarks/results/sglang-xpu.md.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Optional

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from sglang_release_agreement import ARCHS, PROFILES, _flag, _model, replace_block, run_oracle  # noqa: E402

from nsa_policy.engines.sglang.replay import agree, answer, outside  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "sglang-xpu.json"
TABLE_DOC = REPO / "benchmarks" / "results" / "sglang-xpu.md"
RELEASES = ["0.5.10", "0.5.11", "0.5.12", "0.5.13", "0.5.14", "0.5.15", "0.5.16", "0.5.17", "0.5.18", "0.5.19",
            "0.5.20", "0.5.21", "0.5.22", "0.5.23"]
DEVICE = "xpu"
KVS = ("auto", "bf16", "bfloat16", "fp8_e4m3", "fp8_e5m2")
PREFILL = (None, "intel_xpu", "flashmla_sparse", "flashmla_kv", "trtllm", "tilelang", "triton")
DECODE = (None, "intel_xpu", "flashmla_kv", "fa3", "trtllm", "triton", "aiter")
PAIRS = ((None, None), ("intel_xpu", None), (None, "intel_xpu"), ("flashmla_sparse", "flashmla_sparse"),
         ("trtllm", None))


def grid(release: str) -> Iterator[dict[str, Any]]:
    flag, names, n = _flag(release), list(PROFILES), 0

    def item(base: str, cfg: dict[str, Any], kv: str, p: Optional[str], d: Optional[str],
             profile: str) -> dict[str, Any]:
        nonlocal n
        n += 1
        argv, env, conf = PROFILES[profile]
        argv = ["--kv-cache-dtype", kv] + ([f"--{flag}-prefill-backend", p] if p else []) \
            + ([f"--{flag}-decode-backend", d] if d else []) + argv
        return {"id": n, "device": DEVICE, "preshuffle": False, "model": base, "config": {**cfg, **conf},
                "argv": argv, "env": env, "profile": profile}

    row = 0
    for model, kv, p, d in itertools.product(("ds32", "glm5"), KVS, PREFILL, DECODE):
        base, cfg = (model, {}) if model == "glm5" else _model("DeepseekV32ForCausalLM", {})
        for copy in range(2):
            yield item(base, cfg, kv, p, d, names[(row + 9 * copy) % len(names)])
        row += 1
    for arch, kv, (p, d) in itertools.product(ARCHS, ("auto", "bfloat16", "fp8_e4m3"), PAIRS):
        base, cfg = _model(arch, {})
        for copy in range(3):
            yield item(base, cfg, kv, p, d, names[(row + 6 * copy) % len(names)])
        row += 1
    for profile, kv, (p, d) in itertools.product(names, ("auto", "bf16", "bfloat16", "fp8_e4m3"), PAIRS):
        base, cfg = _model("DeepseekV32ForCausalLM", {})
        yield item(base, cfg, kv, p, d, profile)


def oracle(release: str, items: list[dict[str, Any]], jobs: int, cache: str) -> tuple[dict[int, dict[str, Any]], float]:
    """The release's answers (from --cache when it holds this exact grid: they do not depend on nsa-policy)."""
    import hashlib

    digest = hashlib.sha256(json.dumps(items, sort_keys=True).encode()).hexdigest()[:16]
    path = Path(cache) / f"xpu-{release}-{digest}.json" if cache else None
    if path is not None and path.exists():
        data = json.loads(path.read_text())
        return {int(k): v for k, v in data["answers"].items()}, data["oracle_s"]
    t0 = time.time()
    answers = run_oracle(release, items, jobs)
    t_oracle = round(time.time() - t0, 1)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"oracle_s": t_oracle, "jobs": jobs, "answers": answers}))
    return answers, t_oracle


def compare(release: str, items: list[dict[str, Any]], answers: dict[int, dict[str, Any]]) -> dict[str, Any]:
    bad, n_agree, n_outside = [], 0, 0
    t0 = time.time()
    for it in items:
        theirs, mine = answers[it["id"]], answer(release, it)
        if agree(mine, theirs):
            n_agree += 1
        elif outside(mine, theirs):
            n_outside += 1
        else:
            bad.append({"input": it, "sglang": theirs, "ours": mine})
    return {"agree": n_agree, "outside_dsa": n_outside, "bad": bad, "ours_s": round(time.time() - t0, 1)}


def record(entries: list[dict[str, Any]]) -> None:
    data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"runs": []}
    done = {e["release"] for e in entries}
    data["runs"] = sorted([r for r in data["runs"] if r["release"] not in done] + entries,
                          key=lambda r: tuple(int(x) for x in r["release"].split(".")))
    RESULTS.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    write_table(data)


BEGIN, END = "<!-- xpu-agreement:begin (generated by --record) -->", "<!-- xpu-agreement:end -->"


def write_table(data: dict[str, Any]) -> None:
    lines = [BEGIN, "", "| release | bundle | inputs | agreement (of the inputs inside DSA) | disagreements | "
             "outside DSA | sglang refuses | oracle time (jobs) | nsa-policy time | date | machine |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in data["runs"]:
        inside = r["inputs"] - r["outside_dsa"]
        lines.append(f"| {r['release']} | `{r['bundle']}` | {r['inputs']:,} | "
                     f"{100 * r['agree'] / inside:.2f} % ({r['agree']:,} of {inside:,}) | {inside - r['agree']:,} | "
                     f"{r['outside_dsa']:,} | {r['sglang_refuses']:,} | {r['oracle_s']:.0f} s ({r['jobs']}) | "
                     f"{r['ours_s']:.0f} s | {r['date'][:10]} | {r['machine']} |")
    lines += ["", END]
    replace_block(TABLE_DOC, lines, BEGIN, END, "# sglang on Intel XPU: release bundles vs each release\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--release", nargs="*", default=RELEASES)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--sample", type=int, default=0, help="every K-th input only (a quick look; not recorded)")
    ap.add_argument("--out", default="", help="disagreements, one JSON line each")
    ap.add_argument("--record", action="store_true")
    ap.add_argument("--cache", default="", help="folder for the oracle's answers: reused when the grid is the same")
    a = ap.parse_args()
    from nsa_policy.core.bundle import release_bundle

    entries, bad_all = [], []
    for release in a.release:
        items = list(grid(release))
        if a.sample:
            items = items[:: a.sample]
        answers, t_oracle = oracle(release, items, max(1, a.jobs), a.cache)
        res = compare(release, items, answers)
        bad_all += [{"release": release, **b} for b in res["bad"]]
        entry = {"release": release, "bundle": release_bundle(f"sglang-{release}"), "device": DEVICE,
                 "inputs": len(items), "agree": res["agree"], "outside_dsa": res["outside_dsa"],
                 "sglang_refuses": sum(not r["ok"] for r in answers.values()),
                 "oracle_s": t_oracle, "ours_s": res["ours_s"], "jobs": a.jobs,
                 "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                 "machine": f"{platform.machine()} {os.cpu_count()} cpus, python {platform.python_version()}"}
        entries.append(entry)
        print(json.dumps(entry), flush=True)
    if a.out:
        Path(a.out).write_text("".join(json.dumps(b) + "\n" for b in bad_all))
    if a.record and not a.sample:
        record(entries)


if __name__ == "__main__":
    main()
