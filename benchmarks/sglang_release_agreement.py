"""Agreement of each release bundle with that sglang release's own start-up code, on a grid.

    python benchmarks/sglang_release_agreement.py --release 0.5.23 [--grid full|main|variants]
        [--jobs 2] [--limit N] [--sample K] [--out disagreements.jsonl] [--record]
    python benchmarks/sglang_release_agreement.py --table     # rewrite the tables in sglang-releases.md

Runs scripts/sglang_oracle/policy_oracle.py inside the release's side environment (sglang==X installed
without dependencies, /work/sgenv/envs.json; see scripts/sglang_oracle/README.md): the release's real
parser -> from_cli_args -> resolve_once (0.5.19+; __post_init__ before) -> check_server_args, device
emulated by patching platform probes only. The grid is split over --jobs oracle processes.

nsa-policy answers the same command the way a user's command reaches it: the argv is read with the
catalog's spellings for release X (a flag the release does not have, or a value outside its choices,
is refused as argparse refuses it), then `--policy sglang-X` (the newest bundle at or below X) decides.

Agreement = same refusal (sglang raised / nsa-policy refused) and, where both accept, the same
kv_cache_dtype, prefill and decode backend, page size, attention backend and dense-attention threshold.
--record merges the result into benchmarks/results/sglang-releases.json (and rewrites the tables).
Progress goes to stderr on a terminal only.
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Optional

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results" / "sglang-releases.json"
TABLE_DOC = REPO / "benchmarks" / "results" / "sglang-releases.md"
ORACLE = REPO / "scripts" / "sglang_oracle" / "policy_oracle.py"

sys.path.insert(0, str(REPO))
from nsa_policy.engines.sglang.replay import DEVICES  # noqa: E402  (oracle device class -> catalog device)
from nsa_policy.progress import Progress  # noqa: E402  (a line on stderr, on a terminal only)

DEVICE_VARIANTS = [(d, p) for d in DEVICES for p in ((False, True) if d.startswith("gfx") else (False,))]
MODELS = {"ds32": "deepseek-ai/DeepSeek-V3.2", "glm5": "zai-org/GLM-5"}
# Every backend name any release 0.5.10-0.5.23 lists (a release that does not list one refuses it).
BACKENDS = [None, "flashmla_sparse", "flashmla_kv", "flashmla_auto", "fa3", "tilelang", "aiter", "trtllm",
            "flashmla_sparse_q8", "flashinfer_sparse_mla", "triton", "triton_sparse_mla", "intel_xpu"]
# The DSA architectures of any release (SGLANG-RELEASES.md §4 G1-G3), KimiK25 (in the gate list, not DSA)
# and DeepSeek-V3 without index_topk (not DSA).
ARCHS = ["DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV3ForCausalLMNextN", "MistralLarge3ForCausalLM",
         "PixtralForConditionalGeneration", "GlmMoeDsaForCausalLM", "GlmMoeDsaForCausalLMNextN",
         "Glm5NextForConditionalGeneration", "Glm5NextForConditionalGenerationNextN", "LongcatFlashForCausalLM",
         "LongcatFlashForCausalLMNextN", "Dots3NoteForCausalLM", "Dots3NoteForCausalLMNextN", "HYV4ForCausalLM",
         "HYV4ForCausalLMNextN", "KimiK25ForConditionalGeneration", "non-dsa"]
NSA_THR, DSA_THR = "SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD", "SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD"
# Serving / environment / model-config profiles; each row of the full grid gets some of them by rotation,
# so every profile meets every device, architecture, kv dtype and backend pair.
PROFILES: dict[str, tuple[list[str], dict[str, str], dict[str, Any]]] = {
    "none": ([], {}, {}),
    "hisparse": (["--enable-hisparse", "--disable-radix-cache"], {}, {}),
    "hisparse-radix": (["--enable-hisparse"], {}, {}),
    "dcp2": (["--dcp-size", "2"], {}, {}),
    "dp-attention": (["--tp-size", "8", "--dp-size", "8", "--enable-dp-attention"], {}, {}),
    "attn-dp": (["--tp-size", "8", "--attn-dp-size", "8"], {}, {}),
    "tp8": (["--tp-size", "8"], {}, {}),
    "nsa-threshold": ([], {NSA_THR: "4096"}, {}),
    "dsa-threshold": ([], {DSA_THR: "1024"}, {}),
    "both-thresholds": ([], {NSA_THR: "4096", DSA_THR: "1024"}, {}),
    "quantization": (["--quantization", "fp8"], {}, {}),
    "sink": ([], {}, {"learnable_sink": True}),
    "sink-dcp2": (["--dcp-size", "2"], {}, {"learnable_sink": True}),
    "kpool2": ([], {}, {"index_kpool": 2}),
    "kpool2-dcp2": (["--dcp-size", "2"], {}, {"index_kpool": 2}),
    "tbo": (["--enable-two-batch-overlap"], {}, {}),
    "freq2-tbo": (["--enable-two-batch-overlap"], {}, {"index_topk_freq": 2}),
    "page16": (["--page-size", "16"], {}, {}),
}


def _v(release: str) -> tuple[int, ...]:
    return tuple(int(x) for x in release.split(".")[:3])


def _flag(release: str) -> str:
    return "dsa" if _v(release) >= (0, 5, 13) else "nsa"


_INDEXER = {"index_topk": 2048, "index_head_dim": 128, "index_n_heads": 64}


def _model(arch: str, extra: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(oracle base, config overrides). DeepseekV32ForCausalLM is DeepSeek-V3.2's own config.json
    (model_type deepseek_v32: where the release's transformers lacks that type, sglang reloads it as
    DeepseekV3ForCausalLM, as it does for the real checkpoint). Every other architecture is DeepSeek-V3's
    config.json (model_type deepseek_v3, which no release rewrites) with that architecture and the indexer
    keys; "non-dsa" is DeepSeek-V3 itself (no index_topk)."""
    if arch == "non-dsa":
        return "ds3", dict(extra)
    if arch == "DeepseekV32ForCausalLM":
        return "ds32", dict(extra)
    return "ds3", {"architectures": [arch], **_INDEXER, **extra}


def full_grid(release: str) -> Iterator[dict[str, Any]]:
    """>= 40,000 inputs: (A) every backend pair for DeepSeek-V3.2 and GLM-5, three profiles each;
    (B) every architecture with fewer backend values and five kv spellings, one profile each;
    (C) prefill context parallel: every CP spelling under each parallel layout (cp_grid);
    (D) the DSA cache layer split with and without interleave CP on a PD prefill worker."""
    flag = _flag(release)
    names = list(PROFILES)
    n = 0

    def item(dev: str, pre: bool, base: str, cfg: dict[str, Any], kv: str, p: Optional[str], d: Optional[str],
             profile: str) -> dict[str, Any]:
        argv, env, conf = PROFILES[profile]
        argv = ["--kv-cache-dtype", kv] + ([f"--{flag}-prefill-backend", p] if p else []) \
            + ([f"--{flag}-decode-backend", d] if d else []) + argv
        return {"id": n, "device": dev, "preshuffle": pre, "model": base, "config": {**cfg, **conf}, "argv": argv,
                "env": env, "profile": profile}

    row = 0
    for (dev, pre), model, kv, p, d in itertools.product(DEVICE_VARIANTS, ("glm5", "ds32"),
                                                         ("auto", "bfloat16", "fp8_e4m3"), BACKENDS, BACKENDS):
        base, cfg = (model, {}) if model == "glm5" else _model("DeepseekV32ForCausalLM", {})  # the real configs
        for copy in range(3):
            n += 1
            yield item(dev, pre, base, cfg, kv, p, d, names[(row + 7 * copy) % len(names)])
        row += 1
    for (dev, pre), arch, kv, p, d in itertools.product(DEVICE_VARIANTS, ARCHS,
                                                        ("auto", "bf16", "bfloat16", "fp8_e4m3", "fp8_e5m2"),
                                                        (None, "flashmla_sparse", "trtllm", "tilelang"),
                                                        (None, "flashmla_kv", "triton")):
        base, cfg = _model(arch, {})
        n += 1
        yield item(dev, pre, base, cfg, kv, p, d, names[(row * 5) % len(names)])
        row += 1
    yield from cp_grid(release, start=n)
    yield from layer_split_grid(release, start=n + 100000)


# Prefill context parallel (section C of the full grid): every spelling any release reads, each
# alone and with each mode/strategy, under the parallel layouts CP's checks read.
def _cp_spellings(release: str) -> dict[str, list[str]]:
    flag = _flag(release)
    return {
        "cp-off": [],
        "cp": ["--enable-prefill-cp"],
        "cp-zigzag": ["--enable-prefill-cp", "--cp-strategy", "zigzag"],
        "cp-interleave": ["--enable-prefill-cp", "--cp-strategy", "interleave"],
        "dsa-cp": [f"--enable-{flag}-prefill-context-parallel"],
        "dsa-cp-in-seq": [f"--enable-{flag}-prefill-context-parallel", f"--{flag}-prefill-cp-mode", "in-seq-split"],
        "dsa-cp-round-robin": [f"--enable-{flag}-prefill-context-parallel", f"--{flag}-prefill-cp-mode",
                               "round-robin-split"],
        "generic-cp": ["--enable-prefill-context-parallel"],
        "generic-cp-in-seq": ["--enable-prefill-context-parallel", "--prefill-cp-mode", "in-seq-split"],
    }


CP_LAYOUTS: dict[str, list[str]] = {
    "tp1": [],
    "tp4": ["--tp-size", "4"],
    "tp8": ["--tp-size", "8"],
    "tp8-dp8": ["--tp-size", "8", "--dp-size", "8", "--enable-dp-attention"],
    "tp8-dp2": ["--tp-size", "8", "--dp-size", "2", "--enable-dp-attention"],
    "tp8-attn-dp8": ["--tp-size", "8", "--attn-dp-size", "8"],
    "tp8-decode": ["--tp-size", "8", "--disaggregation-mode", "decode"],
    "tp8-dcp2": ["--tp-size", "8", "--dcp-size", "2"],
    "tp16": ["--tp-size", "16"],
}
CP_MODELS = ["ds32", "glm5", "HYV4ForCausalLM", "LongcatFlashForCausalLM", "non-dsa"]
CP_BACKENDS = [(None, None), ("flashmla_sparse", "flashmla_kv"), ("trtllm", "trtllm"), ("tilelang", "tilelang")]


def cp_grid(release: str, start: int = 200000) -> Iterator[dict[str, Any]]:
    """Section C: devices x models x CP spellings x parallel layouts, twice, kv dtype and backend pair
    by rotation."""
    flag, n, row = _flag(release), start, 0
    for (dev, pre), model, (cp, cp_argv), (layout, lay_argv), copy in itertools.product(
            DEVICE_VARIANTS, CP_MODELS, _cp_spellings(release).items(), CP_LAYOUTS.items(), range(2)):
        base, cfg = (model, {}) if model == "glm5" else _model("DeepseekV32ForCausalLM" if model == "ds32" else model, {})
        kv = ("auto", "fp8_e4m3", "bfloat16")[(row + copy) % 3]
        p, d = CP_BACKENDS[(row // 3 + 2 * copy) % len(CP_BACKENDS)]
        argv = ["--kv-cache-dtype", kv] + ([f"--{flag}-prefill-backend", p] if p else []) \
            + ([f"--{flag}-decode-backend", d] if d else []) + cp_argv + lay_argv
        n += 1
        row += 1
        yield {"id": n, "device": dev, "preshuffle": pre, "model": base, "config": cfg, "argv": argv, "env": {},
               "profile": f"{cp}/{layout}"}


LAYER_SPLIT: dict[str, list[str]] = {
    "split": ["--enable-dsa-cache-layer-split"],
    "split-cp-prefill": ["--enable-dsa-cache-layer-split", "--enable-prefill-cp", "--cp-strategy", "interleave",
                         "--disaggregation-mode", "prefill"],
    "split-cp": ["--enable-dsa-cache-layer-split", "--enable-prefill-cp", "--cp-strategy", "interleave"],
    "split-zigzag-prefill": ["--enable-dsa-cache-layer-split", "--enable-prefill-cp", "--cp-strategy", "zigzag",
                             "--disaggregation-mode", "prefill"],
    "split-cp-decode": ["--enable-dsa-cache-layer-split", "--enable-prefill-cp", "--cp-strategy", "interleave",
                        "--disaggregation-mode", "decode"],
}


def layer_split_grid(release: str, start: int) -> Iterator[dict[str, Any]]:
    """Section D: --enable-dsa-cache-layer-split (0.5.16+) with and without interleave CP on a PD prefill worker."""
    n, row = start, 0
    for (dev, pre), model, (name, argv), copy in itertools.product(
            DEVICE_VARIANTS, ("ds32", "glm5", "LongcatFlashForCausalLM", "non-dsa"), LAYER_SPLIT.items(), range(2)):
        base, cfg = (model, {}) if model == "glm5" else _model("DeepseekV32ForCausalLM" if model == "ds32" else model, {})
        kv = ("auto", "fp8_e4m3", "bfloat16")[(row + copy) % 3]
        n += 1
        row += 1
        yield {"id": n, "device": dev, "preshuffle": pre, "model": base, "config": cfg,
               "argv": ["--kv-cache-dtype", kv, "--tp-size", "8"] + argv, "env": {}, "profile": name}


def main_grid(release: str) -> Iterator[dict[str, Any]]:
    """The earlier 11,340-input grid (two models x every backend pair x nothing/HiSparse/dcp 2)."""
    flag, n = _flag(release), 0
    extras = {"none": [], "hisparse": ["--enable-hisparse", "--disable-radix-cache"], "dcp2": ["--dcp-size", "2"]}
    prefill = [None, "flashmla_sparse", "flashmla_kv", "flashmla_auto", "trtllm", "tilelang", "triton", "fa3",
               "flashinfer_sparse_mla"]
    decode = [None, "flashmla_kv", "trtllm", "tilelang", "triton", "fa3", "aiter"]
    for dev, model, kv, p, d, extra in itertools.product(DEVICES, MODELS, ["auto", "bfloat16", "fp8_e4m3"], prefill,
                                                         decode, extras):
        if extra == "dcp2" and _v(release) < (0, 5, 15):
            continue
        for pre in ((False, True) if dev.startswith("gfx") else (False,)):
            n += 1
            argv = ["--kv-cache-dtype", kv] + ([f"--{flag}-prefill-backend", p] if p else []) \
                + ([f"--{flag}-decode-backend", d] if d else []) + extras[extra]
            yield {"id": n, "device": dev, "preshuffle": pre, "model": model, "config": {}, "argv": argv, "env": {}}


def variant_grid(release: str) -> Iterator[dict[str, Any]]:
    """The earlier model-variant grid (sink, kpool, topk freq x serving options x threshold variables)."""
    flag, n = _flag(release), 100000
    models = {"ds32": {}, "ds32-sink": {"learnable_sink": True}, "ds32-kpool2": {"index_kpool": 2},
              "ds32-freq2": {"index_topk_freq": 2}}
    serving = {"none": [], "dcp2": ["--dcp-size", "2"], "tbo": ["--enable-two-batch-overlap"],
               "page16": ["--page-size", "16"]}
    envs: dict[str, dict[str, str]] = {"none": {}, "nsa-thr": {NSA_THR: "4096"}, "dsa-thr": {DSA_THR: "1024"}}
    for dev, model, kv, p, s, e in itertools.product(DEVICES, models, ["auto", "bfloat16", "fp8_e4m3"],
                                                     [None, "flashmla_sparse", "trtllm", "tilelang"], serving, envs):
        if s == "dcp2" and _v(release) < (0, 5, 15):
            continue
        n += 1
        argv = ["--kv-cache-dtype", kv] + ([f"--{flag}-prefill-backend", p] if p else []) + serving[s]
        yield {"id": n, "device": dev, "preshuffle": False, "model": "ds32", "config": models[model], "argv": argv,
               "env": envs[e]}


GRIDS = {"full": full_grid, "main": main_grid, "variants": variant_grid, "cp": cp_grid}
SAMPLE = {"n": 100_000, "seed": 21}  # --grid sample: --samples and --seed


def sample_grid(release: str) -> Iterator[dict[str, Any]]:
    """Seeded inputs from the whole domain of every input (sglang_release_sample.py), beside the fixed grids."""
    from sglang_release_sample import sample

    return sample(release, SAMPLE["n"], SAMPLE["seed"])


GRIDS["sample"] = sample_grid
SAMPLE_CATALOG = {"n": 10_000, "seed": 21}  # --grid sample-catalog: every catalog model, the GLM-5.x ones included


def sample_catalog_grid(release: str) -> Iterator[dict[str, Any]]:
    """Seeded inputs as `sample` draws them, with the model drawn from every catalog model (CATALOG_CONFIGS)."""
    from sglang_release_sample import sample

    return sample(release, SAMPLE_CATALOG["n"], SAMPLE_CATALOG["seed"], catalog_only=True)


GRIDS["sample-catalog"] = sample_catalog_grid
SAMPLED = ("sample", "sample-catalog")


# nsa-policy's side: nsa_policy.engines.sglang.replay (shared with the CI replay) -----------------------
from nsa_policy.engines.sglang.replay import agree, as_given, outside  # noqa: E402
from nsa_policy.engines.sglang.replay import answer as ours  # noqa: E402


# the oracle ---------------------------------------------------------------------------------------
def run_oracle(release: str, items: list[dict[str, Any]], jobs: int) -> dict[int, dict[str, Any]]:
    envs = json.loads((Path(os.environ.get("NSA_POLICY_SGLANG_ENVS", "/work/sgenv")) / "envs.json").read_text())
    if release not in envs:
        sys.exit(f"release {release!r}: no side environment (have {', '.join(envs)})")
    e = envs[release]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "SGL_", "PYTHON"))}
    env.update(PYTHONPATH=":".join(e["pythonpath"]), PYTHONNOUSERSITE="1")
    # --jobs processes, each with whole device groups (the oracle enters each emulated device once and
    # restores its environment before every input, so inputs do not leak into each other)
    shards: list[list[dict[str, Any]]] = [[] for _ in range(jobs)]
    keys = sorted({(i["device"], i["preshuffle"]) for i in items})
    owner = {k: j % jobs for j, k in enumerate(keys)}
    for i in items:
        shards[owner[(i["device"], i["preshuffle"])]].append(i)
    gate = threading.Semaphore(jobs)
    progress = Progress(f"sglang {release} oracle", len(items))
    answers: dict[int, dict[str, Any]] = {}
    errors: list[str] = []

    def work(shard: list[dict[str, Any]]) -> None:
        with gate:
            run_shard(shard)

    def run_shard(shard: list[dict[str, Any]]) -> None:
        proc = subprocess.Popen([e["python"], str(ORACLE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)
        feeder = threading.Thread(target=lambda: (proc.stdin.write("".join(json.dumps(i) + "\n" for i in shard)),
                                                  proc.stdin.close()))
        feeder.start()
        err_lines: list[str] = []
        drain = threading.Thread(target=lambda: err_lines.extend(proc.stderr))
        drain.start()
        for line in proc.stdout:
            r = json.loads(line)
            answers[r["id"]] = r
            progress.advance()
        proc.wait()
        feeder.join()
        drain.join()
        if proc.returncode:
            errors.append("".join(err_lines)[-2000:])

    threads = [threading.Thread(target=work, args=(s,)) for s in shards if s]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    progress.close()
    if errors or len(answers) != len(items):
        sys.exit(f"oracle answered {len(answers)} of {len(items)}: {' | '.join(errors)}")
    return answers


def _key(item: dict[str, Any]) -> str:
    """An input's identity for the cache: everything the oracle reads (not its id or profile label)."""
    import hashlib

    body = {k: v for k, v in item.items() if k not in ("id", "profile")}
    return hashlib.sha1(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _legacy_items(release: str, grid: str, digest: str) -> Optional[list[dict[str, Any]]]:
    """The inputs behind a whole-grid cache file of an earlier grid version (the full grid before xpu)."""
    import hashlib

    global DEVICE_VARIANTS
    saved = DEVICE_VARIANTS
    try:
        for variants in (saved, [v for v in saved if v[0] != "xpu"]):
            DEVICE_VARIANTS = variants
            items = list(GRIDS[grid](release))
            if hashlib.sha256(json.dumps(items, sort_keys=True).encode()).hexdigest()[:16] == digest:
                return items
    finally:
        DEVICE_VARIANTS = saved
    return None


def cached_oracle(release: str, grid: str, items: list[dict[str, Any]], jobs: int,
                  cache: str) -> tuple[dict[int, dict[str, Any]], float]:
    """The oracle's answers, per input from --cache where it already answered that exact input (a
    release's answers do not depend on nsa-policy, so bundle fixes are re-checked without re-running
    sglang, and a grown grid runs only its new inputs). The time returned is the oracle's own time
    summed over the inputs (its per-input ms), wherever they were run."""
    known: dict[str, dict[str, Any]] = {}
    root = Path(cache) if cache else None
    store = root / f"{release}-answers.jsonl" if root else None
    if root is not None and root.is_dir():
        for old in root.glob(f"{release}-{grid}-*.json"):  # whole-grid files of earlier runs
            data = json.loads(old.read_text())
            legacy = _legacy_items(release, grid, old.stem.rsplit("-", 1)[1])
            if legacy is not None:
                known.update({_key(it): data["answers"][str(it["id"])] for it in legacy})
        if store is not None and store.exists():
            for line in store.read_text().splitlines():
                rec = json.loads(line)
                known[rec["key"]] = rec["answer"]
    missing = [it for it in items if _key(it) not in known]
    if missing:
        fresh = run_oracle(release, missing, jobs)
        lines = []
        for it in missing:
            known[_key(it)] = fresh[it["id"]]
            lines.append(json.dumps({"key": _key(it), "answer": fresh[it["id"]]}))
        if store is not None:
            store.parent.mkdir(parents=True, exist_ok=True)
            with store.open("a") as f:
                f.write("\n".join(lines) + "\n")
    answers = {it["id"]: {**known[_key(it)], "id": it["id"]} for it in items}
    return answers, round(sum(a.get("ms", 0.0) for a in answers.values()) / 1000, 1)


# recording ----------------------------------------------------------------------------------------
def record(entry: dict[str, Any]) -> None:
    data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"runs": []}
    data["runs"] = [r for r in data["runs"] if (r["release"], r["grid"]) != (entry["release"], entry["grid"])]
    data["runs"].append(entry)
    data["runs"].sort(key=lambda r: (r["grid"], _v(r["release"])))
    RESULTS.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    write_table()


BEGIN, END = "<!-- agreement-table:begin (generated by --table) -->", "<!-- agreement-table:end -->"


def percent(agree: int, inside: int) -> str:
    """agree of inside as a percentage that reads 100.00 % only when nothing disagrees: 89,841 of 89,845 is
    99.995 %, shown with the digits it takes, never rounded up to 100."""
    if inside <= 0:
        return "n/a"
    if agree == inside:
        return "100.00 %"
    digits = 2
    while digits < 6 and float(f"{100 * agree / inside:.{digits}f}") >= 100:
        digits += 1
    factor = 10 ** digits
    return f"{math.floor(100 * agree * factor / inside) / factor:.{digits}f} %"


def write_table() -> None:
    data = json.loads(RESULTS.read_text())
    lines = [BEGIN, "", "| release | bundle | grid | inputs | agreement (of the inputs inside DSA) | disagreements | "
             "outside DSA | sglang refuses | sglang's own time (sum over inputs) | nsa-policy time | date |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in data["runs"]:
        inside = r["inputs"] - r.get("outside_dsa", 0)
        lines.append(f"| {r['release']} | `{r['bundle']}` | {r['grid']} | {r['inputs']:,} | "
                     f"{percent(r['agree'], inside)} ({r['agree']:,} of {inside:,}) | {inside - r['agree']:,} | "
                     f"{r.get('outside_dsa', 0):,} | "
                     f"{r['sglang_refuses']:,} | {r['oracle_s']:.0f} s | {r['ours_s']:.0f} s | "
                     f"{r['date'][:10]} |")
    lines += ["", END]
    replace_block(TABLE_DOC, lines, BEGIN, END)
    write_sample_table(data)


SBEGIN, SEND = "<!-- sample-table:begin (generated by --table) -->", "<!-- sample-table:end -->"


def write_sample_table(data: dict[str, Any]) -> None:
    """Per release, the sampled figure (--grid sample) beside the fixed grid's, and the disagreement classes."""
    runs = {(r["grid"], r["release"]): r for r in data["runs"]}
    rels = sorted({r["release"] for r in data["runs"] if r["grid"] == "sample"}, key=_v)

    def pct(r: Optional[dict[str, Any]]) -> str:
        if r is None:
            return "not run"
        inside = r["inputs"] - r.get("outside_dsa", 0)
        return f"{percent(r['agree'], inside)} of {inside:,}"

    lines = [SBEGIN, "", "| release | fixed grid (`full`) | sampled (`sample`, seed) | sampled inputs | outside DSA "
             "| disagreement classes | sglang's own time | date (sampled) | every catalog model (`sample-catalog`) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for rel in rels:
        s, c = runs[("sample", rel)], runs.get(("sample-catalog", rel))
        cat = "not run" if c is None else (f"{pct(c)} (seed {c.get('seed')}, {len(c.get('disagreement_classes', []))} "
                                           f"classes, {c['date'][:10]})")
        lines.append(f"| {rel} | {pct(runs.get(('full', rel)))} | {pct(s)} (seed {s.get('seed')}) | {s['inputs']:,} | "
                     f"{s.get('outside_dsa', 0):,} | {len(s.get('disagreement_classes', []))} | {s['oracle_s']:.0f} s | "
                     f"{s['date'][:10]} | {cat} |")
    lines += [""]
    for rel, grid in ((r, g) for r in rels for g in SAMPLED):
        classes = (runs.get((grid, rel)) or {}).get("disagreement_classes", [])
        if classes:
            lines.append(f"Known disagreements, {rel} `{grid}` (count × class; an example of each is in "
                         "sglang-releases.json):")
            lines.append("")
            lines += [f"- {c['count']} × {c['class'].replace('|', '/')}" for c in classes[:12]]
            if len(classes) > 12:
                lines.append(f"- … {len(classes) - 12} more classes, {sum(c['count'] for c in classes[12:])} inputs")
            lines.append("")
    lines += [SEND]
    replace_block(TABLE_DOC, lines, SBEGIN, SEND)


def replace_block(doc: Path, lines: list[str], begin: str, end: str, new_doc: str = "") -> None:
    """Put the generated lines (from `begin` to `end`) in place of the doc's block, or at its end."""
    text = doc.read_text() if doc.exists() else new_doc
    if begin in text:
        head, rest = text.split(begin, 1)
        text = head + "\n".join(lines) + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n"
    doc.write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--release")
    ap.add_argument("--grid", choices=sorted(GRIDS), default="full")
    ap.add_argument("--variants", action="store_true", help="same as --grid variants")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--sample", type=int, default=0, help="every K-th input only (a quick look)")
    ap.add_argument("--out", default="")
    ap.add_argument("--record", action="store_true")
    ap.add_argument("--write-replay", type=int, default=0, metavar="K",
                    help="record every K-th input with sglang's answer in tests/data/sglang/<X>/replay.jsonl")
    ap.add_argument("--cache", default="", help="folder for the oracle's answers: reused when the grid is the same")
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--samples", type=int, default=SAMPLE["n"], help="--grid sample: inputs per release")
    ap.add_argument("--seed", type=int, default=SAMPLE["seed"], help="--grid sample: the seed")
    a = ap.parse_args()
    SAMPLE.update(n=a.samples, seed=a.seed)
    if a.table:
        write_table()
        return
    if not a.release:
        ap.error("--release is required")
    grid = "variants" if a.variants else a.grid
    items = list(GRIDS[grid](a.release))
    if a.sample:
        items = items[:: a.sample]
    if a.limit:
        items = items[: a.limit]
    answers, t_oracle = cached_oracle(a.release, grid, items, max(1, a.jobs), a.cache)
    from sglang_release_sample import disagreement_class

    from nsa_policy.core.bundle import release_bundle
    from nsa_policy.engines.sglang.replay import FIELDS

    bad, n_agree, n_outside = [], 0, 0
    classes: dict[str, dict[str, Any]] = {}
    progress = Progress(f"nsa-policy sglang-{a.release}", len(items))
    t1 = time.time()
    for item in items:
        theirs, mine = answers[item["id"]], ours(a.release, item)
        if agree(mine, theirs, as_given(a.release, item)):
            n_agree += 1
        elif outside(mine, theirs, anywhere=grid in SAMPLED):
            n_outside += 1
        else:
            bad.append({"input": item, "sglang": theirs, "ours": mine})
            c = classes.setdefault(disagreement_class(mine, theirs, FIELDS), {"count": 0, "example": bad[-1]})
            c["count"] += 1
        progress.advance()
    progress.close()
    t_ours = time.time() - t1
    entry = {"release": a.release, "bundle": release_bundle(f"sglang-{a.release}"), "grid": grid,
             "inputs": len(items), "agree": n_agree, "outside_dsa": n_outside,
             "sglang_refuses": sum(not r["ok"] for r in answers.values()),
             "harness_errors": sum(r.get("stage") in ("input", "parse") and not r["ok"]
                                   and "argparse" not in (r.get("error") or {}).get("message", "")
                                   for r in answers.values()),
             "oracle_s": round(t_oracle, 1), "ours_s": round(t_ours, 1), "jobs": a.jobs,
             "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
             "machine": f"{platform.machine()} {os.cpu_count()} cpus, {platform.python_version()}, "
                        f"load {os.getloadavg()[0]:.1f}"}
    if grid in SAMPLED:
        entry["seed"] = (SAMPLE if grid == "sample" else SAMPLE_CATALOG)["seed"]
    entry["disagreement_classes"] = sorted(({"class": k, "count": v["count"],
                                             "example": {"input": v["example"]["input"],
                                                         "sglang": {k2: v["example"]["sglang"].get(k2) for k2 in REPLAY_KEYS},
                                                         "ours": v["example"]["ours"]}}
                                            for k, v in classes.items()), key=lambda c: -c["count"])
    print(json.dumps({k: v for k, v in entry.items() if k != "disagreement_classes"}))
    for c in entry["disagreement_classes"]:
        print(f"  {c['count']:6d} x {c['class']}")
    if a.out:
        Path(a.out).write_text("".join(json.dumps(b) + "\n" for b in bad))
    if a.record and not (a.sample or a.limit):
        record(entry)
    if a.write_replay:
        write_replay(a.release, grid, items, answers, a.write_replay)


REPLAY_KEYS = ("ok", "kv_cache_dtype", "prefill_backend", "decode_backend", "page_size", "attention_backend",
               "threshold", "error", "stage")


def write_replay(release: str, grid: str, items: list[dict[str, Any]], answers: dict[int, dict[str, Any]],
                 every: int) -> None:
    """A deterministic sample for CI: the input and sglang's answer (no timings), one JSON line each."""
    out = REPO / "tests" / "data" / "sglang" / release / (f"{grid}.jsonl" if grid in SAMPLED else "replay.jsonl")
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for item in items[::every]:
        a = answers[item["id"]]
        theirs = {k: a.get(k) for k in REPLAY_KEYS}
        if theirs["error"]:
            theirs["error"] = {"type": a["error"]["type"], "message": a["error"]["message"][:200]}
        lines.append(json.dumps({"release": release, "grid": grid, "input": item, "sglang": theirs}, sort_keys=True))
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
