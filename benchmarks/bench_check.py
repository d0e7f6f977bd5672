"""`nsa-policy check` over the whole enumerated space of every shipped bundle: the target is ≤ 10 s.

Measures the command an operator or CI runs (a fresh `nsa-policy check` process, all shipped bundles,
default workers), median of N runs, plus the in-process time per bundle. Prints a table and writes
benchmarks/results/check.json with the machine and date.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "check.json"
TARGET_S = 10.0


def cli_run() -> tuple[float, int]:
    exe = shutil.which("nsa-policy")
    argv = ([exe] if exe else [sys.executable, "-c", "from nsa_policy.cli import main; main()"]) + ["check"]
    start = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - start, proc.returncode


def main() -> int:
    runs = int(os.environ.get("BENCH_RUNS", "3"))
    from nsa_policy.engine.bundle import concrete_bundles
    from nsa_policy.verify.exhaustive import check_bundle
    from nsa_policy.verify.run import default_workers

    per_bundle = {}
    for name in concrete_bundles():
        report = check_bundle(name)
        per_bundle[name] = {"inputs": report.inputs, "seconds": round(report.seconds, 2), "findings": len(report.issues)}
    walls, codes = [], []
    for _ in range(runs):
        wall, rc = cli_run()
        walls.append(wall)
        codes.append(rc)
    median = statistics.median(walls)
    result = {
        "benchmark": "nsa-policy check (every shipped bundle, whole space, fresh process)",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
                    "processor": platform.processor() or platform.machine(),
                    "load_average_1m_at_end": round(os.getloadavg()[0], 2)},
        "workers": default_workers(),
        "runs": runs, "wall_s": [round(w, 2) for w in walls], "median_s": round(median, 2),
        "exit_codes": codes, "target_s": TARGET_S, "within_target": median <= TARGET_S,
        "in_process": per_bundle,
        "inputs_total": sum(b["inputs"] for b in per_bundle.values()),
    }
    print(f"{'bundle':<20} {'inputs':>8} {'seconds':>8} {'findings':>9}")
    for name, row in per_bundle.items():
        print(f"{name:<20} {row['inputs']:>8} {row['seconds']:>8.2f} {row['findings']:>9}")
    print(f"nsa-policy check (all bundles, fresh process): median {median:.2f} s over {runs} runs "
          f"{[round(w, 2) for w in walls]} - target {TARGET_S:.0f} s: {'OK' if median <= TARGET_S else 'MISSED'}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS}")
    return 0 if median <= TARGET_S and not any(codes) else 1


if __name__ == "__main__":
    sys.exit(main())
