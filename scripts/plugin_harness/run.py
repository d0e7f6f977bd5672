"""Verify the plugins against the real engines in side environments (project python; issue 22).

    python scripts/plugin_harness/run.py sglang --release 0.5.23 [--write]
    python scripts/plugin_harness/run.py vllm [--write]

1. builds this checkout's wheel (`pip wheel --no-deps .`) and installs it with `pip install --no-deps
   --target` into $PLUGIN_ENV/nsa-pkg (default /work/plugins-env), next to the engine;
2. runs each configuration of the grid (below) through the engine's own start-up, in the side
   environment, twice: once with the engine's allow-list excluding the plugin (SGLANG_PLUGINS /
   VLLM_PLUGINS = "none": the plugin installed but not enabled) and once with it allowed, in the modes
   off, audit, fill and enforce (sglang_run.py / vllm_run.py);
3. checks: not enabled, off and audit leave every resolved argument byte-identical to the engine alone;
   fill makes the engine resolve to the decision (where the decision applies without errors); enforce
   refuses exactly the rejected decisions and otherwise resolves as fill does;
4. --write records benchmarks/results/plugins/<engine>-<release>.json (summary, every failed check)
   and tests/data/plugins/<engine>-<release>.jsonl (what the plugin read and decided, what the engine
   resolved: replayed by tests/plugins/test_replay.py without the engines).
Side environments: scripts/sglang_oracle/build_envs.sh (SGENV, default $PLUGIN_ENV/sgenv; the
release envs are only read, so a shared build such as /work/sgenv serves) and the vLLM venv of
scripts/vllm_oracle/README.md (VLLMENV, default $PLUGIN_ENV/vllmenv). PLUGIN_ENV is where this
checkout's wheel is installed: give each checkout its own (another checkout's run replaces it).
"""
from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from typing import Optional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join(ROOT, "scripts", "plugin_harness")
ENV_ROOT = os.environ.get("PLUGIN_ENV", "/work/plugins-env")
SGENV = os.environ.get("SGENV", os.path.join(ENV_ROOT, "sgenv"))
VLLMENV = os.environ.get("VLLMENV", os.path.join(ENV_ROOT, "vllmenv"))
MODES = ("off", "audit", "fill", "enforce")


def sglang_grid(release: str = "0.5.23") -> list[dict]:
    """The grid, in the release's own spelling of the DSA flags (--nsa-* up to 0.5.12.post1)."""
    from packaging.version import Version

    grid = _sglang_grid()
    if Version(release) < Version("0.5.13"):
        for item in grid:
            item["argv"] = [a.replace("--dsa-", "--nsa-") for a in item["argv"]]
    return grid


def _sglang_grid() -> list[dict]:
    variants = [
        [], ["--kv-cache-dtype", "bfloat16"], ["--kv-cache-dtype", "fp8_e4m3"], ["--kv-cache-dtype", "fp8_e5m2"],
        ["--dsa-prefill-backend", "flashmla_sparse"], ["--dsa-prefill-backend", "flashmla_kv"],
        ["--dsa-prefill-backend", "triton_sparse_mla"], ["--dsa-decode-backend", "fa3"],
        ["--dsa-decode-backend", "trtllm"], ["--dsa-decode-backend", "flashmla_kv"], ["--dsa-decode-backend", "triton"],
        ["--dsa-prefill-backend", "tilelang", "--dsa-decode-backend", "tilelang"], ["--tp-size", "8"],
        ["--tp-size", "8", "--dsa-prefill-backend", "triton_sparse_mla"], ["--page-size", "32"],
        ["--kv-cache-dtype", "bfloat16", "--dsa-decode-backend", "trtllm"],
        ["--kv-cache-dtype", "fp8_e4m3", "--dsa-decode-backend", "fa3"], "env-threshold",
    ]
    out = []
    for device, model, v in itertools.product(("sm90", "sm100", "sm120", "gfx942"), ("ds32", "glm5", "ds3"), variants):
        item = {"device": device, "model": model, "argv": [] if v == "env-threshold" else v}
        if v == "env-threshold":
            item["env"] = {"SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD": "4096"}
        item["id"] = f"{device}/{model}/" + ("env-threshold" if v == "env-threshold" else (" ".join(v) or "defaults"))
        out.append(item)
    return out


def vllm_grid() -> list[dict]:
    out = []
    for device, model, tp, kv, backend in itertools.product(
            ("sm90", "sm100", "sm103", "sm120"), ("ds32", "glm5"), (1, 8), ("auto", "bfloat16", "fp8"),
            (None, "FLASHMLA_SPARSE", "FLASHINFER_MLA_SPARSE", "TRITON_MLA")):
        out.append({"device": device, "model": model, "tp": tp, "kv": kv, "backend": backend})
    for device, model, tp in itertools.product(("sm90", "sm100", "sm103", "sm120"), ("ds32", "glm5"), (1, 8)):
        out.append({"device": device, "model": model, "tp": tp, "kv": "auto", "backend": None, "block": 64})
    for item in out:
        item["id"] = "/".join(f"{k}={item[k]}" for k in ("device", "model", "tp", "kv", "backend", "block") if k in item)
    return out


FAULTS = ({"NSA_POLICY_BUNDLE": "no-such-bundle"}, {"NSA_POLICY_DEVICE": "no-such-device"},
          {"NSA_POLICY_LOG": "/proc/no-such-dir/log.jsonl"})


def fault_grid(grid: list[dict]) -> list[dict]:
    """Faults inside the plugin (bad settings, an unwritable log) on a few configurations: audit and
    fill must leave the engine as it is alone; enforce refuses when it cannot decide."""
    picked = [g for g in grid if g.get("model") in ("ds32", None) and g["id"].endswith(("defaults", "backend=None"))][:4]
    return [{**g, "id": f"fault:{n}:{g['id']}", "base_id": g["id"], "plugin_env": f}
            for g in picked for n, f in enumerate(FAULTS)]


def check_faults(engine: str, grid: list[dict], base: list[dict], runs: list[dict], normal: list[dict]) -> dict:
    by = {(r["id"], r["mode"]): r for r in runs}
    baseline = {r["id"]: r for r in base}
    failures = []
    for item in grid:
        i, ref = item["id"], engine_view(engine, baseline[item["id"]])
        log_fault = "NSA_POLICY_LOG" in item["plugin_env"]
        if json.dumps(engine_view(engine, by[(i, "audit")]), sort_keys=True) != json.dumps(ref, sort_keys=True):
            failures.append({"id": i, "mode": "audit", "check": "fault: engine as without the plugin"})
        if log_fault:  # the decision is made, only its log line fails: fill and enforce work as without the fault
            clean = {(r["id"], r["mode"]): r for r in normal}
            for mode in ("fill", "enforce"):
                if json.dumps(engine_view(engine, by[(i, mode)]), sort_keys=True) != json.dumps(
                        engine_view(engine, clean[(item["base_id"], mode)]), sort_keys=True):
                    failures.append({"id": i, "mode": mode, "check": "log fault: as without the fault"})
        if not log_fault:
            if json.dumps(engine_view(engine, by[(i, "fill")]), sort_keys=True) != json.dumps(ref, sort_keys=True):
                failures.append({"id": i, "mode": "fill", "check": "fault: engine as without the plugin"})
            err = by[(i, "enforce")]["error"] or {}
            if err.get("type") != "PluginRefused" or "could not decide" not in err.get("message", ""):
                failures.append({"id": i, "mode": "enforce", "check": "fault: enforce refuses", "error": err})
    return {"configurations": len(grid), "failures": failures}


def install_wheel() -> str:
    target = os.path.join(ENV_ROOT, "nsa-pkg")
    with tempfile.TemporaryDirectory() as dist:
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", ROOT, "-w", dist], check=True)
        wheel = next(os.path.join(dist, f) for f in os.listdir(dist) if f.endswith(".whl"))
        subprocess.run(["rm", "-rf", target], check=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", target, wheel], check=True)
    return target


def side(engine: str, release: str, nsa: str) -> tuple[str, dict[str, str], str]:
    """(python, environment, allow-list variable) of the side environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NSA_POLICY", "SGLANG_", "VLLM_"))}
    if engine == "sglang":
        envs = json.load(open(os.path.join(SGENV, "envs.json")))
        if release not in envs:
            sys.exit(f"sglang {release}: no side environment in {SGENV} (have {sorted(envs)})")
        env["PYTHONPATH"] = os.pathsep.join([nsa, *envs[release]["pythonpath"]])
        return envs[release]["python"], env, "SGLANG_PLUGINS"
    env["PYTHONPATH"] = nsa
    return os.path.join(VLLMENV, "bin", "python"), env, "VLLM_PLUGINS"


def run_side(engine: str, release: str, nsa: str, grid: list[dict], modes: tuple[str, ...], allow: str) -> list[dict]:
    python, env, var = side(engine, release, nsa)
    env[var] = allow
    script = os.path.join(HERE, f"{engine}_run.py")
    proc = subprocess.run([python, script, ",".join(modes)], input="".join(json.dumps(g) + "\n" for g in grid),
                          capture_output=True, text=True, env=env, cwd=ROOT)
    if proc.returncode != 0:
        sys.exit(f"{script} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    sys.stderr.write(proc.stderr[-400:])
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


SAME = {"'bf16'": "'bfloat16'", "bf16": "bfloat16"}


def _norm(value: object) -> str:
    text = str(value)
    return SAME.get(text, text)


def engine_view(engine: str, run: dict) -> dict:
    """What the engine resolved, for the byte-identical checks (everything it reports)."""
    if engine == "sglang":
        return {"ok": run["ok"], "error": run["error"], "fields": run["fields"], "threshold": run["threshold"]}
    return {"ok": run["ok"], "error": run["error"], "config": run["config"]}


def decided_vs_engine(engine: str, decision: dict, run: dict) -> dict:
    """field → (policy, engine) for the decided outputs."""
    if engine == "sglang":
        f = run["fields"] or {}
        pairs = {"kv_cache_dtype": (decision["kv_cache_dtype"], f.get("kv_cache_dtype")),
                 # the release's own field: nsa_* up to 0.5.12.post1, dsa_* from 0.5.13
                 "prefill_backend": (decision["prefill_backend"], f.get("dsa_prefill_backend", f.get("nsa_prefill_backend"))),
                 "decode_backend": (decision["decode_backend"], f.get("dsa_decode_backend", f.get("nsa_decode_backend"))),
                 "page_size": (decision["page_size"], f.get("page_size")),
                 "dense_attn_kv_len_threshold": (decision["dense_attn_kv_len_threshold"], run["threshold"])}
        return {k: (repr(p) if k != "dense_attn_kv_len_threshold" else str(p), e) for k, (p, e) in pairs.items()}
    r = run["resolved"] or {}
    return {"attention_backend": (decision["attention_backend"], r.get("attention_backend")),
            "requested_kv_cache_dtype": (decision["requested_kv_cache_dtype"], r.get("kv_cache_dtype")),
            "page_size": (decision["page_size"], r.get("block_size"))}


# Where a release overwrites a filled value itself, after the plugin's seam, whatever was set: fill cannot
# (and should not) make it run the decision; audit reports the difference. Read from the wheels.
ENGINE_OVERRIDES = (
    {"release": "0.5.12", "field": "dense_attn_kv_len_threshold", "engine": "0", "model": "glm5",
     "devices": ("sm100", "sm120"),
     "evidence": "sglang 0.5.12 srt/server_args.py ServerArgs._handle_model_specific_adjustments (run by __post_init__ "
                 "after the plugin's BEFORE hook): GlmMoeDsaForCausalLM and is_blackwell_supported() -> "
                 "envs.SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD.set(0), 'Force NSA prefill to use sparse MLA "
                 "(i.e. disable MHA_ONE_SHOT)', over any value the variable had; not in 0.5.13-0.5.18"},
)


def engine_override(release: str, item: dict, diff: dict) -> Optional[dict]:
    """The ENGINE_OVERRIDES entry that explains every field of `diff`, if one does."""
    for o in ENGINE_OVERRIDES:
        if (o["release"] == release and item.get("model") == o["model"] and item.get("device") in o["devices"]
                and set(diff) == {o["field"]} and str(diff[o["field"]][1]) == o["engine"]):
            return o
    return None


# sglang releases where no seam fits (docs/plugins.md): the plugin must leave every mode as the engine alone
NO_SEAM = ("0.5.19",)


def check_no_seam(engine: str, grid: list[dict], base: list[dict], runs: list[dict]) -> dict:
    by = {(r["id"], r["mode"]): r for r in runs}
    baseline = {r["id"]: r for r in base}
    failures = []
    for item in grid:
        ref = json.dumps(engine_view(engine, baseline[item["id"]]), sort_keys=True)
        for mode in MODES:
            run = by[(item["id"], mode)]
            if json.dumps(engine_view(engine, run), sort_keys=True) != ref or run["log"]:
                failures.append({"id": item["id"], "mode": mode, "check": "no seam: the engine alone"})
    return {"counts": {"configurations": len(grid), "untouched_checked": len(grid) * len(MODES),
                       "no_seam": True}, "failures": failures, "plugin_ms_in_process": {}, "replay": [], "models": {}}


def check(engine: str, grid: list[dict], base: list[dict], runs: list[dict], release: str = "") -> dict:
    by = {(r["id"], r["mode"]): r for r in runs}
    baseline = {r["id"]: r for r in base}
    failures: list[dict] = []
    counts = {"configurations": len(grid), "untouched_checked": 0, "fill_checked": 0, "fill_equal": 0,
              "fill_engine_refused_accepted_decision": 0, "rejected_decisions": 0, "enforce_refused": 0,
              "not_applicable": 0}
    replay: list[dict] = []
    known: list[dict] = []  # the release overwrote a filled value after the seam (ENGINE_OVERRIDES)
    models: dict[str, dict] = {}
    plugin_ms: list[float] = []
    for item in grid:
        i = item["id"]
        ref = engine_view(engine, baseline[i])
        for mode in ("off", "audit"):
            counts["untouched_checked"] += 1
            if json.dumps(engine_view(engine, by[(i, mode)]), sort_keys=True) != json.dumps(ref, sort_keys=True):
                failures.append({"id": i, "mode": mode, "check": "untouched", "engine": engine_view(engine, by[(i, mode)]),
                                 "baseline": ref})
        fill, enforce, audit = by[(i, "fill")], by[(i, "enforce")], by[(i, "audit")]
        if by[(i, "off")]["log"]:
            failures.append({"id": i, "mode": "off", "check": "off logs nothing"})
        entry = (fill["log"] or [None])[0]
        if entry is None and baseline[i]["stage"] == "parse":
            # the release's parser refuses the flags before any plugin runs: every mode is the engine alone
            counts["parser_refused_before_plugin"] = counts.get("parser_refused_before_plugin", 0) + 1
            for mode in ("fill", "enforce"):
                if json.dumps(engine_view(engine, by[(i, mode)]), sort_keys=True) != json.dumps(ref, sort_keys=True):
                    failures.append({"id": i, "mode": mode, "check": "parser refusal untouched"})
            continue
        if entry is None:
            failures.append({"id": i, "mode": "fill", "check": "decision logged", "run": fill})
            continue
        plugin_ms += [e["context"]["plugin_ms"] for r in (audit, fill, enforce) for e in r["log"]]
        status, decision = entry["context"]["status"], entry["decision"]
        if not entry["context"].get("decision_id"):
            failures.append({"id": i, "mode": "fill", "check": "decision id"})
        if status == "applied":
            counts["fill_checked"] += 1
            if not fill["ok"]:
                counts["fill_engine_refused_accepted_decision"] += 1
                failures.append({"id": i, "mode": "fill", "check": "engine accepts the decision", "error": fill["error"]})
            else:
                diff = {k: v for k, v in decided_vs_engine(engine, decision, fill).items() if _norm(v[0]) != _norm(v[1])}
                override = engine_override(release, item, diff) if diff else None
                if override is not None:
                    counts["fill_engine_overrode_after_seam"] = counts.get("fill_engine_overrode_after_seam", 0) + 1
                    known.append({"id": i, "diff": diff, "evidence": override["evidence"]})
                elif diff:
                    failures.append({"id": i, "mode": "fill", "check": "engine resolves to the decision", "diff": diff})
                else:
                    counts["fill_equal"] += 1
        else:
            counts["not_applicable" if status == "not_applicable" else "rejected_decisions"] += 1
            if json.dumps(engine_view(engine, fill), sort_keys=True) != json.dumps(ref, sort_keys=True):
                failures.append({"id": i, "mode": "fill", "check": f"{status}: fill writes nothing"})
        refused = not enforce["ok"] and (enforce["error"] or {}).get("type") == "PluginRefused"
        counts["enforce_refused"] += refused
        if refused != (status == "rejected"):
            failures.append({"id": i, "mode": "enforce", "check": "refuses exactly the rejected decisions",
                             "status": status, "error": enforce["error"]})
        elif not refused and json.dumps(engine_view(engine, enforce), sort_keys=True) != json.dumps(
                engine_view(engine, fill), sort_keys=True):
            failures.append({"id": i, "mode": "enforce", "check": "enforce resolves as fill"})
        model_config = {k: v for k, v in (fill.get("model_config") or {}).items() if k != "_name_or_path"}
        model_key = hashlib.sha256(json.dumps(model_config, sort_keys=True).encode()).hexdigest()[:12]
        models[model_key] = model_config
        read = {k: v for k, v in (entry["context"].get("read") or {}).items()
                if k not in ("model", "model_path")}  # a path on the recording machine; the config is in models
        replay.append({"id": i, "policy_device": decision["device"], "item": item, "read": read, "model": model_key,
                       "status": status, "written": entry["context"].get("written"),
                       "env_set": entry["context"].get("env_set"),
                       "decision": {k: decision.get(k) for k in (
                           "kv_cache_dtype", "prefill_backend", "decode_backend", "page_size",
                           "dense_attn_kv_len_threshold", "attention_backend", "requested_kv_cache_dtype")},
                       "error_codes": sorted({e["code"] for e in decision.get("errors", [])}),
                       "engine_fill": decided_vs_engine(engine, decision, fill) if fill["ok"] else None,
                       "enforce_refusal": (enforce["error"] or {}).get("message") if refused else None,
                       "env": item.get("env") or {}})
    plugin_ms.sort()
    timing = {"decisions": len(plugin_ms),
              "median_ms": plugin_ms[len(plugin_ms) // 2] if plugin_ms else None,
              "p95_ms": plugin_ms[int(len(plugin_ms) * 0.95)] if plugin_ms else None,
              "max_ms": plugin_ms[-1] if plugin_ms else None}
    return {"counts": counts, "failures": failures, "engine_overrides": known, "plugin_ms_in_process": timing,
            "replay": replay, "models": models}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("engine", choices=("sglang", "vllm"))
    ap.add_argument("--release", default=None)
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--limit", type=int, default=None)
    a = ap.parse_args()
    release = a.release or ("0.5.23" if a.engine == "sglang" else "0.33.0")
    grid = sglang_grid(release) if a.engine == "sglang" else vllm_grid()
    grid = grid[: a.limit] if a.limit else grid
    t0 = time.time()
    nsa = install_wheel()
    faults = fault_grid(grid)
    base = run_side(a.engine, release, nsa, grid + faults, ("off",), "none")
    runs = run_side(a.engine, release, nsa, grid + faults, MODES, "nsa_policy")
    def part(rows: list[dict], fault: bool) -> list[dict]:  # the side script runs inputs grouped by device
        return [r for r in rows if r["id"].startswith("fault:") == fault]

    if release in NO_SEAM:
        result = check_no_seam(a.engine, grid + faults, base, runs)
        result["faults"] = {"configurations": 0, "failures": [], "note": "included above: the plugin does nothing"}
    else:
        result = check(a.engine, grid, part(base, False), part(runs, False), release)
        result["faults"] = check_faults(a.engine, faults, part(base, True), part(runs, True), part(runs, False))
    replay = result.pop("replay")
    models = result.pop("models")
    summary = {"engine": a.engine, "release": release, **result,
               "measured": {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "host": platform.node(),
                            "machine": f"{os.cpu_count()} cores, no GPU (device emulated)",
                            "wall_s": round(time.time() - t0, 1)}}
    print(json.dumps({k: summary[k] for k in ("engine", "release", "counts", "plugin_ms_in_process")}, indent=1))
    print(json.dumps({"faults": result["faults"]})[:2000])
    for f in result["failures"][:15]:
        print("FAIL", json.dumps(f)[:600])
    if a.write:
        out = os.path.join(ROOT, "benchmarks", "results", "plugins")
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, f"{a.engine}-{release}.json"), "w") as fh:
            json.dump(summary, fh, indent=1, sort_keys=True)
            fh.write("\n")
        if not replay:
            return_code = 1 if result["failures"] else 0
            sys.exit(return_code)
        data = os.path.join(ROOT, "tests", "data", "plugins")
        os.makedirs(data, exist_ok=True)
        with open(os.path.join(data, f"{a.engine}-{release}.jsonl"), "w") as fh:
            fh.write(json.dumps({"models": models}, sort_keys=True) + "\n")  # first line: the model configs
            for rec in replay:
                fh.write(json.dumps(rec, sort_keys=True) + "\n")
    sys.exit(1 if result["failures"] or result["faults"]["failures"] else 0)


if __name__ == "__main__":
    main()
