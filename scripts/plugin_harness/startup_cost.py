"""The plugin's start-up cost per process, inside a side environment (issue 22: at most 50 ms).

    PYTHONPATH=<nsa-policy target>:<sglang pkgs>:<stubs> <venv>/bin/python scripts/plugin_harness/startup_cost.py sglang N
    PYTHONPATH=<nsa-policy target> <vllmenv>/bin/python scripts/plugin_harness/startup_cost.py vllm N

Each sample is a fresh process that first imports what the engine's own start-up imports before it
loads plugins (sglang: server_args and the plugin framework; vLLM: vllm.engine.arg_utils), so that
only the plugin's own work is timed: loading its entry point and calling it (the engine's
load_plugins does exactly this), and, with a mode on, the first decision (import of the policy, its
catalogs and rules, and one resolve), timed around the plugin's decide() on a recorded input.
Prints one JSON line: per mode, the median and max over N processes, in ms.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

CHILD = r'''
import json, os, sys, time
engine, mode = sys.argv[1], sys.argv[2]
if engine == "sglang":
    import sglang.srt.server_args, sglang.srt.plugins, sglang.srt.arg_groups.resolution_hooks  # the engine's own
else:
    for _m in ("vllm._C_stable_libtorch", "vllm._C", "vllm._flashmla_C", "vllm._flashmla_extension_C"):
        import types; sys.modules[_m] = types.ModuleType(_m)
    import vllm.engine.arg_utils, vllm.plugins  # the engine's own
from importlib.metadata import entry_points
os.environ.pop("NSA_POLICY", None)
if mode != "off":
    os.environ["NSA_POLICY"] = mode
group = "sglang.srt.plugins" if engine == "sglang" else "vllm.general_plugins"
t0 = time.perf_counter()
ep = next(e for e in entry_points(group=group) if e.name == "nsa_policy")
fn = ep.load()
fn()
t1 = time.perf_counter()
decide_ms = None
if mode != "off":
    rec = json.loads(sys.argv[3])
    models = json.loads(sys.argv[4])
    t2 = time.perf_counter()
    if engine == "sglang":
        from nsa_policy.engines.sglang.plugin import decide
        decide(dict(rec["read"]), models[rec["model"]], env={"NSA_POLICY_DEVICE": rec["policy_device"]},
               sglang_version="0.5.23")
    else:
        from nsa_policy.engines.vllm.plugin import decide
        decide(dict(rec["read"]), env={"NSA_POLICY_DEVICE": rec["policy_device"]}, model=models[rec["model"]])
    decide_ms = (time.perf_counter() - t2) * 1000
print(json.dumps({"load_and_call_ms": (t1 - t0) * 1000, "first_decision_ms": decide_ms}))
'''


def main() -> None:
    engine, n = sys.argv[1], int(sys.argv[2])
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    lines = open(os.path.join(root, "tests", "data", "plugins",
                              "sglang-0.5.23.jsonl" if engine == "sglang" else "vllm-0.33.0.jsonl")).read().splitlines()
    models = json.loads(lines[0])["models"]
    rec = next(json.loads(x) for x in lines[1:] if json.loads(x)["status"] == "applied")
    out: dict = {"engine": engine, "processes": n}
    for mode in ("off", "fill"):
        samples = []
        for _ in range(n):
            p = subprocess.run([sys.executable, "-c", CHILD, engine, mode, json.dumps(rec), json.dumps(models)],
                               capture_output=True, text=True, check=True)
            samples.append(json.loads(p.stdout.strip().splitlines()[-1]))
        loads = [s["load_and_call_ms"] for s in samples]
        out[mode] = {"load_and_call_ms": {"median": round(statistics.median(loads), 1), "max": round(max(loads), 1)}}
        if mode != "off":
            dec = [s["first_decision_ms"] for s in samples]
            tot = [a + b for a, b in zip(loads, dec)]
            out[mode]["first_decision_ms"] = {"median": round(statistics.median(dec), 1), "max": round(max(dec), 1)}
            out[mode]["total_ms"] = {"median": round(statistics.median(tot), 1), "max": round(max(tot), 1)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
