"""The plugin's first decision in a fresh process, without the engine (issue 22's 50 ms): where the time goes.

    python scripts/plugin_harness/decision_cost.py N [--json OUT]

Runs with the nsa_policy on sys.path (an installed wheel: its bytecode compiled; its validated rule
snapshots, base/snapshot.py, written by the first process and used by the rest, unless
NSA_POLICY_NO_SNAPSHOT=1). Each sample is a fresh process that imports what both engines have imported before they
load plugins (pydantic, PyYAML, importlib.metadata), then times, CPU and wall: the plugin's decide()
on a recorded input (tests/data/plugins: sglang 0.5.23, vLLM 0.33.0), and a second decide() in the
same process. Also a bare `import pydantic, yaml` process, for scale. Prints one JSON object.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHILD = r'''
import json, sys, time
c00, w00 = time.process_time(), time.perf_counter()
import pydantic, yaml, importlib.metadata  # the engine's own imports before it loads plugins
from pydantic import BaseModel
base = {"cpu_ms": (time.process_time() - c00) * 1000, "wall_ms": (time.perf_counter() - w00) * 1000}
engine, data = sys.argv[1], sys.argv[2]
if engine == "bare":
    print(json.dumps({"bare": base})); raise SystemExit
lines = open(data).read().splitlines()
models = json.loads(lines[0])["models"]
rec = next(json.loads(x) for x in lines[1:] if json.loads(x)["status"] == "applied")
def once():
    if engine == "sglang":
        from nsa_policy.engines.sglang.plugin import decide
        return decide(dict(rec["read"]), models[rec["model"]], env={"NSA_POLICY_DEVICE": rec["policy_device"]},
                      sglang_version="0.5.23")
    from nsa_policy.engines.vllm.plugin import decide
    return decide(dict(rec["read"]), env={"NSA_POLICY_DEVICE": rec["policy_device"]}, model=models[rec["model"]])
out = {"bare": base}
for key in ("first", "second"):
    c0, w0 = time.process_time(), time.perf_counter()
    _, d = once()
    out[key] = {"cpu_ms": (time.process_time() - c0) * 1000, "wall_ms": (time.perf_counter() - w0) * 1000}
    assert d.prefill_backend == rec["decision"]["prefill_backend"] or engine == "vllm"
print(json.dumps(out))
'''


def main() -> None:
    n = int(sys.argv[1])
    data = {"sglang": os.path.join(ROOT, "tests", "data", "plugins", "sglang-0.5.23.jsonl"),
            "vllm": os.path.join(ROOT, "tests", "data", "plugins", "vllm-0.33.0.jsonl"), "bare": ""}
    samples: dict[str, list[dict]] = {k: [] for k in data}
    load = os.getloadavg()
    for _ in range(n):
        for engine in data:
            p = subprocess.run([sys.executable, "-c", CHILD, engine, data[engine]], capture_output=True, text=True,
                               check=True, cwd="/")
            samples[engine].append(json.loads(p.stdout.strip().splitlines()[-1]))
    import nsa_policy

    out: dict = {"python": sys.version.split()[0], "nsa_policy": os.path.dirname(nsa_policy.__file__),
                 "snapshots": os.environ.get("NSA_POLICY_NO_SNAPSHOT") != "1", "processes": n, "cpus": os.cpu_count(),
                 "loadavg_before": [round(x, 2) for x in load]}
    for engine, rows in samples.items():
        keys = ("bare",) if engine == "bare" else ("first", "second")
        out[engine] = {k: {m: {"median": round(statistics.median(r[k][m] for r in rows), 1),
                               "min": round(min(r[k][m] for r in rows), 1), "max": round(max(r[k][m] for r in rows), 1)}
                           for m in ("cpu_ms", "wall_ms")} for k in keys}
    text = json.dumps(out, indent=1)
    print(text)
    if "--json" in sys.argv:
        with open(sys.argv[sys.argv.index("--json") + 1], "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
