"""flashinfer, loaded lazily, and the exact calls the adapter makes into it.

flashinfer is imported only when an adapter for a flashinfer backend is built (some releases
crash on import with CPU-only torch; RUNTIME.md §3). The version is read from package metadata
first, so a too-old install is refused before anything is imported. The call builders return
plain keyword dicts, which tests check against the installed function signatures.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import re
from types import SimpleNamespace
from typing import Any, Optional

import torch

from nsa_policy.runtime.errors import AdapterConfigError

KV_LORA_RANK = 512
QK_ROPE_HEAD_DIM = 64
QK_NOPE_HEAD_DIM = 128  # DeepSeek-V3.2 / GLM-5 head dim before absorption (kernel argument)

# Oldest flashinfer-python each backend works with (RUNTIME.md §3, POLICY.md §4).
MIN_VERSION = {
    "trtllm": "0.6.7",
    "fa3": "0.6.7",
    "flashinfer_sparse_mla": "0.6.14",
}


def parse_version(text: str) -> tuple[int, ...]:
    """'0.6.7.post2' → (0, 6, 7, 2); '0.7.4' → (0, 7, 4, 0); pre-releases sort as the release."""
    m = re.match(r"^\s*(\d+)\.(\d+)(?:\.(\d+))?(?:\.?post(\d+))?", text)
    if not m:
        raise ValueError(f"cannot parse a version from {text!r}")
    return tuple(int(g) if g else 0 for g in m.groups())


def installed_version() -> Optional[str]:
    for dist in ("flashinfer-python", "flashinfer"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


# Device-specific floors: trtllm-gen hangs on sm103 with 0.6.7, fixed in 0.6.7.post2 (sglang #21904).
MIN_VERSION_ON = {("trtllm", "sm103"): "0.6.7.post2"}


def check_version(backend: str, version: Optional[str], device_class: str) -> None:
    needed = MIN_VERSION_ON.get((backend, device_class), MIN_VERSION[backend])
    if version is None:
        raise AdapterConfigError(
            f"backend {backend!r} on {device_class} needs flashinfer-python >= {needed}, which is not "
            f"installed; install the 'runtime' extra, or use backend 'torch' (the reference)")
    if parse_version(version) < parse_version(needed):
        raise AdapterConfigError(
            f"backend {backend!r} on {device_class} needs flashinfer-python >= {needed}, found {version}; "
            f"upgrade flashinfer-python, or use backend 'torch' (the reference)")


def load(backend: str) -> SimpleNamespace:
    """The flashinfer entry points `backend` calls, imported now (at adapter construction)."""
    try:
        if backend in ("trtllm", "flashinfer_sparse_mla"):
            decode = importlib.import_module("flashinfer.decode")
            return SimpleNamespace(trtllm_batch_decode_with_kv_cache_mla=decode.trtllm_batch_decode_with_kv_cache_mla)
        mla = importlib.import_module("flashinfer.mla")
        return SimpleNamespace(BatchMLAPagedAttentionWrapper=mla.BatchMLAPagedAttentionWrapper)
    except Exception as exc:  # import errors, or a build that lacks the entry point
        raise AdapterConfigError(f"backend {backend!r}: importing flashinfer failed ({exc!r})") from exc


def trtllm_sparse_call(*, query: torch.Tensor, kv_pool: torch.Tensor, workspace: torch.Tensor,
                       block_tables: torch.Tensor, seq_lens: torch.Tensor, top_k: int,
                       page_size: int, bmm1_scale: float, bmm2_scale: float, kernel_backend: str,
                       extra: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """Keyword arguments of `trtllm_batch_decode_with_kv_cache_mla` for sparse MLA, each query
    token its own request (RUNTIME.md §3):

    query [T, 1, H, 576]; kv_cache [pages, 1, page_size, D] (D = 576 elements, or 656 bytes for
    the sm12x packed layout); block_tables [T, 1, K] int32 token slots; seq_lens [T] int32 (the
    clipped causal lengths = valid slots per row); max_seq_len = K; sparse_mla_top_k = K."""
    width = kv_pool.shape[-1]
    kwargs = dict(
        query=query,
        kv_cache=kv_pool.view(-1, 1, page_size, width),
        workspace_buffer=workspace,
        qk_nope_head_dim=QK_NOPE_HEAD_DIM,
        kv_lora_rank=KV_LORA_RANK,
        qk_rope_head_dim=QK_ROPE_HEAD_DIM,
        block_tables=block_tables,
        seq_lens=seq_lens,
        max_seq_len=top_k,
        sparse_mla_top_k=top_k,
        bmm1_scale=bmm1_scale,
        bmm2_scale=bmm2_scale,
        backend=kernel_backend,
    )
    if extra:
        kwargs.update(extra)
    return kwargs


def fa3_plan_call(*, qo_indptr: torch.Tensor, kv_indptr: torch.Tensor, kv_indices: torch.Tensor,
                  kv_len_arr: torch.Tensor, num_heads: int, softmax_scale: float,
                  q_dtype: torch.dtype, kv_dtype: torch.dtype) -> dict[str, Any]:
    """Keyword arguments of `BatchMLAPagedAttentionWrapper.plan`: one request per query token,
    page size 1 (a page is one KV row), not causal (the top-k already is)."""
    return dict(
        qo_indptr=qo_indptr, kv_indptr=kv_indptr, kv_indices=kv_indices, kv_len_arr=kv_len_arr,
        num_heads=num_heads, head_dim_ckv=KV_LORA_RANK, head_dim_kpe=QK_ROPE_HEAD_DIM,
        page_size=1, causal=False, sm_scale=softmax_scale,
        q_data_type=q_dtype, kv_data_type=kv_dtype,
    )
