"""sglang's namespace facts (the `sglang.*` family), one release at a time.

- `sglang.<release>.lists_<phase>_backend`: does that release list the configured backend among its
  --nsa/--dsa-<phase>-backend choices (catalog backends.yaml `sglang_choice`); None when unset or unknown.
- `sglang.<release>.{refused,deprecated}_spellings`: the flags among input.spellings that release's
  parser refuses (with what to use instead) or accepts as deprecated aliases (its own warning text),
  as one line from the argument registry (rules/catalog/sglang/args.yaml); None when there are none.
- `sglang.<release>.chunked_prefill_size`: the per-rank chunked-prefill size that release runs: the flag,
  else its GPU-memory default, divided by the attention-DP width; None where the release's rule is not
  modelled (before 0.5.22) or the device's memory is unknown. `..._page_remainder`: that size modulo the
  decided page size (check_server_args asserts 0), None where sglang does not check it.
- `sglang.<release>.attention_dp_width`: the attention-DP width that release resolves (attn_dp_enabled_of:
  > 1 is attention DP), 0.5.22+; None before. `sglang.<release>.attn_cp_size`: the attention-CP width it
  resolves (DSA prefill CP sets its own), 0.5.22+.
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Optional

_RELEASE = r"(\d+(?:\.[0-9A-Za-z]+)*)"
LISTS = re.compile(rf"^{_RELEASE}\.lists_(prefill|decode)_backend$")
SPELLINGS = re.compile(rf"^{_RELEASE}\.(refused|deprecated)_spellings$")
CHUNK = re.compile(rf"^{_RELEASE}\.chunked_prefill_(size|page_remainder)$")
WIDTH = re.compile(rf"^{_RELEASE}\.(attention_dp_width|attn_cp_size)$")
PATHS = ("sglang.<release>.lists_{prefill,decode}_backend", "sglang.<release>.{refused,deprecated}_spellings",
         "sglang.<release>.chunked_prefill_{size,page_remainder}", "sglang.<release>.attention_dp_width")
# arg_groups/memory_hook.py handle_gpu_memory_settings (0.5.22-0.5.23): (below MiB, chunked_prefill_size)
_CHUNK_BY_MEMORY = ((20 * 1024, 2048), (35 * 1024, 4096), (60 * 1024, 4096), (90 * 1024, 8192), (160 * 1024, 8192))
_CHUNK_LARGEST = 16384
# _deepseek_family_overrides' registered architectures: their DSA prefill CP runs --dp-size as attention DP
CP_FAMILY = frozenset({"DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "MistralLarge3ForCausalLM",
                       "PixtralForConditionalGeneration", "GlmMoeDsaForCausalLM", "Glm5NextForConditionalGeneration",
                       "HYV4ForCausalLM", "HYV4ForCausalLMNextN", "LongcatFlashForCausalLM",
                       "LongcatFlashForCausalLMNextN", "Dots3NoteForCausalLM"})


@lru_cache(maxsize=1024)
def _parse(what: str) -> Optional[tuple[str, str, str]]:
    """(kind, release, phase or refused/deprecated), parsed once per path."""
    m = LISTS.match(what)
    if m:
        return "lists", m.group(1), m.group(2)
    m = SPELLINGS.match(what)
    if m:
        return "spellings", m.group(1), m.group(2)
    m = CHUNK.match(what)
    if m:
        return "chunk", m.group(1), m.group(2)
    m = WIDTH.match(what)
    return ("width", m.group(1), m.group(2)) if m else None


def known(what: str) -> bool:
    return _parse(what) is not None


def sglang_fact(ns: Any, what: str) -> Any:
    parsed = _parse(what)
    if parsed is None:
        raise KeyError(f"sglang.{what}")
    kind, release, which = parsed
    if kind == "width":
        from nsa_policy.base.versions import version_ge

        if not version_ge(release, "0.5.22"):
            return None
        return _attention_dp_width(ns) if which == "attention_dp_width" else _resolved_attn_cp_size(ns)
    if kind == "chunk":
        size = _chunked_prefill_size(ns, release)
        if which == "size":
            return size
        page = ns["out.page_size"]
        if size is None or size <= 0 or not page or ns["config.disaggregation_mode"] == "decode":
            return None  # chunked prefill off, or a decode server: check_server_args skips the assert
        return size % page
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
        size = next((chunk for below, chunk in _CHUNK_BY_MEMORY if mib < below), _CHUNK_LARGEST)
    return size


def _attention_dp_width(ns: Any) -> int:
    """What handle_data_parallelism divides by (resolved: DSA prefill CP on CUDA/ROCm reads --dp-size as
    attention DP, context_parallel_attn_dp_size)."""
    if ns["config.enable_dp_attention"]:
        return int(ns["config.dp_size"])
    if (ns["config.enable_prefill_cp"] and ns["model.is_dsa"] and ns["device.vendor"] in ("nvidia", "amd")
            and ns["model.architecture"] in CP_FAMILY):
        return int(ns["config.dp_size"])
    return 1


def _resolved_attn_cp_size(ns: Any) -> int:
    """DSA prefill CP (_deepseek_family_overrides) keeps an interleave width given > 1, else sets
    tp_size // attention-DP width; without it the width is --attn-cp-size."""
    given = int(ns["config.attn_cp_size"])
    if (ns["config.enable_prefill_cp"] and ns["model.is_dsa"] and ns["device.vendor"] in ("nvidia", "amd")
            and ns["model.architecture"] in CP_FAMILY):
        if ns["config.cp_strategy"] == "interleave" and given > 1:
            return given
        return max(int(ns["derived.tp_size"]) // max(_attention_dp_width(ns), 1), 1)
    return given


def _chunked_prefill_size(ns: Any, release: str) -> Optional[int]:
    from nsa_policy.base.versions import version_ge

    if not version_ge(release, "0.5.22"):
        return None
    size, width = _whole_chunk(ns), _attention_dp_width(ns)
    return size // width if size is not None and width > 1 and size > 0 else size


def chunk_alternatives(release: str, ns: Any) -> tuple[str, ...]:
    """The nearest --chunked-prefill-size values whose per-rank share the page size divides."""
    size, page = _whole_chunk(ns), ns["out.page_size"]
    if size is None or size <= 0 or not page:
        return ()
    unit = page * _attention_dp_width(ns)
    below = size // unit * unit
    return tuple(f"chunked_prefill_size {v}" for v in (below, below + unit) if v > 0) + ("chunked_prefill_size -1",)


CHUNK_READS = ("config.chunked_prefill_size", "device.memory_gb", "out.page_size", "config.dp_size",
               "config.enable_dp_attention", "config.enable_prefill_cp", "model.is_dsa", "device.vendor",
               "model.architecture")


def fact_inputs(what: str) -> Optional[frozenset[str]]:
    parsed = _parse(what)
    if parsed is not None and parsed[0] == "width":
        return frozenset({"device", "model", "config"})
    if parsed is not None and parsed[0] == "chunk":
        return frozenset({"device", "model", "config"}) if parsed[2] == "size" else None  # None: everything
    return frozenset({"config"})  # the flags as given


def fact_outputs(what: str) -> tuple[str, ...]:
    parsed = _parse(what)
    return ("page_size",) if parsed is not None and parsed[0] == "chunk" and parsed[2] == "page_remainder" else ()
