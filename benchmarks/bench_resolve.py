"""Cold start and warm resolve, side by side in one run, for the tree this script sits in.

Cold: `nsa-policy resolve … --json` as a fresh process (`python -c "from nsa_policy.cli import main;
main()"`, run from this tree's root so this tree's package is the one imported) vs a bare
`python -c "import pydantic, typer, yaml"`, interleaved; median wall time, CPU time (user + system)
and peak RSS per child (from wait4) over N runs each.
Warm: resolve() per call (memoised plain inputs) and the uncached evaluation, with and without the
trace. Two figures per row: wall time per call over at least a second (what a caller waits), and
CPU time per call, the least over 25 batches (on a shared machine the stable one: other processes
inflate wall time, not this thread's CPU time).
Prints a table and writes benchmarks/results/resolve.json (BENCH_OUT=path writes there instead).
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(os.environ.get("BENCH_OUT") or ROOT / "benchmarks" / "results" / "resolve.json")
MODEL = "deepseek-ai/DeepSeek-V3.2"
TOOL = "nsa-policy resolve --json"
BARE = "bare import pydantic, typer, yaml"


def run_child(argv: list[str]) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds and peak RSS (KiB) of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{argv} exited {proc.returncode}: {proc.stderr.read().decode()}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss


def cold(runs: int) -> dict:
    tool = [sys.executable, "-c", "from nsa_policy.cli import main; main()",
            "resolve", "--device", "b200", "--model", MODEL, "--json"]
    bare = [sys.executable, "-c", "import pydantic, typer, yaml"]
    samples: dict[str, list[tuple[float, float, int]]] = {TOOL: [], BARE: []}
    run_child(tool), run_child(bare)  # warm the page cache
    for _ in range(runs):
        samples[TOOL].append(run_child(tool))
        samples[BARE].append(run_child(bare))
    return {name: {"median_wall_s": statistics.median(w for w, _, _ in s),
                   "median_cpu_s": statistics.median(c for _, c, _ in s),
                   "median_peak_rss_mib": statistics.median(r for _, _, r in s) / 1024, "runs": len(s)}
            for name, s in samples.items()}


def per_call(fn, seconds: float = 1.0, batches: int = 25) -> tuple[float, float]:
    """(wall µs per call over >= `seconds`, least CPU µs per call over `batches` batches)."""
    fn()
    n, start = 0, time.perf_counter()
    while True:
        for _ in range(200):
            fn()
        n += 200
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            break
    wall = elapsed / n * 1e6
    size = max(1, n // (4 * batches))  # about a quarter of the wall loop again
    best = float("inf")
    for _ in range(batches):
        t0 = time.thread_time()
        for _ in range(size):
            fn()
        best = min(best, (time.thread_time() - t0) / size * 1e6)
    return wall, best


def warm() -> dict:
    sys.path.insert(0, str(ROOT))
    import nsa_policy
    from nsa_policy.api import build_facts, decide

    assert Path(nsa_policy.__file__).resolve().parent == ROOT / "nsa_policy", nsa_policy.__file__
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


def _tree() -> dict:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        head = None
    return {"root": str(ROOT), "git_head": head}


def main() -> None:
    runs = int(os.environ.get("BENCH_RUNS", "15"))
    # An installed wheel has its bytecode; a source tree where PYTHONDONTWRITEBYTECODE is set (this
    # development machine) would recompile every changed module on each cold start (~24 ms).
    import compileall

    compileall.compile_dir(str(ROOT / "nsa_policy"), quiet=1)
    c = cold(runs)
    w = warm()
    tool, bare = c[TOOL], c[BARE]
    ratio = tool["median_wall_s"] / bare["median_wall_s"]
    print(f"{f'cold start (median of {runs})':<52} {'wall s':>8} {'cpu s':>8} {'peak RSS MiB':>13}")
    for name, row in c.items():
        print(f"{name:<52} {row['median_wall_s']:>8.3f} {row['median_cpu_s']:>8.3f} {row['median_peak_rss_mib']:>13.1f}")
    print(f"{'ratio resolve / bare import (target <= 2.5)':<52} {ratio:>8.2f} "
          f"{tool['median_cpu_s'] / bare['median_cpu_s']:>8.2f} "
          f"{tool['median_peak_rss_mib'] / bare['median_peak_rss_mib']:>13.2f}")
    print()
    print(f"{'warm (us/call)':<60} {'wall':>8} {'cpu min':>8}")
    for name, (wall, cpu) in w.items():
        print(f"{name:<60} {wall:>8.2f} {cpu:>8.2f}")
    out = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": {
        "platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
        "load_average_1m_at_end": os.getloadavg()[0]},
        "tree": _tree(), "cold": c, "cold_ratio_wall": ratio,
        "warm_us_per_call": {k: v[0] for k, v in w.items()},
        "warm_cpu_us_per_call_min": {k: v[1] for k, v in w.items()},
        "targets": {"cold_ratio_wall_max": 2.5, "warm_resolve_us_max": 10}}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
    main()
