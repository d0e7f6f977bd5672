"""sglang's namespace facts (the `sglang.*` family), one release at a time.

- `sglang.<release>.lists_<phase>_backend`: does that release list the configured backend among its
  --nsa/--dsa-<phase>-backend choices (catalog backends.yaml `sglang_choice`); None when unset or unknown.
- `sglang.<release>.{refused,deprecated}_spellings`: the flags among input.spellings that release's
  parser refuses (with what to use instead) or accepts as deprecated aliases (its own warning text),
  as one line from the argument registry (rules/catalog/sglang/args.yaml); None when there are none.
Values the targeted release (input.release; unset: the newest release) resolves, None where its rule is
not modelled:
- `sglang.chunked_prefill_size`: the per-rank chunked-prefill size (0.5.10+): the flag, else the GPU-memory
  default of the release (None when the device's memory is unknown), divided by the attention-DP width;
  `sglang.chunked_prefill_page_remainder`: that size modulo the decided page size (check_server_args asserts
  0), None where sglang does not check it;
- `sglang.attention_dp_width`: the attention-DP width (0.5.22+: attn_dp_enabled_of, > 1 is attention DP);
  `sglang.attn_cp_size`: the attention-CP width (0.5.22+: DSA prefill CP sets its own);
- `sglang.family_overrides`: the architecture gets the DeepSeek family overrides (their prefill-CP block);
- `sglang.dsa_device_block`: the release runs the device part of its DSA block here (prefill CP's DP attention,
  attention-CP width and MoE all-to-all backend): CUDA and ROCm, and Intel XPU up to 0.5.11 (0.5.10-0.5.11:
  `if not is_npu()`; 0.5.12+: `if not is_npu() and not is_xpu()`).
- `sglang.mamba_radix_cache_strategy`: the hybrid-Mamba radix-cache strategy the release validates for a DSA model
  with linear-attention layers (0.5.20+, arg_groups/overrides.py _mamba_radix_cache_resolution under the default
  `auto`): extra_buffer, or no_buffer on Intel XPU (no extra-buffer support there); None where the model has no
  Mamba radix cache or the radix cache is off (--disable-radix-cache, a PD decode server);
  `sglang.mamba_track_interval`: --mamba-track-interval, else the release default 256;
  `sglang.mamba_track_page_remainder`: that interval modulo the page size decided so far (the extra_buffer check of
  mamba_hook.validate_mamba_extra_buffer asserts 0); `sglang.mamba_track_short_of_drafts`: the interval is below
  --speculative-num-draft-tokens (the same check asserts it is not).
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Optional

_RELEASE = r"(\d+(?:\.[0-9A-Za-z]+)*)"
LISTS = re.compile(rf"^{_RELEASE}\.lists_(prefill|decode)_backend$")
SPELLINGS = re.compile(rf"^{_RELEASE}\.(refused|deprecated)_spellings$")
# resolved values of the release targeted (input.release; unset: the newest release's rules)
RESOLVED = ("chunked_prefill_size", "chunked_prefill_page_remainder", "attention_dp_width", "attn_cp_size",
            "family_overrides", "dsa_device_block", "mamba_radix_cache_strategy", "mamba_track_interval",
            "mamba_track_page_remainder", "mamba_track_short_of_drafts")
PATHS = ("sglang.<release>.lists_{prefill,decode}_backend", "sglang.<release>.{refused,deprecated}_spellings",
         *(f"sglang.{name}" for name in RESOLVED))
# arg_groups/memory_hook.py handle_gpu_memory_settings (0.5.20-0.5.23): (below MiB, chunked_prefill_size)
_CHUNK_BY_MEMORY = ((20 * 1024, 2048), (35 * 1024, 4096), (60 * 1024, 4096), (90 * 1024, 8192), (160 * 1024, 8192))
# 0.5.10-0.5.19 (server_args.py _handle_gpu_memory_settings, 0.5.19 memory_hook.py): 2048 below 35 GiB
_CHUNK_BY_MEMORY_BEFORE_0_5_20 = ((35 * 1024, 2048),) + _CHUNK_BY_MEMORY[2:]
_CHUNK_LARGEST = 16384
# _deepseek_family_overrides' registered architectures (arg_groups/model_overrides/deepseek_v2.py, 0.5.20-0.5.23):
# their DSA prefill CP runs --dp-size as attention DP; MLA prefill CP of the non-DSA ones sets deepep
FAMILY_OVERRIDES = frozenset({"DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "KimiK25ForConditionalGeneration",
                              "MistralLarge3ForCausalLM", "PixtralForConditionalGeneration", "GlmMoeDsaForCausalLM",
                              "Glm5NextForConditionalGeneration", "HYV4ForCausalLM", "HYV4ForCausalLMNextN",
                              "LongcatFlashForCausalLM", "LongcatFlashForCausalLMNextN", "Dots3NoteForCausalLM"})
# the DSA architectures of _MAMBA_RADIX_CACHE_ARCHS (arg_groups/overrides.py, 0.5.20-0.5.23): linear-attention
# hybrids whose radix cache also snapshots Mamba state; the draft (NextN) class is not listed
MAMBA_RADIX_CACHE = frozenset({"Glm5NextForConditionalGeneration"})
MAMBA_RADIX_CACHE_FIRST = "0.5.20"
MAMBA_TRACK_INTERVAL_DEFAULT = 256  # arg_groups/fields/exec_.py mamba_track_interval (server_args.py before 0.5.20)


@lru_cache(maxsize=1024)
def _parse(what: str) -> Optional[tuple[str, str, str]]:
    """(kind, release, phase or refused/deprecated), parsed once per path."""
    m = LISTS.match(what)
    if m:
        return "lists", m.group(1), m.group(2)
    m = SPELLINGS.match(what)
    if m:
        return "spellings", m.group(1), m.group(2)
    return ("resolved", "", what) if what in RESOLVED else None


def known(what: str) -> bool:
    return _parse(what) is not None


def sglang_fact(ns: Any, what: str) -> Any:
    parsed = _parse(what)
    if parsed is None:
        raise KeyError(f"sglang.{what}")
    kind, release, which = parsed
    if kind == "resolved":
        if which == "family_overrides":
            return ns["model.architecture"] in FAMILY_OVERRIDES
        if which == "dsa_device_block":
            return dsa_device_block(ns)
        if which.startswith("mamba_"):
            return _mamba(ns, which)
        return _resolved(ns, which)
    if kind == "lists":
        backend = ns[f"config.{which}_backend"]
        if backend is None or backend not in ns.catalog.backends:
            return None
        return ns.catalog.sglang_lists(backend, which, release)
    spellings = ns["input.spellings"]
    if not spellings:
        return None
    from nsa_policy.engines.sglang.args import load_args  # lazy: only inputs with sglang spellings need it

    reg = load_args()
    return reg.refused_text(spellings, release) if which == "refused" else reg.deprecated_text(spellings, release)


def _whole_chunk(ns: Any) -> Optional[int]:
    """--chunked-prefill-size, else handle_gpu_memory_settings' default for the device's memory."""
    size: Optional[int] = ns["config.chunked_prefill_size"]
    if size is None:
        memory = ns["device.memory_gb"]
        if memory is None:
            return None  # sglang reads the GPU's own memory; the policy does not know it
        mib = memory * 1024
        table = _CHUNK_BY_MEMORY if _release_at_least(ns, "0.5.20") else _CHUNK_BY_MEMORY_BEFORE_0_5_20
        size = next((chunk for below, chunk in table if mib < below), _CHUNK_LARGEST)
    return size


def dsa_device_block(ns: Any) -> bool:
    vendor = ns["device.vendor"]
    return vendor in ("nvidia", "amd") or (vendor == "intel" and not _release_at_least(ns, "0.5.12"))


def _mamba(ns: Any, which: str) -> Any:
    """handle_mamba_radix_cache's view: it runs in the model hook after the DSA overrides declare the page size
    and before a forced attention backend resizes it, so the page is the one decided so far."""
    interval = ns["config.mamba_track_interval"] or MAMBA_TRACK_INTERVAL_DEFAULT
    if which == "mamba_track_interval":
        return interval
    strategy = None
    if (ns["model.architecture"] in MAMBA_RADIX_CACHE and _release_at_least(ns, MAMBA_RADIX_CACHE_FIRST)
            and not ns["config.disable_radix_cache"] and ns["config.disaggregation_mode"] != "decode"):
        # auto: extra_buffer with the overlap schedule on (the default) where supports_mamba_cache_extra_buffer
        # holds (not XPU; linear_attn_backend triton, the default), else no_buffer
        strategy = "no_buffer" if ns["device.vendor"] == "intel" else "extra_buffer"
    if which == "mamba_radix_cache_strategy":
        return strategy
    if strategy != "extra_buffer":
        return None
    if which == "mamba_track_short_of_drafts":
        drafts = ns["config.speculative_num_draft_tokens"]
        return drafts is not None and interval < drafts
    page = ns["out.page_size"]
    return interval % page if page else None


def _attention_dp_width(ns: Any) -> int:
    """The attention-DP width handle_data_parallelism divides the chunk by: dp_size under DP attention, which
    DSA prefill CP on CUDA/ROCm turns on itself (0.5.13-0.5.21: enable_dp_attention=True; 0.5.22+:
    context_parallel_attn_dp_size)."""
    if ns["config.enable_dp_attention"]:
        return int(ns["config.dp_size"])
    # either switch from 0.5.14 (--enable-prefill-context-parallel is prefill CP too up to 0.5.19); 0.5.13 runs
    # DSA prefill CP under its DSA switch only
    prefill_cp = ns["config.enable_prefill_cp"] or (
        ns["config.enable_prefill_context_parallel"] and _release_at_least(ns, "0.5.14"))
    if prefill_cp and ns["model.is_dsa"] and dsa_device_block(ns) and ns["model.architecture"] in FAMILY_OVERRIDES:
        return int(ns["config.dp_size"])
    return 1


def _resolved_attn_cp_size(ns: Any) -> int:
    """DSA prefill CP (_deepseek_family_overrides) keeps an interleave width given > 1, else sets
    tp_size // attention-DP width; without it the width is --attn-cp-size."""
    given = int(ns["config.attn_cp_size"])
    if (ns["config.enable_prefill_cp"] and ns["model.is_dsa"] and ns["device.vendor"] in ("nvidia", "amd")
            and ns["model.architecture"] in FAMILY_OVERRIDES):
        if ns["config.cp_strategy"] == "interleave" and given > 1:
            return given
        return max(int(ns["derived.tp_size"]) // max(_attention_dp_width(ns), 1), 1)
    return given


def _release_at_least(ns: Any, need: str) -> bool:
    from nsa_policy.base.versions import version_ge

    release = ns["input.release"]
    return release is None or version_ge(release, need)


def _resolved(ns: Any, which: str) -> Optional[int]:
    if which in ("attention_dp_width", "attn_cp_size"):
        if not _release_at_least(ns, "0.5.22"):
            return None
        return _attention_dp_width(ns) if which == "attention_dp_width" else _resolved_attn_cp_size(ns)
    whole, width = _whole_chunk(ns), _attention_dp_width(ns)
    size = whole // width if whole is not None and width > 1 and whole > 0 else whole
    if which == "chunked_prefill_size":
        return size
    page = ns["out.page_size"]
    if size is None or size <= 0 or not page or ns["config.disaggregation_mode"] == "decode":
        return None  # chunked prefill off, or a decode server: check_server_args skips the assert
    return size % page


def chunk_alternatives(ns: Any) -> tuple[str, ...]:
    """The nearest --chunked-prefill-size values whose per-rank share the page size divides."""
    size, page = _whole_chunk(ns), ns["out.page_size"]
    if size is None or size <= 0 or not page:
        return ()
    unit = page * _attention_dp_width(ns)
    below = size // unit * unit
    return tuple(f"chunked_prefill_size {v}" for v in (below, below + unit) if v > 0) + ("chunked_prefill_size -1",)


CHUNK_READS = ("config.chunked_prefill_size", "device.memory_gb", "out.page_size", "config.dp_size",
               "config.enable_dp_attention", "config.enable_prefill_cp", "config.enable_prefill_context_parallel",
               "model.is_dsa", "device.vendor",
               "model.architecture", "input.release")


def fact_inputs(what: str) -> Optional[frozenset[str]]:
    parsed = _parse(what)
    if parsed is not None and parsed[0] == "resolved":
        if parsed[2] == "family_overrides":
            return frozenset({"model"})
        if parsed[2] == "dsa_device_block":
            return frozenset({"device", "config"})  # the vendor, and the release targeted
        return None if parsed[2] in _READ_PAGE else frozenset({"device", "model", "config"})
    return frozenset({"config"})  # the flags as given


# the resolved facts that read the page size decided so far
_READ_PAGE = ("chunked_prefill_page_remainder", "mamba_track_page_remainder")


def fact_outputs(what: str) -> tuple[str, ...]:
    parsed = _parse(what)
    return ("page_size",) if parsed is not None and parsed[2] in _READ_PAGE else ()
