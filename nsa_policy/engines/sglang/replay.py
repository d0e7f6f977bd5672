"""What a compatibility bundle answers for a command, in the shape sglang's own start-up code answers.

The differential harness (benchmarks/sglang_release_agreement.py) asks sglang==X's real pipeline and
this module the same question; the CI replay (tests/check/test_sglang_replay.py) compares this module
with sglang's committed answers (tests/data/sglang/<X>/replay.jsonl) without sglang installed.

An input is one line of scripts/sglang_oracle/policy_oracle.py's format: the device class (sm90,
gfx942, …), whether aiter's preshuffle path is usable, a base model config and overrides, the server
argv and the environment. nsa-policy reads the argv the way release X's parser does: a flag X does
not have, or a value outside X's choices, is refused as argparse refuses it; then `--policy sglang-X`
(the newest bundle at or below X) decides.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

from nsa_policy.engines.sglang.config import KV_ALIASES

# oracle device class → catalog device
DEVICES = {"sm80": "a100", "sm90": "h200", "sm100": "b200", "sm103": "b300", "sm120": "rtx-pro-6000",
           "sm121": "gb10", "gfx942": "mi300x", "gfx950": "mi355x", "xpu": "max-1550"}
# what nsa-policy reads of the oracle's base configs (policy_oracle.BASES)
MODEL_FACTS: dict[str, dict[str, Any]] = {
    "ds32": {"architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32", "index_topk": 2048,
             "index_head_dim": 128, "num_attention_heads": 128},
    "ds3": {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "num_attention_heads": 128},
    "glm5": {"architectures": ["GlmMoeDsaForCausalLM"], "model_type": "glm_moe_dsa", "index_topk": 2048,
             "num_attention_heads": 64},
    "qwen3moe": {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "num_attention_heads": 64},
    "glm5next": {"architectures": ["Glm5NextForConditionalGeneration"], "model_type": "glm5_next", "index_topk": 2048,
                 "index_head_dim": 128, "index_kpool": 4, "num_attention_heads": 64, "qk_rope_head_dim": 0},
}
CATALOG_MODELS = {"ds32": "deepseek-ai/DeepSeek-V3.2", "glm5": "zai-org/GLM-5"}
# the memory the oracle emulates for a device class it is given without a named device (policy_oracle.DEVICES),
# where the catalog device above has none: sglang's chunked-prefill default reads it
ORACLE_MEMORY_GB = {"sm86": 48.0, "sm89": 48.0, "sm110": 128.0, "gfx1250": 288.0}
FIELDS = ("kv_cache_dtype", "prefill_backend", "decode_backend", "page_size", "attention_backend", "threshold")
# sglang refusals that come from its dense (non-DSA) attention-backend code, for a model the release does
# not run as DSA: no DSA policy decides these; they are counted apart ("outside"), never as agreement.
OUTSIDE_DSA = ("TensorRT-LLM MLA backend only supports kv-cache-dtype",)
LAUNCH_REFUSALS = ("NSA309",)  # warnings that say sglang refuses the configuration at launch
# sglang's alias (config.KV_ALIASES); "auto" = left to the engine (nothing decided)
_KV_SAME = {**{k: v for k, v in KV_ALIASES.items() if k != v}, "auto": None}


def answer(release: str, item: Mapping[str, Any]) -> dict[str, Any]:
    """nsa-policy's answer for the input, read with release X's spellings and choices."""
    from nsa_policy.api import build_facts, decide
    from nsa_policy.base.errors import NsaPolicyError
    from nsa_policy.catalog.store import load_catalog
    from nsa_policy.engines.sglang.args import load_args
    from nsa_policy.engines.sglang.launch import ParsedCommand, launch_namespace, parse_command
    from nsa_policy.engines.sglang.startup import ArgsView

    refused: dict[str, Any] = {"ok": False, "applies": None, **{f: None for f in FIELDS}}
    reg = load_args()
    try:
        # no flags at all is a launch too (the oracle adds only --model-path)
        parsed = parse_command(list(item["argv"])) if item["argv"] else ParsedCommand(argv=(), occurrences=(), values={})
    except NsaPolicyError as exc:
        return {**refused, "codes": [f"input: {exc}"]}
    for o in parsed.occurrences:  # argparse: a flag the release does not have, a value it does not list
        if not reg.accepts(o.flag, release):
            return {**refused, "codes": [f"argparse: {o.flag} not in sglang {release}"]}
        valid = reg.listed(o.flag, release)  # a spelling's own list where it has one (--prefill-cp-mode)
        aliases = {a.value: a.canonical for a in reg.argument(o.arg).choice_aliases}
        if valid is not None and o.value not in valid and aliases.get(o.value) not in valid:
            return {**refused, "codes": [f"argparse: {o.flag} {o.value} not a choice of sglang {release}"]}
    config = ArgsView(launch_namespace(parsed.values, release)).serving_config()
    env = dict(item.get("env") or {})
    packages: dict[str, str] = {}
    if item.get("preshuffle"):  # aiter's preshuffle path is usable: aiter on, triton >= 3.5
        env["SGLANG_USE_AITER"] = "1"
        packages["triton"] = "3.6.0"
    model: Any
    if item.get("catalog_model"):  # a sampled input: the oracle's config is that catalog model's config.json
        model = item["catalog_model"]
    elif item["model"] in CATALOG_MODELS and not item.get("config"):
        model = CATALOG_MODELS[item["model"]]
    else:
        model = {**MODEL_FACTS[item["model"]], **(item.get("config") or {})}
    try:
        name = item.get("named_device") or DEVICES.get(item["device"], item["device"])  # a named device, else the class's
        device: Any = load_catalog().device(name)
        memory = item.get("memory_gb") or ORACLE_MEMORY_GB.get(item["device"])
        if device.memory_gb is None and memory:  # the memory the oracle's probes reported
            device = device.model_copy(update={"memory_gb": float(memory)})
        facts = build_facts(config, device=device, model=model, env=env, packages=packages)
        d = decide(facts, f"sglang-{release}", trace=False)
    except NsaPolicyError as exc:
        return {**refused, "codes": [f"input: {exc}"]}
    # NSA309: sglang-0.5.10 resolves these arguments, then check_server_args refuses them at launch (the
    # contract models that as a warning on an accepted decision); the real pipeline refuses, so compare so.
    refused_at_launch = any(f.code in LAUNCH_REFUSALS for f in d.warnings)
    return {"ok": not d.errors and not refused_at_launch, "applies": d.applies, "kv_cache_dtype": d.kv_cache_dtype,
            "prefill_backend": d.prefill_backend, "decode_backend": d.decode_backend, "page_size": d.page_size,
            "attention_backend": d.attention_backend, "threshold": d.dense_attn_kv_len_threshold,
            "codes": [f.code for f in d.errors]}


def outside(mine: Mapping[str, Any], theirs: Mapping[str, Any], anywhere: bool = False) -> bool:
    """sglang refused, for a reason in its dense-model code, a model it does not run as DSA. The fixed grid
    counts only OUTSIDE_DSA's messages so; the sampled inputs (`anywhere`), which draw every parallel shape,
    speculative setting and attention backend for non-DSA models too, count every such refusal so: the DSA
    policy answers "does not apply" there and judges nothing else."""
    msg = (theirs.get("error") or {}).get("message", "")
    return bool(mine.get("applies") is False and mine["ok"] and not theirs["ok"]
                and (anywhere or msg.startswith(OUTSIDE_DSA)))


def as_given(release: str, item: Mapping[str, Any]) -> dict[str, Any]:
    """What sglang reports for an output it leaves alone: the KV dtype as the argv gives it, the threshold
    variable the release reads as the environment gives it."""
    from nsa_policy.engines.sglang.args import load_args

    argv = list(item["argv"])
    kv = argv[argv.index("--kv-cache-dtype") + 1] if "--kv-cache-dtype" in argv else "auto"
    reg = load_args()
    var = reg.env_var_read("dense_attn_kv_len_threshold", release)
    raw = (item.get("env") or {}).get(var) if var else None
    forced = argv[argv.index("--attention-backend") + 1] if "--attention-backend" in argv else None
    return {"kv_cache_dtype": kv, "threshold": int(raw) if raw is not None else None, "attention_backend": forced,
            # what the DSA backend reads when start-up declares no threshold: the variable, else its release default
            "threshold_read": int(raw) if raw is not None else reg.env_default("dense_attn_kv_len_threshold", release)}


def agree(mine: Mapping[str, Any], theirs: Mapping[str, Any], given: Optional[Mapping[str, Any]] = None) -> bool:
    """Same refusal; where both accept a model the release runs as DSA, the same DSA outputs. Where the
    release does not run its DSA start-up code for the architecture (nsa-policy: the decision does not
    apply), sglang's attention backend must not be its DSA one; its other values are its dense-model
    defaults, which no DSA policy decides."""
    if mine["ok"] != theirs["ok"]:
        return False
    if not mine["ok"]:
        return True
    forced = given.get("attention_backend") if given is not None else None
    if mine.get("applies") is False:
        # sglang keeps a forced --attention-backend as given, also dsa/nsa for a model it does not run as DSA
        return theirs["attention_backend"] not in ("nsa", "dsa") or theirs["attention_backend"] == forced
    for f in FIELDS:
        if mine[f] is None and given is not None and f in given and theirs[f] == given[f]:
            continue  # not decided by either: sglang leaves the value as given
        if (f == "threshold" and theirs[f] is None and given is not None
                and given.get("threshold_read") is not None and mine[f] == given["threshold_read"]):
            continue  # start-up declares none; the decision gives what the backend reads (issue 21, effective values)
        if f == "attention_backend" and forced == "nsa" and theirs[f] == "nsa" and mine[f] == "dsa":
            continue  # the deprecated spelling as given; the release's registry builds the dsa backend for it
        if (_KV_SAME.get(theirs[f], theirs[f]) if f == "kv_cache_dtype" else theirs[f]) != mine[f]:
            return False
    return True


# The KV-pool row width of a layout: what sglang's calculate_mla_kv_cache_dim returns for it.
LAYOUT_WIDTH = {"bf16-576": 576, "fp8-576-per-tensor": 576, "fp8-656-blockwise": 656}


def layout_width(release: str, item: Mapping[str, Any]) -> Optional[int]:
    """The row width of `--policy sglang-X`'s kv_cache_layout for DeepSeek-V3.2 with the item's backends and
    KV dtype on an MI300X (hip) or an H200 (None: the decision sets no layout). benchmarks/sglang_kv_layout.py
    compares it with the release's own calculate_mla_kv_cache_dim; tests/check replays the recorded answers."""
    from nsa_policy.api import build_facts, decide

    facts = build_facts({"kv_cache_dtype": item["kv"], "prefill_backend": item["prefill"],
                         "decode_backend": item["decode"]}, device="mi300x" if item["hip"] else "h200",
                        model="deepseek-ai/DeepSeek-V3.2", env={}, packages={})
    layout = decide(facts, f"sglang-{release}", trace=False).kv_cache_layout
    return LAYOUT_WIDTH.get(layout) if layout else None
