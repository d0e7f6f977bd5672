"""Seeded inputs drawn from the whole domain of every start-up input, for one sglang release (issue 21, item 3).

Beside the fixed grid (sglang_release_agreement.py `full_grid`), `sample(release, n, seed)` draws n inputs in
policy_oracle.py's format. Each input value is drawn independently from its whole domain:

- devices: every catalog device class except cpu and every named device of each (its product string and
  memory reach sglang's probes), ROCm with and without aiter's preshuffle path;
- models: the catalog models (their config.json as published: architecture, heads, indexer, fp8 weights; `sample`
  draws the ten of SAMPLE_MODELS, `sample(..., catalog_only=True)` only catalog models, all of them), every
  DSA architecture of any release plus two that are not DSA, with learnable sinks, index_kpool 2,
  index_topk_freq 2, other head counts and top-k values;
- backends: every name the release's own parser lists for the prefill, decode and attention backends
  (benchmarks/results/sglang-parsers/<X>.json, dumped from the release), and now and then a name only
  another release lists, which this one must refuse;
- KV dtypes and page sizes, thresholds (both variables, and the flag where the release has one);
- parallel shapes, invalid ones included: tp, dp, DP attention, attention DP, decode CP, attention CP and
  every prefill-CP spelling;
- speculative decoding, HiSparse, two-batch overlap, PD disaggregation, mixed chunk, deterministic inference,
  the DSA cache layer split, the union, paged-MQA-logits and top-k backends.

A flag the release does not have is kept only now and then (argparse refuses it; the sample should not
be mostly that). The draw depends only on (seed, release, n).
"""
from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any, Iterator, Optional

REPO = Path(__file__).resolve().parent.parent
PARSERS = REPO / "benchmarks" / "results" / "sglang-parsers"

THRESHOLD_VARS = ("SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD", "SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD")
_INDEXER = {"index_topk": 2048, "index_head_dim": 128, "index_n_heads": 64}
# every DSA architecture of any release, one gated non-DSA one, and plain DeepSeek-V3 (not DSA)
ARCHS = ["DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV3ForCausalLMNextN", "MistralLarge3ForCausalLM",
         "PixtralForConditionalGeneration", "GlmMoeDsaForCausalLM", "GlmMoeDsaForCausalLMNextN",
         "Glm5NextForConditionalGeneration", "Glm5NextForConditionalGenerationNextN", "LongcatFlashForCausalLM",
         "LongcatFlashForCausalLMNextN", "Dots3NoteForCausalLM", "Dots3NoteForCausalLMNextN", "HYV4ForCausalLM",
         "HYV4ForCausalLMNextN", "KimiK25ForConditionalGeneration", "non-dsa"]
_FP8 = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
# catalog model -> (oracle base, config overrides): the published config.json's keys the start-up code reads
CATALOG_CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "deepseek-ai/DeepSeek-V3.2": ("ds32", {}),
    "deepseek-ai/DeepSeek-V3.2-Exp": ("ds32", {}),
    "deepseek-ai/DeepSeek-V3.2-Speciale": ("ds32", {}),
    "zai-org/GLM-5": ("glm5", {}),
    "zai-org/GLM-5-FP8": ("glm5", {"quantization_config": _FP8}),
    "zai-org/GLM-5.1": ("glm5", {}),
    "zai-org/GLM-5.1-FP8": ("glm5", {"quantization_config": _FP8}),
    "deepseek-ai/DeepSeek-V3": ("ds3", {"quantization_config": _FP8}),
    "deepseek-ai/DeepSeek-V3-0324": ("ds3", {"quantization_config": _FP8}),
    "Qwen/Qwen3-235B-A22B": ("qwen3moe", {}),
    "zai-org/GLM-5.2": ("glm5", {"index_topk_freq": 4}),
    "zai-org/GLM-5.3": ("glm5", {"index_topk_freq": 4}),
    "zai-org/GLM-5.3-Flash": ("glm5next", {}),
}
# the catalog models `sample` draws: the ten the recorded 100,000-input runs (2026-12-03/04, seed 21) drew, kept so
# that those runs replay; `sample-catalog` draws every catalog model (CATALOG_CONFIGS covers the catalog: a test)
SAMPLE_MODELS = ("deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-V3-0324", "deepseek-ai/DeepSeek-V3.2",
                 "deepseek-ai/DeepSeek-V3.2-Exp", "deepseek-ai/DeepSeek-V3.2-Speciale", "Qwen/Qwen3-235B-A22B",
                 "zai-org/GLM-5", "zai-org/GLM-5-FP8", "zai-org/GLM-5.1", "zai-org/GLM-5.1-FP8")
# model-config variants (oracle config overrides), drawn for architecture inputs
CONFIG_VARIANTS: list[dict[str, Any]] = [
    {}, {}, {}, {}, {"learnable_sink": True}, {"index_kpool": 2}, {"index_topk_freq": 2},
    {"num_attention_heads": 64, "num_key_value_heads": 64}, {"num_attention_heads": 32, "num_key_value_heads": 32},
    {"num_attention_heads": 16, "num_key_value_heads": 16}, {"index_topk": 1024}, {"index_topk": 512},
]
TP = [None, None, 1, 2, 3, 4, 6, 8, 8, 16, 32]
DP = [1, 2, 3, 4, 8, 16]
SMALL = [1, 2, 3, 4, 8]
PAGES = [1, 16, 32, 64, 128, 256]
THRESHOLDS = ["0", "512", "1024", "2048", "4096", "65536"]
SPEC_ALGOS = ["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"]
MAMBA_TRACK_INTERVALS = [64, 100, 128, 256, 512, 1024, 2048]


def _v(release: str) -> tuple[int, ...]:
    return tuple(int(x) for x in release.split(".")[:3])


def parser_actions(release: str) -> dict[str, dict[str, Any]]:
    """The release's own parser actions (dumped from its wheel by dump_parser.py), by option string."""
    data = json.loads((PARSERS / f"{release}.json").read_text())
    return {opt: a for a in data["actions"] for opt in a["option_strings"]}


def _all_names(dest_suffix: str) -> list[str]:
    """Every prefill/decode backend name any dumped release lists (one release refuses another's new ones)."""
    names: set[str] = set()
    for f in PARSERS.glob("*.json"):
        for a in json.loads(f.read_text())["actions"]:
            if re.fullmatch(rf"(nsa|dsa)_{dest_suffix}_backend", a["dest"]) and a["choices"]:
                names.update(a["choices"])
    return sorted(names)


def devices() -> list[tuple[str, Optional[str], Optional[str], Optional[int]]]:
    """(oracle device class, catalog device or None, product, memory GB): every non-cpu class, class-only and
    as each of its named devices."""
    from nsa_policy.catalog.store import load_catalog

    cat = load_catalog()
    out: list[tuple[str, Optional[str], Optional[str], Optional[int]]] = []
    for cls in cat.device_classes:
        if cls == "cpu":
            continue
        out.append((cls, None, None, None))
        for name in sorted(cat.device_names):
            dev = cat.device(name)
            if dev.device_class == cls:
                out.append((cls, name, dev.product_name, dev.memory_gb))
    return out


def _model(rng: random.Random, models: tuple[str, ...], catalog_only: bool) -> tuple[str, dict[str, Any], Optional[str]]:
    """(oracle base, config overrides, catalog model id or None)."""
    if catalog_only or rng.random() < 0.5:
        mid = rng.choice(sorted(models))
        base, cfg = CATALOG_CONFIGS[mid]
        return base, dict(cfg), mid
    arch = rng.choice(ARCHS)
    extra = dict(rng.choice(CONFIG_VARIANTS))
    if arch == "non-dsa":
        return "ds3", extra, None
    if arch == "DeepseekV32ForCausalLM":
        return "ds32", extra, None
    return "ds3", {"architectures": [arch], **_INDEXER, **extra}, None


class Sampler:
    """The domain of one release; `draw(rng)` is one input (without id)."""

    def __init__(self, release: str, catalog_only: bool = False):
        self.release = release
        self.catalog_only = catalog_only
        self.models = tuple(CATALOG_CONFIGS) if catalog_only else SAMPLE_MODELS
        self.actions = parser_actions(release)
        self.devices = devices()
        self.flag = "dsa" if "--dsa-prefill-backend" in self.actions else "nsa"
        self.prefill = self._choices(f"--{self.flag}-prefill-backend")
        self.decode = self._choices(f"--{self.flag}-decode-backend")
        self.others_prefill = [b for b in _all_names("prefill") if b not in self.prefill]
        self.others_decode = [b for b in _all_names("decode") if b not in self.decode]
        self.kv = self._choices("--kv-cache-dtype")
        self.attention = self._choices("--attention-backend")

    def _choices(self, flag: str) -> list[Any]:
        a = self.actions.get(flag)
        return list(a["choices"] or []) if a else []

    def has(self, flag: str) -> bool:
        return flag in self.actions

    def _backend(self, rng: random.Random, own: list[str], others: list[str]) -> Optional[str]:
        r = rng.random()
        if r < 0.3 or not own:
            return None
        if r < 0.93 or not others:
            return rng.choice(own)
        return rng.choice(others)

    def draw(self, rng: random.Random) -> dict[str, Any]:
        argv: list[str] = []
        env: dict[str, str] = {}
        tags: list[str] = []

        def add(flag: str, *value: Any, p: float = 1.0) -> None:
            """Append the flag when drawn; one the release lacks is kept 1 time in 10 (argparse refuses it)."""
            if rng.random() >= p:
                return
            if not self.has(flag) and rng.random() >= 0.1:
                return
            argv.extend([flag, *(str(v) for v in value)])
            tags.append(flag.lstrip("-"))

        cls, named, product, mem = rng.choice(self.devices)
        base, config, catalog_model = _model(rng, self.models, self.catalog_only)
        if rng.random() < 0.85:
            add("--kv-cache-dtype", rng.choice(self.kv or ["auto"]))
        p = self._backend(rng, self.prefill, self.others_prefill)
        d = self._backend(rng, self.decode, self.others_decode)
        if p:
            argv.extend([f"--{self.flag}-prefill-backend", p])
        if d:
            argv.extend([f"--{self.flag}-decode-backend", d])
        if rng.random() < 0.12 and self.attention:
            own = [b for b in ("dsa", "nsa") if b in self.attention]
            add("--attention-backend", rng.choice(own if own and rng.random() < 0.6 else self.attention))
        # parallel shapes, invalid ones included
        tp = rng.choice(TP)
        if tp is not None:
            add("--tp-size", tp)
        add("--dp-size", rng.choice(DP), p=0.3)
        add("--enable-dp-attention", p=0.25)
        add("--attn-dp-size", rng.choice(DP), p=0.08)
        add("--dcp-size", rng.choice(SMALL), p=0.15)
        add("--attn-cp-size", rng.choice(SMALL), p=0.08)
        r = rng.random()
        if r < 0.06:
            add("--enable-prefill-cp")
            add("--cp-strategy", rng.choice(["zigzag", "interleave"]), p=0.6)
        elif r < 0.12:
            add(f"--enable-{self.flag}-prefill-context-parallel")
            add(f"--{self.flag}-prefill-cp-mode", rng.choice(["in-seq-split", "round-robin-split"]), p=0.5)
        elif r < 0.15:
            add("--enable-prefill-context-parallel")
            add("--prefill-cp-mode", rng.choice(["in-seq-split", "round-robin-split"]), p=0.5)
        add("--page-size", rng.choice(PAGES), p=0.25)
        # the threshold: either variable, both, or the flag
        r = rng.random()
        if r < 0.08:
            env[THRESHOLD_VARS[0]] = rng.choice(THRESHOLDS)
        elif r < 0.16:
            env[THRESHOLD_VARS[1]] = rng.choice(THRESHOLDS)
        elif r < 0.2:
            env.update({v: rng.choice(THRESHOLDS) for v in THRESHOLD_VARS})
        for flag in ("--dense-attn-kv-len-threshold", "--dsa-prefill-dense-attn-kv-len-threshold",
                     "--nsa-prefill-dense-attn-kv-len-threshold"):
            add(flag, rng.choice(THRESHOLDS), p=0.02)
        # speculative decoding
        if rng.random() < 0.12:
            add("--speculative-algorithm", rng.choice(SPEC_ALGOS))
            add("--speculative-num-steps", rng.choice([1, 2, 3]), p=0.6)
            add("--speculative-eagle-topk", rng.choice([1, 2, 4]), p=0.5)
            add("--speculative-num-draft-tokens", rng.choice([2, 4, 8]), p=0.5)
        # serving switches
        if rng.random() < 0.1:
            add("--enable-hisparse")
            add("--disable-radix-cache", p=0.7)
        add("--enable-two-batch-overlap", p=0.07)
        add("--disaggregation-mode", rng.choice(["prefill", "decode"]), p=0.08)
        add("--enable-hierarchical-cache", p=0.04)
        add("--enable-dsa-cache-layer-split", p=0.04)
        add("--enable-mixed-chunk", p=0.06)
        add("--enable-deterministic-inference", p=0.04)
        add("--quantization", "fp8", p=0.05)
        for flag in ("--dsa-triton-union", "--dsa-paged-mqa-logits-backend", "--dsa-topk-backend"):
            ch = self._choices(flag)
            if ch:
                add(flag, rng.choice(ch), p=0.05)
        if self.catalog_only:  # drawn last, so that the plain draw (and its recorded runs) stays as it was
            # a linear-attention hybrid's Mamba track interval: the page size must divide it (0.5.20+)
            add("--mamba-track-interval", rng.choice(MAMBA_TRACK_INTERVALS), p=0.1)
            if "--speculative-num-draft-tokens" not in argv:  # more draft tokens than the default interval
                add("--speculative-num-draft-tokens", rng.choice([300, 512]), p=0.02)
        item: dict[str, Any] = {"device": cls, "preshuffle": cls.startswith("gfx") and rng.random() < 0.5,
                                "model": base, "config": config, "argv": argv, "env": env,
                                "profile": "sample:" + ",".join(tags)}
        if named:
            item.update(named_device=named, product=product, memory_gb=mem)
        if catalog_model:
            item["catalog_model"] = catalog_model
        return item


def sample(release: str, n: int, seed: int, catalog_only: bool = False) -> Iterator[dict[str, Any]]:
    """n seeded inputs for `release` (ids 1_000_001 ...: apart from the fixed grid's). catalog_only: every input's
    model is a catalog model, drawn from all of them (ids 2_000_001 ..., a seed of its own)."""
    s = Sampler(release, catalog_only)
    rng = random.Random(f"{seed}:{release}" + (":catalog" if catalog_only else ""))
    first = 2_000_001 if catalog_only else 1_000_001
    for i in range(n):
        yield {"id": first + i, **s.draw(rng)}


def disagreement_class(mine: dict[str, Any], theirs: dict[str, Any], fields: tuple[str, ...]) -> str:
    """A short key that groups disagreements of one cause: who refused (sglang's message, digits and paths
    folded; our codes), or which outputs differ."""
    def fold(text: str) -> str:
        text = re.sub(r"/tmp/\S+", "<path>", text)
        return re.sub(r"\d+", "N", text)[:110]

    if theirs["ok"] and not mine["ok"]:
        return f"sglang accepts, nsa-policy refuses: {' '.join(mine.get('codes') or [])[:110]}"
    if mine["ok"] and not theirs["ok"]:
        err = theirs.get("error") or {}
        return f"sglang refuses ({err.get('type')} in {theirs.get('stage')}: {fold(err.get('message', ''))}), nsa-policy accepts"
    diff = [f for f in fields if mine.get(f) != theirs.get(f)]
    return "both accept, differ in " + ",".join(diff) + (
        f" (sglang {[theirs.get(f) for f in diff]} vs ours {[mine.get(f) for f in diff]})" if len(diff) == 1 else "")
