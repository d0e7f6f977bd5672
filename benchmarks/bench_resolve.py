"""Cold start and warm resolve, side by side in one run.

Cold: `nsa-policy resolve … --json` as a fresh process vs a bare `python -c "import pydantic, typer, yaml"`,
interleaved, median wall time and peak RSS (per child, from wait4) over N runs each.
Warm: resolve() per call (memoised plain inputs) and the uncached evaluation, with and without the trace.
Prints a table and writes benchmarks/results/resolve.json.
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

RESULTS = Path(__file__).resolve().parent / "results" / "resolve.json"
MODEL = "deepseek-ai/DeepSeek-V3.2"


def run_child(argv: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{argv} exited {proc.returncode}: {proc.stderr.read().decode()}")
    return wall, usage.ru_maxrss


def cold(runs: int) -> dict:
    exe = shutil.which("nsa-policy")
    tool = [exe] if exe else [sys.executable, "-c", "from nsa_policy.cli import main; main()"]
    tool += ["resolve", "--device", "b200", "--model", MODEL, "--json"]
    bare = [sys.executable, "-c", "import pydantic, typer, yaml"]
    samples: dict[str, list[tuple[float, int]]] = {"nsa-policy resolve --json": [], "bare import pydantic, typer, yaml": []}
    run_child(tool), run_child(bare)  # warm the page cache
    for _ in range(runs):
        samples["nsa-policy resolve --json"].append(run_child(tool))
        samples["bare import pydantic, typer, yaml"].append(run_child(bare))
    return {name: {"median_wall_s": statistics.median(w for w, _ in s), "median_peak_rss_mib": statistics.median(r for _, r in s) / 1024,
                   "runs": len(s)} for name, s in samples.items()}


def per_call(fn, seconds: float = 1.0) -> float:
    fn()
    n, start = 0, time.perf_counter()
    while True:
        for _ in range(200):
            fn()
        n += 200
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return elapsed / n * 1e6


def warm() -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import nsa_policy
    from nsa_policy.api import build_facts, decide

    cfg = {"kv_cache_dtype": "fp8_e4m3", "tp_size": 8}
    env: dict = {}
    facts = build_facts(cfg, device="b200", model=MODEL, env=env)
    return {
        "resolve() memoised, trace on (us/call)": per_call(lambda: nsa_policy.resolve(cfg, device="b200", model=MODEL, env=env)),
        "resolve() memoised, trace off (us/call)": per_call(
            lambda: nsa_policy.resolve(cfg, device="b200", model=MODEL, env=env, trace=False)),
        "uncached evaluation decide(), trace on (us/call)": per_call(lambda: decide(facts, trace=True)),
        "uncached evaluation decide(), trace off (us/call)": per_call(lambda: decide(facts, trace=False)),
        "uncached build_facts() + decide(), trace off (us/call)": per_call(
            lambda: decide(build_facts(cfg, device="b200", model=MODEL, env=env), trace=False)),
    }


def main() -> None:
    runs = int(os.environ.get("BENCH_RUNS", "15"))
    c = cold(runs)
    w = warm()
    tool, bare = c["nsa-policy resolve --json"], c["bare import pydantic, typer, yaml"]
    ratio = tool["median_wall_s"] / bare["median_wall_s"]
    print(f"{'cold start (median of %d)' % runs:<52} {'wall s':>8} {'peak RSS MiB':>13}")
    for name, row in c.items():
        print(f"{name:<52} {row['median_wall_s']:>8.3f} {row['median_peak_rss_mib']:>13.1f}")
    print(f"{'ratio resolve / bare import (target <= 2.5)':<52} {ratio:>8.2f} "
          f"{tool['median_peak_rss_mib'] / bare['median_peak_rss_mib']:>13.2f}")
    print()
    for name, us in w.items():
        print(f"{name:<60} {us:>8.2f}")
    out = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": {
        "platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count()},
        "cold": c, "cold_ratio_wall": ratio, "warm_us_per_call": w,
        "targets": {"cold_ratio_wall_max": 2.5, "warm_resolve_us_max": 10}}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
    main()
