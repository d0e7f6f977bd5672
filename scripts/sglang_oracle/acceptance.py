"""Acceptance of `nsa-policy launch` against sglang's real parsers (issue 10, deliverable 4).

For each release: build launch's final command for a set of scenarios with the project's planner
(nsa_policy.engines.sglang.launch.plan_launch, given the target release when it takes one), parse the
server part of each command with that release's own parser (run.py → parse_argv.py in the release's
side environment), and compare:

- the parser accepts the argv;
- kv_cache_dtype, prefill and decode backend, page size parsed == the decision (sglang maps `bf16`
  to `bfloat16` itself, so the two spellings are one value);
- the command then goes through the release's own start-up code (policy_oracle.py: real parser →
  from_cli_args → resolution → check_server_args, device emulated, with the launch's environment):
  it must not refuse, and the dense-attention threshold it leaves in the variable it reads must
  equal the decision's (the threshold has no flag; 0.5.13-0.5.20 ignore the old name's alias here,
  0.5.10-0.5.12 force 0 for GLM-5 on Blackwell). Where the release's own policy then runs
  something other than the flags (0.5.10 overwrites fp8 backends on Blackwell), it is listed as
  `release_overrides`, not counted.

    python scripts/sglang_oracle/acceptance.py [--releases 0.5.10,0.5.13,0.5.20,0.5.23] [--write --label L]

--write records the run as L in benchmarks/results/launch-acceptance.{json,md} (other labels kept).
"""
from __future__ import annotations

import argparse
import datetime as dt
import inspect
import itertools
import json
import logging
import os
import platform
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import PARSERS_DIR, REPO, SideEnvs, in_input_order, sorted_releases  # noqa: E402

RELEASES = ("0.5.10", "0.5.13", "0.5.20", "0.5.23")
DS, GLM = "deepseek-ai/DeepSeek-V3.2", "zai-org/GLM-5"
DEVICES = ("h200", "b200", "rtx-pro-6000", "mi300x")
NSA_ENV = "SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD"
DSA_ENV = "SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD"
PREFIXES = {"launch_server": ["python", "-m", "sglang.launch_server"], "serve": ["sglang", "serve"]}
_SILENT = logging.getLogger("nsa_policy.acceptance.silent")
_SILENT.addHandler(logging.NullHandler())
_SILENT.propagate = False
RESULTS_JSON = REPO / "benchmarks" / "results" / "launch-acceptance.json"
RESULTS_MD = REPO / "benchmarks" / "results" / "launch-acceptance.md"


class ReleaseFacts:
    """What the acceptance needs to know about a release, read from its own parser dump."""

    def __init__(self, dump: dict[str, Any]):
        self.release = dump["release"]
        self.options = {o: a for a in dump["actions"] for o in a["option_strings"]}
        names = [v for v in dump["env"]["variables"] if v["name"].endswith("PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD")]
        if len(names) != 1:
            raise RuntimeError(f"sglang {self.release}: expected one threshold variable, found {names}")
        self.threshold_var = names[0]["name"]
        self.threshold_alias = names[0].get("deprecated_name")

    def has(self, option: str) -> bool:
        return option in self.options

    @property
    def backend_prefix(self) -> str:
        return "--dsa" if self.has("--dsa-prefill-backend") else "--nsa"

    def choices(self, option: str) -> list:
        return self.options[option]["choices"] or []


def load_facts(envs: Optional[SideEnvs], release: str) -> ReleaseFacts:
    path = PARSERS_DIR / f"{release}.json"
    if path.is_file():
        return ReleaseFacts(json.loads(path.read_text()))
    if envs is None:
        raise RuntimeError(f"no parser dump for sglang {release} at {path} and no side environments")
    return ReleaseFacts(envs.dump(release))


def scenarios(facts: ReleaseFacts) -> list[dict[str, Any]]:
    """Inputs a user would write for this release (spelled as this release accepts them)."""
    pre = facts.backend_prefix
    parallel = {"tp8": ["--tp-size", "8"],
                "tp8-dp8-dpattn": ["--tp-size", "8", "--dp-size", "8", "--enable-dp-attention"]}
    if facts.has("--attn-dp-size"):
        parallel["tp8-attn-dp8"] = ["--tp-size", "8", "--attn-dp-size", "8"]
    kvs = {"kv-unset": [], "kv-auto": ["--kv-cache-dtype", "auto"], "kv-bf16": ["--kv-cache-dtype", "bf16"],
           "kv-fp8": ["--kv-cache-dtype", "fp8_e4m3"]}
    out: list[dict[str, Any]] = []
    n = itertools.count()
    for device, model, (kv_name, kv), (par_name, par) in itertools.product(DEVICES, (DS, GLM), kvs.items(),
                                                                          parallel.items()):
        prefix = "serve" if next(n) % 2 else "launch_server"
        out.append({"id": f"{device}/{model.split('/')[1]}/{kv_name}/{par_name}", "device": device, "model": model,
                    "prefix": prefix, "args": ["--model-path", model, *par, *kv], "env": {}})
    # the threshold given through the environment, under each generation's name
    for device, model, var in itertools.product(DEVICES, (DS, GLM), (NSA_ENV, DSA_ENV)):
        out.append({"id": f"{device}/{model.split('/')[1]}/env-{var.split('_')[1].lower()}-4096", "device": device,
                    "model": model, "prefix": "launch_server", "args": ["--model-path", model, "--tp-size", "8"],
                    "env": {var: "4096"}})
    # explicit backends, spelled as the release spells them
    explicit = [
        ("h200", DS, ["--kv-cache-dtype", "fp8_e4m3", f"{pre}-decode-backend", "flashmla_kv"], "fp8-decode-flashmla_kv"),
        ("h200", GLM, ["--kv-cache-dtype", "bf16", f"{pre}-prefill-backend", "flashmla_sparse"], "bf16-prefill-sparse"),
        ("b200", DS, ["--kv-cache-dtype", "fp8_e4m3", f"{pre}-prefill-backend", "trtllm",
                      f"{pre}-decode-backend", "trtllm"], "fp8-trtllm-both"),
        ("b200", DS, ["--kv-cache-dtype", "bf16", f"{pre}-decode-backend", "trtllm"], "bf16-decode-trtllm"),
        ("b200", GLM, [f"{pre}-decode-backend=trtllm"], "decode-trtllm-inline"),
        ("mi300x", DS, [f"{pre}-prefill-backend", "tilelang"], "prefill-tilelang"),
        ("rtx-pro-6000", GLM, ["--kv-cache-dtype", "fp8_e4m3", "--page-size", "64"], "fp8-page64"),
    ]
    # argparse abbreviations (each release's parser resolves a unique prefix; an ambiguous one is refused)
    explicit += [
        ("b200", DS, ["--kv-cache-dt", "bf16"], "abbrev-kv"),
        ("h200", DS, ["--kv-cache-dt=fp8_e4m3"], "abbrev-kv-inline"),
        ("b200", GLM, [f"{pre}-decode-back", "trtllm", "--kv-cache-dtype", "fp8_e4m3"], "abbrev-decode"),
        ("b200", DS, [f"{pre}-prefill", "trtllm", "--kv-cache-dtype", "fp8_e4m3"], "abbrev-prefill-short"),
        ("h200", GLM, ["--page-si", "64"], "abbrev-page"),
    ]
    for device, model, args, name in explicit:
        out.append({"id": f"{device}/{model.split('/')[1]}/{name}", "device": device, "model": model,
                    "prefix": "serve", "args": ["--model-path", model, "--tp-size", "8", *args], "env": {}})
    return out


def planner_signature() -> dict[str, Any]:
    from nsa_policy.engines.sglang.launch import plan_launch

    params = inspect.signature(plan_launch).parameters
    return {"version_param": next((p for p in ("sglang_version", "release", "target_release") if p in params), None),
            "params": list(params)}


def plan(scenario: dict[str, Any], release: str, version_param: Optional[str]) -> dict[str, Any]:
    from nsa_policy.base.errors import InputError, PolicyError
    from nsa_policy.engines.sglang.launch import plan_launch

    command = PREFIXES[scenario["prefix"]] + scenario["args"]
    kwargs: dict[str, Any] = {"device": scenario["device"], "env": dict(scenario["env"]),
                              "logger": _SILENT}
    if version_param:
        kwargs[version_param] = release
    try:
        p = plan_launch(command, **kwargs)
    except (PolicyError, InputError) as e:  # launch refused the configuration or the command: nothing to start
        return {"rejected": f"{type(e).__name__}: " + " ".join(str(e).split())[:400]}
    d = p.decision
    return {"argv": list(p.argv), "server_argv": list(p.argv)[len(PREFIXES[scenario["prefix"]]):],
            "env_additions": dict(p.env_additions), "shell_line": p.shell_line(),
            # what launch predicts the release runs instead of the decision (its compat bundle), if it says
            **({"engine_overrides": dict(p.engine_overrides)} if hasattr(p, "engine_overrides") else {}),
            "decision": {"kv_cache_dtype": d.kv_cache_dtype, "prefill_backend": d.prefill_backend,
                         "decode_backend": d.decode_backend, "page_size": d.page_size,
                         "threshold": d.dense_attn_kv_len_threshold, "index_topk": d.index_topk,
                         "device_class": d.device_class, "architecture": d.architecture}}


def _norm_kv(v: Any) -> Any:
    return "bfloat16" if v == "bf16" else v


# scenario device/model -> the start-up oracle's emulated device and model config (policy_oracle.py)
ORACLE_DEVICE = {"h200": "sm90", "b200": "sm100", "rtx-pro-6000": "sm120", "mi300x": "gfx942"}
ORACLE_MODEL = {DS: "ds32", GLM: "glm5"}


def _without_model_path(argv: list[str]) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in ("--model-path", "--model"):
            skip = True
        elif not a.startswith(("--model-path=", "--model=")):
            out.append(a)
    return out


def startup(envs: SideEnvs, release: str, runs: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[dict[str, Any]]:
    """What the release's own start-up code does with each final command (policy_oracle.py, device emulated).
    No SGLANG_USE_AITER in the scenarios, so ROCm's aiter preshuffle path is off, as on a real node without it."""
    grid = [{"id": s["id"], "device": ORACLE_DEVICE[s["device"]], "preshuffle": False,
             "model": ORACLE_MODEL[s["model"]], "argv": _without_model_path(p["server_argv"]),
             "env": {**s["env"], **p["env_additions"]}} for s, p in runs]
    out = envs.run_script(release, "policy_oracle.py", "".join(json.dumps(g) + "\n" for g in grid))
    answers = [json.loads(line) for line in out.splitlines() if line.strip()]
    return in_input_order(answers, grid, f"sglang {release}")


def compare(facts: ReleaseFacts, scenario: dict[str, Any], planned: dict[str, Any],
            parsed: dict[str, Any], started: Optional[dict[str, Any]]) -> dict[str, Any]:
    rec = {"id": scenario["id"], "command": planned["shell_line"], "accepted": parsed["accepted"],
           "parser_error": parsed["error"], "parser_messages": parsed["messages"], "mismatches": []}
    if not parsed["accepted"]:
        return rec
    v, d = parsed["values"], planned["decision"]
    got = {"kv_cache_dtype": _norm_kv(v.get("kv_cache_dtype")),
           "prefill_backend": v.get("dsa_prefill_backend", v.get("nsa_prefill_backend")),
           "decode_backend": v.get("dsa_decode_backend", v.get("nsa_decode_backend")),
           "page_size": v.get("page_size")}
    want = {k: (_norm_kv(d[k]) if k == "kv_cache_dtype" else d[k]) for k in (*got, "threshold")}
    rec["parsed"] = got
    rec["mismatches"] = [f"{k}: parsed {got[k]!r} != decision {want[k]!r}" for k in got if got[k] != want[k]]
    if started is not None:
        # the threshold lives only in the environment: what the release's start-up code leaves in the
        # variable it reads (it overwrites an unset one with index_topk; 0.5.10-0.5.12 force 0 for GLM-5
        # on Blackwell); and what the release runs after its own start-up policy (informational)
        rec["startup"] = {k: started.get(k) for k in ("ok", "kv_cache_dtype", "prefill_backend", "decode_backend",
                                                      "page_size", "attention_backend", "threshold", "error")}
        if not started["ok"]:
            rec["mismatches"].append(f"start-up: the release refuses: {started['error']['message']}")
        elif started["threshold"] != want["threshold"]:
            rec["mismatches"].append(f"threshold: release runs {started['threshold']!r} != decision "
                                     f"{want['threshold']!r} ({facts.threshold_var} is the variable it reads)")
        else:
            runs = {k: (_norm_kv(started[k]) if k == "kv_cache_dtype" else started[k]) for k in got}
            rec["release_overrides"] = [f"{k}: runs {runs[k]!r}, decision {want[k]!r}" for k in got
                                        if runs[k] != want[k]]
        if started["ok"] and started["threshold"] == want["threshold"] and "engine_overrides" in planned:
            # launch's own prediction of those (plan.engine_overrides, from the release's compat bundle)
            runs = {k: (_norm_kv(started[k]) if k == "kv_cache_dtype" else started[k]) for k in got}
            real = {k: runs[k] for k in got if runs[k] != want[k]}
            predicted = {k: (_norm_kv(x) if k == "kv_cache_dtype" else x)
                         for k, x in planned.get("engine_overrides", {}).items() if k in got}
            rec["engine_overrides_predicted_right"] = real == predicted
            if real != predicted:
                rec["engine_overrides_diff"] = {"release runs": real, "launch predicted": predicted}
    return rec


def run_release(envs: SideEnvs, release: str, version_param: Optional[str]) -> dict[str, Any]:
    facts = load_facts(envs, release)
    items = scenarios(facts)
    t0 = time.perf_counter()
    planned = [plan(s, release, version_param) for s in items]
    t_plan = time.perf_counter() - t0
    t0 = time.perf_counter()
    # the user's own input first: one the release itself refuses is no test of launch
    # (one parser process for both batches: importing sglang is most of the time)
    with_argv = [p for p in planned if "argv" in p]
    answers = envs.parse(release, [s["args"] for s in items] + [p["server_argv"] for p in with_argv])
    inputs, launch_answers = answers[:len(items)], dict(zip(map(id, with_argv), answers[len(items):]))
    invalid = [{"id": s["id"], "error": r["error"]} for s, r in zip(items, inputs) if not r["accepted"]]
    valid = [(s, p) for s, p, r in zip(items, planned, inputs) if r["accepted"]]
    to_parse = [(s, p) for s, p in valid if "argv" in p]
    parsed = [launch_answers[id(p)] for _, p in to_parse]
    t_parse = time.perf_counter() - t0
    t0 = time.perf_counter()
    accepted = [(s, p) for (s, p), r in zip(to_parse, parsed) if r["accepted"]]
    started = dict(zip((s["id"] for s, _ in accepted), startup(envs, release, accepted))) if accepted else {}
    t_startup = time.perf_counter() - t0
    records = [compare(facts, s, p, r, started.get(s["id"])) for (s, p), r in zip(to_parse, parsed)]
    rejected = [{"id": s["id"], "reason": p["rejected"]} for s, p in valid if "rejected" in p]
    failures = [r for r in records if not r["accepted"] or r["mismatches"]]
    return {"release": release, "threshold_var": facts.threshold_var, "scenarios": len(items),
            "input_refused_by_release": len(invalid), "inputs_refused": invalid,
            "rejected_by_policy": len(rejected), "parsed": len(records),
            "accepted": sum(r["accepted"] for r in records),
            "agreeing": sum(r["accepted"] and not r["mismatches"] for r in records),
            "seconds": {"plan": round(t_plan, 2), "parse": round(t_parse, 2), "startup": round(t_startup, 2)},
            "release_overrides": [{"id": r["id"], "overrides": r["release_overrides"]} for r in records
                                  if r.get("release_overrides")],
            "engine_overrides_checked": sum("engine_overrides_predicted_right" in r for r in records),
            "engine_overrides_right": sum(bool(r.get("engine_overrides_predicted_right")) for r in records),
            "engine_overrides_wrong": [{"id": r["id"], **r["engine_overrides_diff"]} for r in records
                                       if "engine_overrides_diff" in r],
            "failures": failures, "policy_rejections": rejected, "records": records}


def machine() -> dict[str, Any]:
    def sh(cmd: str) -> str:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()

    return {"host": socket.gethostname(), "cpu": sh("nproc") + " cores", "os": platform.platform(),
            "python": platform.python_version(),
            "load_average_1m": round(os.getloadavg()[0], 2),
            "git_head": sh(f"git -C {REPO} rev-parse --short HEAD")}


def run(releases: list[str], envs: SideEnvs) -> dict[str, Any]:
    import nsa_policy

    sig = planner_signature()
    source = str(Path(nsa_policy.__file__).resolve().parent.parent)
    return {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(),
            "planner": {"function": "nsa_policy.engines.sglang.launch.plan_launch", "nsa_policy_from": source, **sig},
            "releases": [run_release(envs, r, sig["version_param"]) for r in releases]}


def _failure_key(f: dict[str, Any]) -> str:
    if not f["accepted"]:
        err = re.sub(r"'[^']*'", "…", f["parser_error"] or "")
        err = re.sub(r"(--[\w-]+)(=| )[\w.]+", r"\1 …", err)
        return "parser: " + re.sub(r"\(choose from [^)]*\)", "(choices …)", err)
    return "; ".join(re.sub(r"'[^']*'|\b\d+\b", "…", m) for m in f["mismatches"])


def _run_markdown(label: str, result: dict[str, Any]) -> list[str]:
    m, pl = result["machine"], result["planner"]
    lines = [f"## {label}", "",
             f"{result['date']} on {m['host']} ({m['cpu']}, {m['os']}, load {m.get('load_average_1m', '?')}), "
             f"git {m['git_head']}, nsa_policy from `{pl.get('nsa_policy_from', '?')}`; `plan_launch` "
             + (f"given the release as `{pl['version_param']}`." if pl["version_param"]
                else "with no release parameter (not version-aware)."), "",
             "| release | threshold variable read | scenarios | input refused by the release | refused by the policy "
             "| parsed | accepted | agreeing |", "|---|---|---|---|---|---|---|---|"]
    for r in result["releases"]:
        lines.append(f"| {r['release']} | `{r['threshold_var']}` | {r['scenarios']} | "
                     f"{r.get('input_refused_by_release', 0)} | {r['rejected_by_policy']} | {r['parsed']} | "
                     f"{r['accepted']} | {r['agreeing']} |")
    for r in result["releases"]:
        lines += ["", f"### {label}, {r['release']}: {len(r['failures'])} failing", ""]
        if r["failures"]:
            groups: dict[str, list[dict[str, Any]]] = {}
            for f in r["failures"]:
                groups.setdefault(_failure_key(f), []).append(f)
            lines += ["| failure | scenarios | example: command → answer |", "|---|---|---|"]
            for key, fs in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
                ex = fs[0]
                detail = ex["parser_error"] if not ex["accepted"] else "; ".join(ex["mismatches"])
                lines.append(f"| {key.replace('|', '/')} | {len(fs)} | `{ex['id']}`: `{ex['command']}` → "
                             f"{detail.replace('|', '/')} |")
        else:
            lines.append("Every parsed scenario accepted and agreeing.")
        if r.get("release_overrides"):
            ex = r["release_overrides"][0]
            lines += ["", f"The release's own start-up policy then runs something else than the flags in "
                          f"{len(r['release_overrides'])} scenarios (not counted), e.g. `{ex['id']}`: "
                          + "; ".join(ex["overrides"])]
        if r.get("engine_overrides_checked"):
            lines += ["", f"Launch's prediction of what the release runs instead (`plan.engine_overrides`, from "
                          f"its compat bundle) vs the release's own start-up code: {r['engine_overrides_right']}/"
                          f"{r['engine_overrides_checked']} right."]
            for w in r["engine_overrides_wrong"][:5]:
                lines.append(f"- `{w['id']}`: release runs {w['release runs']}, launch predicted "
                             f"{w['launch predicted']}")
        if r["policy_rejections"]:
            why: dict[str, int] = {}
            for x in r["policy_rejections"]:
                kind, _, reason = x["reason"].partition(": ")
                reason = reason.split("): ", 1)[-1] if kind == "StartupRejected" else reason
                reason = re.split(r" at fault:| on \S+ \(sm|; it lists", reason)[0]
                why[reason] = why.get(reason, 0) + 1
            lines += ["", "Refused by launch (policy rejection or usage error; no command to start): " + "; ".join(
                f"{n} × {reason}" for reason, n in sorted(why.items(), key=lambda kv: -kv[1]))]
        if r.get("inputs_refused"):
            lines += ["", "Inputs the release itself refuses (not counted): " + "; ".join(
                f"`{i['id']}` ({i['error']})" for i in r["inputs_refused"])]
    return lines


def markdown(doc: dict[str, Any]) -> str:
    lines = ["# `nsa-policy launch` against sglang's real parsers", "",
             "Generated by `python scripts/sglang_oracle/acceptance.py --write --label LABEL` (issue 10, "
             "deliverable 4). Each scenario's final command is built by `plan_launch` and its server argv parsed "
             "by that release's own parser (sglang==X installed without dependencies in a side environment; "
             "scripts/sglang_oracle/README.md). A scenario agrees when the parser accepts the argv and the parsed "
             "kv dtype (`bf16` = `bfloat16`), both backends and page size equal the decision, and the release's "
             "own start-up code (scripts/sglang_oracle/policy_oracle.py: parser → from_cli_args → resolution → "
             "check_server_args, device emulated, with the command's environment) accepts the command and runs "
             "the decision's dense-attention threshold (it has no flag; only the variable the release reads "
             "counts). A scenario whose own input the release refuses is not counted. Where the release's "
             "policy then runs something other than the flags, the run lists it under `release_overrides` "
             "(not counted).", ""]
    for label, result in sorted(doc["runs"].items(), key=lambda kv: kv[1]["date"]):
        lines += _run_markdown(label, result) + [""]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--releases", default=",".join(RELEASES))
    ap.add_argument("--write", action="store_true", help="record benchmarks/results/launch-acceptance.{json,md}")
    ap.add_argument("--label", default="latest", help="the run's name in the record (a run of the same name is "
                                                      "replaced), e.g. 'before', 'after'")
    args = ap.parse_args(argv)
    envs = SideEnvs.find()
    if envs is None:
        print("no side environments: run scripts/sglang_oracle/build_envs.sh", file=sys.stderr)
        return 2
    releases = sorted_releases(r for r in args.releases.split(",") if r)
    result = run(releases, envs)
    for r in result["releases"]:
        print(f"{r['release']}: {r['scenarios']} scenarios, {r['input_refused_by_release']} inputs refused by the "
              f"release, {r['rejected_by_policy']} refused by the policy, {r['parsed']} parsed, {r['accepted']} "
              f"accepted, {r['agreeing']} agreeing (plan {r['seconds']['plan']} s, parse {r['seconds']['parse']} s, "
              f"start-up {r['seconds']['startup']} s)")
        for f in r["failures"][:5]:
            print(f"  {f['id']}: {f['parser_error'] or '; '.join(f['mismatches'])}")
    if args.write:
        doc: dict[str, Any] = {"runs": {}}
        if RESULTS_JSON.is_file():
            doc = json.loads(RESULTS_JSON.read_text())
            doc.setdefault("runs", {})
        for r in result["releases"]:
            r.pop("records", None)
        doc["runs"][args.label] = result
        RESULTS_JSON.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        RESULTS_MD.write_text(markdown(doc))
        print(f"wrote {RESULTS_JSON.relative_to(REPO)} and {RESULTS_MD.relative_to(REPO)}")
    return 0 if all(r["agreeing"] == r["parsed"] for r in result["releases"]) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
