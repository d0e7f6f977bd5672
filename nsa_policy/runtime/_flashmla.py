"""FlashMLA through `sgl-flash-mla` (sglang's packaging of FlashMLA), loaded lazily.

The `flashmla` extra installs it; its metadata asks for torch >= 2.14.1, but its kernels are
built against torch's stable ABI and run with torch 2.11 (installed with `--no-deps`; measured on an
H200, docs/runtime.md). Its *legacy* kernels (`use_legacy=True`) keep SM90 and the DeepSeek-V3.2 576 / 656 KV
formats, which is what the adapter calls:

* flashmla_sparse: `flash_mla_sparse_fwd(q [T, H, 576] bf16, kv [N, 1, 576] bf16,
  indices [T, 1, K] int32 (−1 = unused), sm_scale, 512, topk_length=[T] int32, use_legacy=True)`;
* flashmla_kv: `flash_mla_with_kvcache(q [T, 1, H, 576] bf16, k_cache [N/64, 64, 1, 656] uint8,
  block_table (ignored), None, 512, sched_meta, softmax_scale=…, is_fp8_kvcache=True,
  indices [T, 1, K] int32, kv_format="V32", use_legacy=True)`; the scheduler metadata is filled by
  the first call and reused by every layer of the forward pass (same shapes, no topk_length).

Both kernels take 64 or 128 query heads: fewer heads are zero-padded (as sglang does).
"""
from __future__ import annotations

import importlib
import importlib.metadata
from typing import Any, Optional

import torch

from nsa_policy.runtime.errors import AdapterConfigError

DIST = "sgl-flash-mla"
MIN_VERSION = "1.0.0"
HEAD_VARIANTS = (64, 128)
KV_PAGE_SIZE = 64  # the V3.2 fp8 decode kernel's page block (sglang asserts it too)
V32_FORMAT = "V32"


def installed_version() -> Optional[str]:
    try:
        return importlib.metadata.version(DIST)
    except importlib.metadata.PackageNotFoundError:
        return None


def load() -> Any:
    """The `flash_mla` module (imported now, at adapter construction), legacy kernels present."""
    try:
        module = importlib.import_module("flash_mla")
    except Exception as exc:
        raise AdapterConfigError(
            f"the FlashMLA backends need {DIST} >= {MIN_VERSION} (the 'flashmla' extra; install it "
            f"with --no-deps on torch < 2.14.1); importing flash_mla failed ({exc!r})") from exc
    has_legacy = getattr(module, "has_legacy", None)
    if has_legacy is not None and not has_legacy():
        raise AdapterConfigError(f"{DIST} was built without its legacy kernels (FLASH_MLA_BUILD_LEGACY=0): "
                                 f"no SM90 or V3.2 KV format; install the published wheel")
    return module


def padded_heads(num_heads: int) -> int:
    """The kernel variant that serves `num_heads` query heads (zero-padded up to it)."""
    for variant in HEAD_VARIANTS:
        if num_heads <= variant:
            return variant
    raise ValueError(f"FlashMLA serves at most {HEAD_VARIANTS[-1]} query heads per rank, got {num_heads}")


def pad_heads(q: torch.Tensor, head_dim: int) -> torch.Tensor:
    """q [..., H, D] → [..., Hp, D] with zero heads appended (a copy only when H is not a variant)."""
    heads = q.shape[-2]
    target = padded_heads(heads)
    if target == heads:
        return q
    out = q.new_zeros(*q.shape[:-2], target, head_dim)
    out[..., :heads, :] = q
    return out


def sparse_prefill_call(*, q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor,
                        sm_scale: float, topk_length: Optional[torch.Tensor]) -> dict[str, Any]:
    """Keyword arguments of `flash_mla.flash_mla_sparse_fwd` (legacy kernel)."""
    return dict(q=q, kv=kv, indices=indices, sm_scale=sm_scale, d_v=512,
                topk_length=topk_length, use_legacy=True, return_log2_lse=False)


def kv_decode_call(*, q: torch.Tensor, k_cache: torch.Tensor, indices: torch.Tensor,
                   sched_meta: Any, softmax_scale: float, block_table: torch.Tensor) -> dict[str, Any]:
    """Keyword arguments of `flash_mla.flash_mla_with_kvcache` for sparse fp8 (V3.2, 656 bytes)."""
    return dict(q=q, k_cache=k_cache, block_table=block_table, cache_seqlens=None, head_dim_v=512,
                tile_scheduler_metadata=sched_meta, softmax_scale=softmax_scale,
                is_fp8_kvcache=True, indices=indices, kv_format=V32_FORMAT, use_legacy=True)
