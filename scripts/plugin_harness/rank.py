"""Per-rank agreement against the real engines (project python; issue 22). Runs rank_run.py in the side
environment of run.py and checks what each rank process did.

    python scripts/plugin_harness/rank.py sglang --release 0.5.23 [--write]
    python scripts/plugin_harness/rank.py vllm [--write]

Cases (2 ranks; NVML replays the synthetic mixed node, rank_run.py): CUDA_VISIBLE_DEVICES=1,2 puts both
ranks and the starting process on H200s; =1,0 puts rank 1 on a B200. Checked: every rank logs a
rank_check line with the starting process's decision id; it agrees exactly where its GPU is the starting
process's kind; a disagreement is refused (the rank stops, PluginRefused, before the model loads) in
enforce only. --write records benchmarks/results/plugins/rank-<engine>-<release>.json, which
tests/plugins/test_rank_replay.py replays without the engines.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from run import ROOT, install_wheel, side  # noqa: E402

CASES = [{"mode": m, "cuda_visible_devices": cvd, "tp": 2, "device": "sm90"}
         for m, cvd in (("audit", "1,0"), ("fill", "1,2"), ("fill", "1,0"), ("enforce", "1,2"), ("enforce", "1,0"))]
DISAGREEING = {"1,2": set(), "1,0": {1}}  # rank → on a B200 while the starting process decided on an H200


def check(out: list[dict]) -> list[dict]:
    failures = []
    for res in out:
        case = res["case"]
        ranks = {e["rank"]: e for e in res["log"] if e["status"] == "rank_check"}
        parent = [e for e in res["log"] if e["status"] != "rank_check"]
        if res["error"] or len(parent) != 1:
            failures.append({"case": case, "check": "the starting process decided once", "error": res["error"]})
            continue
        for rank in range(case["tp"]):
            entry, proc = ranks.get(rank), res["ranks"].get(str(rank), {})
            expect = "disagrees" if rank in DISAGREEING[case["cuda_visible_devices"]] else "agrees"
            if entry is None:
                failures.append({"case": case, "rank": rank, "check": "rank logged its decision"})
                continue
            if entry["decision_id"] != parent[0]["decision_id"]:
                failures.append({"case": case, "rank": rank, "check": "shared decision id"})
            if entry["agreement"] != expect:
                failures.append({"case": case, "rank": rank, "check": f"rank {expect}", "entry": entry})
            refused = bool(proc.get("refused_by_plugin"))
            if refused != (expect == "disagrees" and case["mode"] == "enforce"):
                failures.append({"case": case, "rank": rank, "check": "refused exactly in enforce on a disagreement",
                                 "refused": refused, "tail": proc.get("stderr_tail")})
    return failures


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("engine", choices=("sglang", "vllm"))
    ap.add_argument("--release", default=None)
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args()
    release = a.release or ("0.5.23" if a.engine == "sglang" else "0.33.0")
    t0 = time.time()
    nsa = install_wheel()
    python, env, var = side(a.engine, release, nsa)
    env[var] = "nsa_policy"
    overlay = os.environ.get("SGLANG_OVERLAY")  # what importing sglang's scheduler needs beyond the start-up env
    if a.engine == "sglang" and overlay:
        env["PYTHONPATH"] = os.pathsep.join([nsa, overlay, *env["PYTHONPATH"].split(os.pathsep)[1:]])
    proc = subprocess.run([python, os.path.join(HERE, "rank_run.py"), a.engine], capture_output=True, text=True,
                          env=env, cwd=ROOT, input="".join(json.dumps(c) + "\n" for c in CASES))
    out = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or len(out) != len(CASES):
        sys.exit(f"rank_run.py failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    failures = check(out)
    summary = {"engine": a.engine, "release": release, "cases": out, "failures": failures,
               "measured": {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "host": platform.node(),
                            "machine": f"{os.cpu_count()} cores (shared), no GPU: NVML replays the synthetic mixed node",
                            "wall_s": round(time.time() - t0, 1)}}
    for f in failures:
        print("FAIL", json.dumps(f)[:500])
    print(json.dumps({"engine": a.engine, "release": release, "cases": len(out), "failures": len(failures)}))
    if a.write:
        path = os.path.join(ROOT, "benchmarks", "results", "plugins", f"rank-{a.engine}-{release}.json")
        with open(path, "w") as fh:
            json.dump(summary, fh, indent=1, sort_keys=True)
            fh.write("\n")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
