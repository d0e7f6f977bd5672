"""Agreement of a release bundle with that sglang release's own start-up code, on a grid.

    python benchmarks/sglang_release_agreement.py --release 0.5.23 [--limit N] [--out FILE]

Runs scripts/sglang_oracle/policy_oracle.py (helper-E's oracle: sglang's real parser -> from_cli_args
-> resolve_once -> check_server_args, device emulated) inside the release's side environment
(/work/sgenv/envs.json), evaluates `--policy sglang-<release>` (resolved to the newest bundle at or
below it) on the same inputs, and prints agreement on kv dtype, both backends, page size, attention
backend, threshold and refusal. Disagreements are written as JSON lines to --out.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEVICES = {"sm80": "a100", "sm90": "h200", "sm100": "b200", "sm103": "b300", "sm120": "rtx-pro-6000",
           "sm121": "gb10", "gfx942": "mi300x", "gfx950": "mi355x"}
MODELS = {"ds32": "deepseek-ai/DeepSeek-V3.2", "glm5": "zai-org/GLM-5"}
PREFILL = [None, "flashmla_sparse", "flashmla_kv", "flashmla_auto", "trtllm", "tilelang", "triton", "fa3",
           "flashinfer_sparse_mla"]
DECODE = [None, "flashmla_kv", "trtllm", "tilelang", "triton", "fa3", "aiter"]
EXTRAS = {"none": ([], {}), "hisparse": (["--enable-hisparse", "--disable-radix-cache"], {"enable_hisparse": True,
                                                                                          "disable_radix_cache": True}),
          "dcp2": (["--dcp-size", "2"], {"dcp_size": 2})}


def grid(release: str):
    flag = "dsa" if tuple(int(x) for x in release.split(".")[:3]) >= (0, 5, 13) else "nsa"
    n = 0
    for dev, model, kv, pre, dec, extra in itertools.product(DEVICES, MODELS, ["auto", "bfloat16", "fp8_e4m3"],
                                                              PREFILL, DECODE, EXTRAS):
        if extra == "dcp2" and tuple(int(x) for x in release.split(".")[:3]) < (0, 5, 15):
            continue
        for preshuffle in ((False, True) if dev.startswith("gfx") else (False,)):
            argv = ["--kv-cache-dtype", kv]
            cfg = {"kv_cache_dtype": kv}
            if pre:
                argv += [f"--{flag}-prefill-backend", pre]
                cfg["nsa_prefill_backend"] = pre
            if dec:
                argv += [f"--{flag}-decode-backend", dec]
                cfg["nsa_decode_backend"] = dec
            argv += EXTRAS[extra][0]
            cfg.update(EXTRAS[extra][1])
            n += 1
            yield {"id": n, "device": dev, "preshuffle": preshuffle, "model": model, "argv": argv}, cfg


# The second grid: model variants (config.json keys), serving options and the threshold variables.
VARIANT_MODELS = {"ds32": {}, "ds32-sink": {"learnable_sink": True}, "ds32-kpool2": {"index_kpool": 2},
                  "ds32-freq2": {"index_topk_freq": 2}}
SERVING = {"none": ([], {}), "dcp2": (["--dcp-size", "2"], {"dcp_size": 2}),
           "tbo": (["--enable-two-batch-overlap"], {"enable_two_batch_overlap": True}),
           "page16": (["--page-size", "16"], {"page_size": 16})}
ENVS = {"none": {}, "nsa-thr": {"SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD": "4096"},
        "dsa-thr": {"SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD": "1024"}}


def variant_grid(release: str):
    v = tuple(int(x) for x in release.split(".")[:3])
    flag = "dsa" if v >= (0, 5, 13) else "nsa"
    n = 100000
    for dev, model, kv, pre, serving, env in itertools.product(
            DEVICES, VARIANT_MODELS, ["auto", "bfloat16", "fp8_e4m3"], [None, "flashmla_sparse", "trtllm", "tilelang"],
            SERVING, ENVS):
        if serving == "dcp2" and v < (0, 5, 15):
            continue
        argv, cfg = ["--kv-cache-dtype", kv], {"kv_cache_dtype": kv}
        if pre:
            argv += [f"--{flag}-prefill-backend", pre]
            cfg["nsa_prefill_backend"] = pre
        argv += SERVING[serving][0]
        cfg.update(SERVING[serving][1])
        n += 1
        yield ({"id": n, "device": dev, "preshuffle": False, "model": "ds32", "config": VARIANT_MODELS[model],
                "argv": argv, "env": ENVS[env]}, cfg)


def ours(release: str, item: dict, cfg: dict) -> dict:
    from nsa_policy.api import build_facts, decide

    env = dict(item.get("env") or {})
    if item["preshuffle"]:
        env["SGLANG_USE_AITER"] = "1"
    pk = {"triton": "3.6.0"} if item["preshuffle"] else {}
    model: object = MODELS[item["model"]]
    if item.get("config"):  # DeepSeek-V3.2 with config.json variants
        model = {"architectures": ["DeepseekV32ForCausalLM"], "index_topk": 2048, "num_attention_heads": 128,
                 **item["config"]}
    facts = build_facts(cfg, device=DEVICES[item["device"]], model=model, env=env, packages=pk)
    d = decide(facts, f"sglang-{release}", trace=False)
    return {"ok": not d.errors, "kv_cache_dtype": d.kv_cache_dtype, "prefill_backend": d.prefill_backend,
            "decode_backend": d.decode_backend, "page_size": d.page_size, "attention_backend": d.attention_backend,
            "threshold": d.dense_attn_kv_len_threshold, "codes": [f.code for f in d.errors]}


FIELDS = ("kv_cache_dtype", "prefill_backend", "decode_backend", "page_size", "attention_backend", "threshold")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--release", required=True)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--out", default="")
    ap.add_argument("--variants", action="store_true", help="the model-variant / serving / threshold-variable grid")
    a = ap.parse_args()
    envs = json.loads(Path("/work/sgenv/envs.json").read_text())
    e = envs[a.release]
    items = list(variant_grid(a.release) if a.variants else grid(a.release))
    if a.limit:
        items = items[: a.limit]
    t0 = time.time()
    proc = subprocess.run([e["python"], str(REPO / "scripts/sglang_oracle/policy_oracle.py")],
                          input="".join(json.dumps(i) + "\n" for i, _ in items), capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": ":".join(e["pythonpath"])})
    t_oracle = time.time() - t0
    answers = {r["id"]: r for r in map(json.loads, proc.stdout.splitlines())}
    if len(answers) != len(items):
        sys.exit(f"oracle answered {len(answers)} of {len(items)}: {proc.stderr[-2000:]}")
    bad, agree = [], 0
    t1 = time.time()
    for item, cfg in items:
        theirs = answers[item["id"]]
        mine = ours(a.release, item, cfg)
        same = mine["ok"] == theirs["ok"] and (not mine["ok"] or all(mine[f] == theirs[f] for f in FIELDS))
        if same:
            agree += 1
        else:
            bad.append({"input": item, "sglang": theirs, "ours": mine})
    t_ours = time.time() - t1
    print(json.dumps({"release": a.release, "grid": "variants" if a.variants else "main", "inputs": len(items), "agree": agree,
                      "agreement": round(agree / len(items), 4), "oracle_s": round(t_oracle, 1),
                      "ours_s": round(t_ours, 1), "disagreements": len(bad)}))
    if a.out:
        Path(a.out).write_text("".join(json.dumps(b) + "\n" for b in bad))


if __name__ == "__main__":
    main()
