"""Runtime adapter: the resolved decision → page tables and sparse-MLA kernel calls.

Needs the optional `runtime` extra (torch; flashinfer-python for the GPU backends; triton on
CUDA). Nothing is imported eagerly: `import nsa_policy.runtime.planner` works without torch, and
torch is loaded only when a torch-backed name below is first used.
"""
from __future__ import annotations

import importlib
from typing import Any

# public name → submodule that defines it
_EXPORTS = {
    "BatchPlanner": "planner",
    "PrefillRoute": "planner",
    "mha_one_shot_supported": "planner",
    "transform_index_page_table_prefill": "transforms",
    "transform_index_page_table_decode": "transforms",
    "transform_index_page_table_prefill_compact": "transforms",
    "transform_index_page_table_decode_compact": "transforms",
    "transform_index_page_table_prefill_lengths": "transforms",
    "transform_index_page_table_decode_lengths": "transforms",
    "sparse_mla_reference": "reference",
    "softmax_scale_for": "reference",
    "quantize_fp8_656": "quant",
    "dequantize_fp8_656": "quant",
    "quantize_fp8_per_tensor": "quant",
    "dequantize_fp8_per_tensor": "quant",
    "SparseMLAAdapter": "adapter",
    "ForwardPlan": "adapter",
    "AdapterConfigError": "errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'nsa_policy.runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later look-ups skip this hook
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
