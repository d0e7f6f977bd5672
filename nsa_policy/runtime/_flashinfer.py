"""flashinfer, loaded lazily, and the exact calls the adapter makes into it.

flashinfer is imported only when an adapter for a flashinfer backend is built (some releases
crash on import with CPU-only torch). The version is read from package metadata
first, so a too-old install is refused before anything is imported. The call builders return
plain keyword dicts, which tests check against the installed function signatures.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import re
from types import SimpleNamespace
from typing import Any, Optional

import torch

from nsa_policy.runtime.errors import AdapterConfigError

KV_LORA_RANK = 512
QK_ROPE_HEAD_DIM = 64
QK_NOPE_HEAD_DIM = 128  # DeepSeek-V3.2 / GLM-5 head dim before absorption (kernel argument)

# Oldest flashinfer-python whose entry points this adapter calls with the arguments it passes
# (trtllm_batch_decode_with_kv_cache_mla and BatchMLAPagedAttentionWrapper as of 0.6.7). A backend's own
# requirement of the engine's kernel package is the catalog's (backends.yaml min_versions) and wins
# where it is higher: flashinfer_sparse_mla needs 0.6.14 there.
ADAPTER_MIN_VERSION = "0.6.7"


def min_version(backend: str) -> str:
    from nsa_policy.catalog.store import load_catalog

    spec = load_catalog().backends.get(backend)
    needed = spec.min_versions.get("flashinfer-python") if spec is not None else None
    if needed is not None and parse_version(needed) > parse_version(ADAPTER_MIN_VERSION):
        return needed
    return ADAPTER_MIN_VERSION


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
    needed = MIN_VERSION_ON.get((backend, device_class)) or min_version(backend)
    if version is None:
        raise AdapterConfigError(
            f"backend {backend!r} on {device_class} needs flashinfer-python >= {needed}, which is not "
            f"installed; install the 'runtime' extra, or use backend 'torch' (the reference)")
    if parse_version(version) < parse_version(needed):
        raise AdapterConfigError(
            f"backend {backend!r} on {device_class} needs flashinfer-python >= {needed}, found {version}; "
            f"upgrade flashinfer-python, or use backend 'torch' (the reference)")


# fa3's Hopper MLA kernel before flashinfer-python 0.6.11 (include/flashinfer/attention/mla_hopper.cuh,
# prefetch_offset) multiplies a KV row's int32 index by the uint32 row stride in 32 bits: past 2^32
# elements of one layer's pool the offset wraps and the kernel reads another row, with no error (seen on
# an H200 with 0.6.7.post2 from 7.6M rows of 576). 0.6.11 widens the index to int64 first.
FA3_WIDE_OFFSETS_FROM = "0.6.11"
FA3_OFFSET_LIMIT = 1 << 32  # elements one 32-bit offset reaches


def fa3_max_pool_rows(version: Optional[str], row_elements: int) -> Optional[int]:
    """Most rows of `row_elements` one layer's pool may hold for fa3 with this flashinfer (None: no
    limit). Every element offset a row's loads start at, index × stride + at most 56, must stay
    under 2^32; `rows × stride <= 2^32` keeps that with room to spare."""
    if version is not None and parse_version(version) >= parse_version(FA3_WIDE_OFFSETS_FROM):
        return None
    return FA3_OFFSET_LIMIT // row_elements


def fa3_pool_problem(rows: int, limit: Optional[int], version: Optional[str]) -> Optional[str]:
    """Why fa3 cannot read a pool of `rows` rows (None when it can)."""
    if limit is None or rows <= limit:
        return None
    return (f"backend 'fa3' with flashinfer-python {version} reads at most {limit:,} KV rows per layer "
            f"pool (its kernel computes row offsets in 32 bits, fixed in {FA3_WIDE_OFFSETS_FROM}), got "
            f"{rows:,}; upgrade flashinfer-python to >= {FA3_WIDE_OFFSETS_FROM}, use a smaller pool, or "
            f"another backend")


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


# Scale semantics of the fp8-656 cache's inline fp32 scales (flashinfer's `kv_scale_format`, sm12x
# sparse backend). sglang's cache writer stores exact amax/448 scales and passes "arbitrary_fp32";
# flashinfer's default ("auto" = "pow2_fp32") keeps only each scale's exponent.
KV_SCALE_FORMATS = ("arbitrary_fp32", "pow2_fp32")
DEFAULT_KV_SCALE_FORMAT = "arbitrary_fp32"
# sglang's SGLANG_FLASHINFER_WORKSPACE_SIZE (384 MiB): flashinfer 0.7.4's sm12x backend carves its
# split-KV partials out of the workspace and raises during CUDA-graph capture when it is too small.
WORKSPACE_BYTES = 384 << 20
# flashinfer 0.7.4's sm12x sparse backend (supported_sparse_mla_sm120_configs()['dsv3_2']):
# heads 1..128; ordinary prefill needs whole 64-wide index tiles.
SM12X_MAX_HEADS = 128
SM12X_PREFILL_TOPK_MULTIPLE = 64


def parameters(fn: Any) -> Optional[set[str]]:
    """Names `fn` accepts, or None when it takes **kwargs (or has no inspectable signature)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()):
        return None
    return set(sig.parameters)


def sm12x_max_heads(decode_module: Any) -> int:
    """The sm12x sparse backend's head limit from flashinfer's own table when it has one."""
    try:
        from flashinfer.mla._sparse_mla_sm120._api import supported_sparse_mla_sm120_configs
        return int(supported_sparse_mla_sm120_configs()["dsv3_2"].max_num_heads)
    except Exception:  # older flashinfer, or a stand-in: the 0.7.4 figure
        return SM12X_MAX_HEADS


def multi_cta_counter_bytes(num_tokens: int, num_heads: int, sm_count: int) -> int:
    """flashinfer 0.7.4's get_trtllm_gen_multi_ctas_kv_counter_bytes: one int32 semaphore per
    (token, head), at least one per SM, rounded up to 8."""
    n = max(num_tokens * num_heads, sm_count)
    return ((n + 7) // 8 * 8) * 4


def trtllm_sparse_call(*, query: torch.Tensor, kv_pool: torch.Tensor, workspace: torch.Tensor,
                       block_tables: torch.Tensor, seq_lens: torch.Tensor, top_k: int,
                       page_size: int, bmm1_scale: float, bmm2_scale: float, kernel_backend: str,
                       max_seq_len: Optional[int] = None, kv_scale_format: Optional[str] = None,
                       counter_buffer: Optional[torch.Tensor] = None,
                       extra: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """Keyword arguments of `trtllm_batch_decode_with_kv_cache_mla` for sparse MLA, each query
    token its own request (docs/runtime.md):

    query [T, 1, H, 576]; kv_cache [pages, 1, page_size, D] (D = 576 elements, or 656 bytes for
    the sm12x packed layout); block_tables [T, 1, K] int32 token slots; seq_lens [T] int32 (the
    clipped causal lengths = valid slots per row, ≥ 1: an empty row points at a dummy token);
    max_seq_len = the batch's longest KV length (a scheduling hint, as sglang passes it; K when
    unknown); sparse_mla_top_k = K. `kv_scale_format` only for the sm12x backend ("sparse"),
    `counter_buffer` (multi_ctas_kv_counter_buffer) only for trtllm-gen."""
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
        max_seq_len=top_k if max_seq_len is None else max_seq_len,
        sparse_mla_top_k=top_k,
        bmm1_scale=bmm1_scale,
        bmm2_scale=bmm2_scale,
        backend=kernel_backend,
    )
    if kv_scale_format is not None:
        kwargs["kv_scale_format"] = kv_scale_format
    if counter_buffer is not None:
        kwargs["multi_ctas_kv_counter_buffer"] = counter_buffer
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
