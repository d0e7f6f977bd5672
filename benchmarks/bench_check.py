"""`nsa-policy check` of every shipped bundle, one bundle per fresh process: the target is ≤ 10 s per bundle.

Each bundle is checked as an operator or CI checks it: `nsa-policy check --policy NAME --json` in a
new process (default workers: up to 2), run from this tree's root so this tree's package is the one
imported. Per bundle: wall time and CPU time (user + system of the process and the workers it
reaped, from wait4), median over N runs. The total is the sum of the per-bundle medians.

With `--before DIR` (a copy of the package from another commit: DIR/nsa_policy) every run of this
tree is paired with a run of DIR, interleaved, on the same rules (this tree's, via
NSA_POLICY_RULES_DIR), so load from other jobs on a shared machine falls on both alike; the table
then shows before, after and their ratio. Each pair's JSON reports must be identical apart from the
elapsed seconds (the same findings, rules matched and effective, space): a speed-up that changes an
answer fails the benchmark.

Writes benchmarks/results/check.json and check.md (BENCH_OUT=path.json writes there and beside it).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(os.environ.get("BENCH_OUT") or ROOT / "benchmarks" / "results" / "check.json")
TARGET_S = 10.0


def shipped_bundles() -> list[str]:
    # the bundles `check` checks (its engines: sglang's; vLLM bundles are covered by their rule tests and replay)
    out = subprocess.run([sys.executable, "-c", "from nsa_policy.verify.exhaustive import checked_bundles; "
                          "print('\\n'.join(checked_bundles()))"], cwd=ROOT, env=_env(), capture_output=True,
                         text=True, check=True)
    return out.stdout.split()


def _env() -> dict[str, str]:
    # the same rules for both trees: this one's (a shipped bundle is read from rules/, never a wheel's copy)
    return {**os.environ, "NSA_POLICY_RULES_DIR": str(ROOT / "rules")}


def check_once(tree: Path, bundle: str) -> tuple[float, float, dict]:
    """(wall s, CPU s, the JSON report without its elapsed seconds) of one fresh `check --policy bundle`.
    CPU: the child's and its pool workers' (it reaps them), as RUSAGE_CHILDREN grows once it is reaped."""
    argv = [sys.executable, "-c", "from nsa_policy.cli import main; main()", "check", "--policy", bundle, "--json"]
    cpu_before = _children_cpu()
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=tree, env=_env(), capture_output=True)
    wall = time.perf_counter() - start
    cpu = _children_cpu() - cpu_before
    if proc.returncode not in (0, 1):  # 1 = findings: still a measurement, compared like any answer
        raise SystemExit(f"check --policy {bundle} in {tree} exited {proc.returncode}: {proc.stderr.decode()[-2000:]}")
    report = json.loads(proc.stdout)
    for b in report["bundles"]:
        b.pop("seconds", None)
    return wall, cpu, report


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _row(walls: list[float], cpus: list[float]) -> dict:
    return {"wall_s": [round(w, 2) for w in walls], "median_wall_s": round(statistics.median(walls), 2),
            "cpu_s": [round(c, 2) for c in cpus], "median_cpu_s": round(statistics.median(cpus), 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, help="a tree holding the package before the change (DIR/nsa_policy)")
    ap.add_argument("--before-label", default="before", help="what the before tree is (a commit), for the record")
    ap.add_argument("--runs", type=int, default=int(os.environ.get("BENCH_RUNS", "1")))
    ap.add_argument("--policy", action="append", help="only these bundles (default: every shipped bundle)")
    args = ap.parse_args()
    bundles = args.policy or shipped_bundles()
    trees: dict[str, Path] = {"after": ROOT}
    if args.before is not None:
        trees = {"before": args.before.resolve(), "after": ROOT}
    load_start = os.getloadavg()
    per_bundle: dict[str, dict] = {}
    identical = True
    for name in bundles:
        samples: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in trees}
        reports: dict[str, dict] = {}
        for _ in range(args.runs):
            for label, tree in trees.items():  # interleaved: the same load falls on both
                wall, cpu, report = check_once(tree, name)
                samples[label][0].append(wall)
                samples[label][1].append(cpu)
                reports[label] = report
        row: dict = {"inputs": reports["after"]["bundles"][0]["inputs"],
                     "findings": len(reports["after"]["bundles"][0]["issues"])}
        for label in trees:
            row[label] = _row(*samples[label])
        if "before" in trees:
            row["same_report"] = reports["before"] == reports["after"]
            identical = identical and row["same_report"]
            row["ratio_wall"] = round(row["before"]["median_wall_s"] / row["after"]["median_wall_s"], 2)
            row["ratio_cpu"] = round(row["before"]["median_cpu_s"] / row["after"]["median_cpu_s"], 2)
        per_bundle[name] = row
        print(_line(name, row), flush=True)
    totals = {label: {"wall_s": round(sum(r[label]["median_wall_s"] for r in per_bundle.values()), 2),
                      "cpu_s": round(sum(r[label]["median_cpu_s"] for r in per_bundle.values()), 2)} for label in trees}
    worst = max(per_bundle.items(), key=lambda kv: kv[1]["after"]["median_wall_s"])
    result = {
        "benchmark": "nsa-policy check --policy NAME --json, one fresh process per shipped bundle (default workers)",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
                    "processor": platform.processor() or platform.machine(),
                    "load_average_at_start": [round(x, 2) for x in load_start],
                    "load_average_at_end": [round(x, 2) for x in os.getloadavg()]},
        "trees": {"after": "this tree", **({"before": args.before_label} if args.before else {})},
        "runs": args.runs, "target_s_per_bundle": TARGET_S,
        "bundles": per_bundle, "total": totals,
        "slowest": {"bundle": worst[0], "median_wall_s": worst[1]["after"]["median_wall_s"]},
        "within_target": all(r["after"]["median_wall_s"] <= TARGET_S for r in per_bundle.values()),
        **({"identical_reports": identical} if args.before else {}),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    RESULTS.with_suffix(".md").write_text(render_markdown(result))
    for label, t in totals.items():
        print(f"total {label}: wall {t['wall_s']:.1f} s, CPU {t['cpu_s']:.1f} s")
    print(f"wrote {RESULTS} and {RESULTS.with_suffix('.md')}")
    return 0 if identical else 1


def _line(name: str, row: dict) -> str:
    after = row["after"]
    text = f"{name:<20} {row['inputs']:>7} inputs  after {after['median_wall_s']:6.2f} s wall {after['median_cpu_s']:6.2f} s CPU"
    if "before" in row:
        b = row["before"]
        text += (f"  before {b['median_wall_s']:6.2f} s wall {b['median_cpu_s']:6.2f} s CPU  "
                 f"x{row['ratio_wall']:.2f} wall x{row['ratio_cpu']:.2f} CPU  "
                 + ("same report" if row["same_report"] else "REPORT DIFFERS"))
    return text


def render_markdown(result: dict) -> str:
    m = result["machine"]
    has_before = "before" in result["trees"]
    lines = [
        "# `nsa-policy check`: seconds per shipped bundle",
        "",
        f"Measured by `benchmarks/bench_check.py` on {result['date']}: {m['platform']}, Python {m['python']}, "
        f"{m['cpus']} CPUs, load average (1/5/15 min) {m['load_average_at_start']} at the start and "
        f"{m['load_average_at_end']} at the end (a shared machine: other jobs ran alongside). Each cell is the "
        f"median of {result['runs']} fresh `nsa-policy check --policy NAME --json` process(es) (default workers); "
        "CPU is user + system time of the process and its workers. Target: "
        f"{result['target_s_per_bundle']:.0f} s wall per bundle.",
        "",
    ]
    if has_before:
        lines += [f"Before: {result['trees']['before']}. After: {result['trees']['after']}. Runs of the two were interleaved on "
                  "the same rules; every pair of JSON reports was compared: "
                  + ("identical for every bundle." if result.get("identical_reports") else "SOME DIFFER."), ""]
        lines += ["| bundle | inputs | before wall s | after wall s | wall ratio | before CPU s | after CPU s "
                  "| CPU ratio | same report |", "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for name, r in result["bundles"].items():
            lines.append(f"| {name} | {r['inputs']} | {r['before']['median_wall_s']:.2f} | {r['after']['median_wall_s']:.2f} | "
                         f"{r['ratio_wall']:.2f} | {r['before']['median_cpu_s']:.2f} | {r['after']['median_cpu_s']:.2f} | "
                         f"{r['ratio_cpu']:.2f} | {'yes' if r['same_report'] else 'NO'} |")
        t = result["total"]
        lines.append(f"| **total** | | {t['before']['wall_s']:.1f} | {t['after']['wall_s']:.1f} | "
                     f"{t['before']['wall_s'] / t['after']['wall_s']:.2f} | {t['before']['cpu_s']:.1f} | "
                     f"{t['after']['cpu_s']:.1f} | {t['before']['cpu_s'] / t['after']['cpu_s']:.2f} | |")
    else:
        lines += ["| bundle | inputs | wall s | CPU s |", "|---|---:|---:|---:|"]
        for name, r in result["bundles"].items():
            lines.append(f"| {name} | {r['inputs']} | {r['after']['median_wall_s']:.2f} | {r['after']['median_cpu_s']:.2f} |")
        t = result["total"]["after"]
        lines.append(f"| **total** | | {t['wall_s']:.1f} | {t['cpu_s']:.1f} |")
    if result.get("note"):
        lines += [result["note"], ""]
    s = result["slowest"]
    lines += ["", f"Slowest bundle: {s['bundle']}, {s['median_wall_s']:.2f} s wall - "
              + ("every bundle within" if result["within_target"] else "NOT every bundle within")
              + f" the {result['target_s_per_bundle']:.0f} s target on this run.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
