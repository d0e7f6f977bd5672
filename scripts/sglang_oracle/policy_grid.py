"""A grid of start-up inputs answered by sglang 0.5.23's own pipeline (policy_oracle.py), for replay.

    python scripts/sglang_oracle/policy_grid.py [--release 0.5.23] [--write]

Builds the small grid below, runs it through the release's real pipeline in its side environment
and prints agreement with the committed answers. --write records:
- tests/data/sglang/<release>/grid.jsonl     the inputs (policy_oracle.py's input format)
- tests/data/sglang/<release>/answers.jsonl  sglang's answers, one line per input, same order (no timings)
- benchmarks/results/sglang-policy-oracle-<release>.json  ms per configuration, machine, date
"""
from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from acceptance import machine  # noqa: E402
from run import REPO, SideEnvs, in_input_order  # noqa: E402

DATA = REPO / "tests" / "data" / "sglang"
NSA_ENV = "SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD"
DSA_ENV = "SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD"
ANSWER_FIELDS = ("id", "ok", "stage", "kv_cache_dtype", "prefill_backend", "decode_backend", "page_size",
                 "attention_backend", "threshold", "error")

DEVICES = [("sm80", False), ("sm90", False), ("sm100", False), ("sm103", False), ("sm120", False),
           ("sm121", False), ("gfx942", False), ("gfx942", True), ("gfx950", True)]
MODELS = {"ds32": ("ds32", {}), "glm5": ("glm5", {}), "ds3": ("ds3", {}), "hyv4": ("hyv4", {}),
          "ds32-kpool2": ("ds32", {"index_kpool": 2})}
KVS = {"kv-unset": [], "kv-bf16": ["--kv-cache-dtype", "bf16"], "kv-fp8": ["--kv-cache-dtype", "fp8_e4m3"]}
BACKENDS = {"be-unset": [], "p-flashmla_sparse": ["--dsa-prefill-backend", "flashmla_sparse"],
            "d-trtllm": ["--dsa-decode-backend", "trtllm"],
            "both-tilelang": ["--dsa-prefill-backend", "tilelang", "--dsa-decode-backend", "tilelang"],
            "p-triton": ["--dsa-prefill-backend", "triton"], "d-flashmla_kv": ["--dsa-decode-backend", "flashmla_kv"]}
EXTRAS = {"dcp2": ["--dcp-size", "2"], "attn-dp8": ["--attn-dp-size", "8"],
          "dp8-dpattn": ["--dp-size", "8", "--enable-dp-attention"],
          "hisparse": ["--enable-hisparse", "--disable-radix-cache"],
          "page32": ["--page-size", "32"], "attn-nsa": ["--attention-backend", "nsa"]}
ENVS = {"env-nsa-4096": {NSA_ENV: "4096"}, "env-dsa-4096": {DSA_ENV: "4096"}, "env-dsa-0": {DSA_ENV: "0"}}


def _dev_name(device: str, pre: bool) -> str:
    return device + ("-preshuffle" if pre else "")


def small_grid() -> list[dict[str, Any]]:
    grid = []
    # the core: device x model x kv x backend flags, tp 8
    for (dev, pre), (mname, (base, cfg)), (kname, kv), (bname, be) in itertools.product(
            DEVICES, MODELS.items(), KVS.items(), BACKENDS.items()):
        grid.append({"id": f"{_dev_name(dev, pre)}/{mname}/{kname}/{bname}", "device": dev, "preshuffle": pre,
                     "model": base, "config": cfg, "argv": ["--tp-size", "8", *kv, *be], "env": {}})
    # serving extras and the threshold variables, on the DSA models, kv unset and fp8
    for (dev, pre), mname, (kname, kv), (xname, extra) in itertools.product(
            DEVICES, ("ds32", "glm5"), (("kv-unset", []), ("kv-fp8", ["--kv-cache-dtype", "fp8_e4m3"])),
            EXTRAS.items()):
        base, cfg = MODELS[mname]
        grid.append({"id": f"{_dev_name(dev, pre)}/{mname}/{kname}/{xname}", "device": dev, "preshuffle": pre,
                     "model": base, "config": cfg, "argv": ["--tp-size", "8", *kv, *extra], "env": {}})
    for (dev, pre), mname, (ename, env) in itertools.product(DEVICES, ("ds32", "glm5"), ENVS.items()):
        base, cfg = MODELS[mname]
        grid.append({"id": f"{_dev_name(dev, pre)}/{mname}/kv-unset/{ename}", "device": dev, "preshuffle": pre,
                     "model": base, "config": cfg, "argv": ["--tp-size", "8"], "env": env})
    return grid


def run_grid(envs: SideEnvs, release: str, grid: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], float]:
    t0 = time.perf_counter()
    out = envs.run_script(release, "policy_oracle.py", "".join(json.dumps(g, sort_keys=True) + "\n" for g in grid))
    wall = time.perf_counter() - t0
    answers = [json.loads(line) for line in out.splitlines() if line.strip()]
    return in_input_order(answers, grid, f"sglang {release}"), wall


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--release", default="0.5.23")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args(argv)
    envs = SideEnvs.find()
    if envs is None:
        print("no side environments: run scripts/sglang_oracle/build_envs.sh 0.5.23", file=sys.stderr)
        return 2
    grid = small_grid()
    answers, wall = run_grid(envs, args.release, grid)
    ms = [a["ms"] for a in answers[1:]]  # the first input pays the lazy imports
    refused = sum(not a["ok"] for a in answers)
    harness = [a for a in answers if not a["ok"] and a["stage"] in ("parse", "from_cli_args", "input")]
    print(f"sglang {args.release}: {len(grid)} inputs, {refused} refused by the release, wall {wall:.1f} s, "
          f"per configuration median {statistics.median(ms):.1f} ms, mean {statistics.mean(ms):.1f} ms "
          f"(first {answers[0]['ms']:.0f} ms)")
    d = DATA / args.release
    stable = [{k: a.get(k) for k in ANSWER_FIELDS} for a in answers]
    if (d / "answers.jsonl").is_file():
        old = [json.loads(line) for line in (d / "answers.jsonl").read_text().splitlines() if line.strip()]
        same = sum(o == n for o, n in zip(old, stable))
        print(f"committed answers: {same}/{len(stable)} identical")
    if args.write:
        d.mkdir(parents=True, exist_ok=True)
        (d / "grid.jsonl").write_text("".join(json.dumps(g, sort_keys=True) + "\n" for g in grid))
        (d / "answers.jsonl").write_text("".join(json.dumps(a, sort_keys=True) + "\n" for a in stable))
        ms_sorted = sorted(ms)
        bench = {"release": args.release, "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                 "machine": machine(), "inputs": len(grid), "refused_by_release": refused,
                 "harness_failures": len(harness), "wall_s": round(wall, 2),
                 "ms_per_configuration": {"first (imports)": answers[0]["ms"],
                                          "median": round(statistics.median(ms), 2),
                                          "mean": round(statistics.mean(ms), 2),
                                          "p95": ms_sorted[int(0.95 * (len(ms_sorted) - 1))],
                                          "max": ms_sorted[-1]},
                 "pipeline": "parser -> ServerArgs.from_cli_args -> resolve_once() -> check_server_args(), "
                             "device emulated (policy_oracle.py)"}
        out = REPO / "benchmarks" / "results" / f"sglang-policy-oracle-{args.release}.json"
        out.write_text(json.dumps(bench, indent=1, sort_keys=True) + "\n")
        print(f"wrote {d.relative_to(REPO)}/grid.jsonl, answers.jsonl and {out.relative_to(REPO)}")
    return 1 if harness else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
