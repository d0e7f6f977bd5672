"""The plugin's start-up cost per process, beside the engine's own start-up step, in one run (issue 22: at most 50 ms).

    PYTHONPATH=<nsa-policy target>:<sglang pkgs>:<stubs> <venv>/bin/python scripts/plugin_harness/startup_cost.py sglang N
    PYTHONPATH=<nsa-policy target> <vllmenv>/bin/python scripts/plugin_harness/startup_cost.py vllm N

Each sample is a fresh process. It first imports what the engine imports before it loads plugins, then
times the engine's own start-up step, from loading the plugins to the resolved arguments:
- sglang: load_plugins(), the server parser, ServerArgs.from_cli_args, resolve_once(), check_server_args()
  (scripts/plugin_harness/sglang_run.py's run, sm90 emulated, DeepSeek-V3.2's config);
- vLLM: EngineArgs(...) (its __post_init__ runs load_general_plugins()) and create_engine_config()
  (vllm_run.py's run, sm90 emulated).
Variants, interleaved round by round so that the machine's load falls on each alike:
  engine   the plugin installed, not enabled (SGLANG_PLUGINS / VLLM_PLUGINS = none): the engine alone
  off      the plugin allowed, NSA_POLICY unset
  fill     NSA_POLICY=fill: the plugin decides once (the process's first decision: its cold start)
Per variant the median and max over N processes of the step's wall and CPU time (ms), the plugin's own
time (plugin_ms from its decision-log line) and fill − engine. Prints one JSON line.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r'''
import json, os, sys, tempfile, time
engine, variant, here = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, here)
logdir = tempfile.mkdtemp(prefix="startup-cost-")
if engine == "sglang":
    import sglang_run as S
    S.quiet_imports()
    from sglang.srt.plugins import load_plugins
    parser = S.build_parser()
    S.BASE_ENV.update({k: v for k, v in os.environ.items() if k not in S.INPUT_ENV and k not in S.PLUGIN_ENV})
    configs = S.ConfigDirs()
    item = {"id": "cost", "device": "sm90", "model": "ds32", "argv": []}
    mode = "fill" if variant == "fill" else "off"
    os.environ["NSA_POLICY"] = mode
    with S.emulated("sm90", False):
        c0, w0 = time.process_time(), time.perf_counter()
        load_plugins()  # the plugin registers its seam here (fill), or returns at once (off / not allowed)
        out = S.run(parser, configs, item, mode, logdir, 1)
        c1, w1 = time.process_time(), time.perf_counter()
else:
    import vllm_run as V
    from vllm.engine.arg_utils import EngineArgs  # imported by `vllm serve` before EngineArgs is built
    root = tempfile.mkdtemp(prefix="startup-cost-models-")
    V.model_dir(root, "ds32")
    mode = "fill" if variant == "fill" else "off"
    os.environ["NSA_POLICY"] = mode
    c0, w0 = time.process_time(), time.perf_counter()
    out = V.run(root, logdir, {"id": "cost", "device": "sm90", "model": "ds32", "tp": 8, "kv": "auto"}, mode, 1)
    c1, w1 = time.process_time(), time.perf_counter()
assert out["ok"], out["error"]
log = out["log"]
import nsa_policy
print(json.dumps({"nsa_policy": os.path.dirname(nsa_policy.__file__), "wall_ms": (w1 - w0) * 1000, "cpu_ms": (c1 - c0) * 1000,
                  "plugin_ms": log[0]["context"]["plugin_ms"] if log else None, "decided": bool(log)}))
'''

VARIANTS = ("engine", "off", "fill")


def _stats(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 1), "max": round(max(values), 1)}


def main() -> None:
    engine, n = sys.argv[1], int(sys.argv[2])
    allow = "SGLANG_PLUGINS" if engine == "sglang" else "VLLM_PLUGINS"
    samples: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    load = os.getloadavg()
    for round_ in range(n):
        order = VARIANTS[round_ % 3:] + VARIANTS[:round_ % 3]
        for variant in order:
            env = {k: v for k, v in os.environ.items() if not k.startswith("NSA_POLICY")}
            env[allow] = "none" if variant == "engine" else "nsa_policy"
            # cwd "/": `python -c` puts the working directory first on sys.path, and run from a checkout
            # that would import the checkout's nsa_policy (no rule snapshots) instead of the installed wheel
            p = subprocess.run([sys.executable, "-c", CHILD, engine, variant, HERE], capture_output=True, text=True,
                               env=env, cwd="/")
            if p.returncode != 0:
                sys.exit(f"{engine} {variant}: {p.stderr[-2000:]}")
            sample = json.loads(p.stdout.strip().splitlines()[-1])
            if sample["decided"] != (variant == "fill"):
                sys.exit(f"{engine} {variant}: the plugin {'did not decide' if variant == 'fill' else 'decided'}")
            samples[variant].append(sample)
            checkout = os.path.abspath(os.path.join(HERE, os.pardir, os.pardir))
            if os.path.abspath(os.path.join(sample["nsa_policy"], os.pardir)) == checkout:
                sys.exit(f"{engine} {variant}: nsa_policy was imported from this checkout, not from the installed wheel")
    out: dict = {"engine": engine, "processes_per_variant": n, "nsa_policy": samples["fill"][0]["nsa_policy"],
                 "loadavg_before": [round(x, 2) for x in load]}
    for variant in VARIANTS:
        s = samples[variant]
        out[variant] = {"step_wall_ms": _stats([x["wall_ms"] for x in s]), "step_cpu_ms": _stats([x["cpu_ms"] for x in s])}
        if variant == "fill":
            out[variant]["plugin_ms"] = _stats([x["plugin_ms"] for x in s])
    for key in ("step_wall_ms", "step_cpu_ms"):
        out[f"fill_minus_engine_{key}"] = round(out["fill"][key]["median"] - out["engine"][key]["median"], 1)
        out[f"off_minus_engine_{key}"] = round(out["off"][key]["median"] - out["engine"][key]["median"], 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
