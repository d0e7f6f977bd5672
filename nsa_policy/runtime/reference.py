"""Absorbed sparse MLA in plain torch (docs/runtime.md): the reference every backend must match.

q [T, H, 576] (512 latent + 64 rope), kv [N, 576] shared by all heads, V = kv[:, :512].
logit[t, h, j] = scale · ⟨q[t, h], kv[I[t, j]]⟩ over valid j (I ≥ 0), softmax over j,
out[t, h] = Σ_j p · kv[I[t, j], :512]. Math in fp32 (or fp64 if given fp64); a token with no
valid index gets out = 0 and lse = −inf (FlashMLA's convention).
"""
from __future__ import annotations

import math
from typing import Optional, Union

import torch

KV_LORA_RANK = 512
QK_ROPE_HEAD_DIM = 64
HEAD_DIM_QK = KV_LORA_RANK + QK_ROPE_HEAD_DIM  # 576
# Gather at most this many KV elements at once, so the reference fits in memory at T = 4096.
_GATHER_BUDGET = 1 << 26


def softmax_scale_for(qk_nope_head_dim: int = 128, qk_rope_head_dim: int = 64,
                      rope_scaling_factor: float = 1.0, mscale_all_dim: float = 0.0) -> float:
    """Softmax scale of absorbed MLA: 1/sqrt(head dim before absorption, 128 + 64 = 192), times
    the yarn mscale² (mscale = 0.1 · mscale_all_dim · ln(factor) + 1), as DeepSeek's model code
    does. Not 1/sqrt(576). DeepSeek-V3.2 (factor 40, mscale_all_dim 1.0) → 0.13524."""
    if qk_nope_head_dim <= 0 or qk_rope_head_dim < 0:
        raise ValueError(f"head dims must be positive, got qk_nope_head_dim={qk_nope_head_dim}, "
                         f"qk_rope_head_dim={qk_rope_head_dim}")
    if rope_scaling_factor <= 0:
        raise ValueError(f"rope_scaling_factor must be > 0, got {rope_scaling_factor}")
    mscale = 1.0 if rope_scaling_factor <= 1 else 0.1 * mscale_all_dim * math.log(rope_scaling_factor) + 1.0
    return (qk_nope_head_dim + qk_rope_head_dim) ** -0.5 * mscale * mscale


def _check(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor) -> None:
    if q.dim() != 3 or q.shape[-1] != HEAD_DIM_QK:
        raise ValueError(f"q must be [T, H, {HEAD_DIM_QK}], got shape {tuple(q.shape)}")
    if kv.dim() != 2 or kv.shape[-1] != HEAD_DIM_QK:
        raise ValueError(f"kv must be [N, {HEAD_DIM_QK}] (dequantise fp8 layouts first), got "
                         f"shape {tuple(kv.shape)}")
    if indices.dim() != 2 or indices.shape[0] != q.shape[0]:
        raise ValueError(f"indices must be [T={q.shape[0]}, K], got shape {tuple(indices.shape)}")
    if indices.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"indices must be int32 or int64, got {indices.dtype}")
    for name, t in (("q", q), ("kv", kv)):
        if not t.is_floating_point() or t.dtype.itemsize < 2:
            raise ValueError(f"{name} must be bf16, fp16, fp32 or fp64, got {t.dtype}")


def sparse_mla_reference(
    q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, softmax_scale: float,
    return_lse: bool = False, out_dtype: Optional[torch.dtype] = None,
) -> Union[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """out [T, H, 512] in `out_dtype` (default q.dtype); with return_lse also lse [T, H] fp32
    (natural log of Σ exp(scaled logits); −inf for an empty row).

    Indices < 0 are unused. An index ≥ N raises (this is a reference: it reads the indices)."""
    _check(q, kv, indices)
    if indices.numel() and int(indices.max()) >= kv.shape[0]:
        raise ValueError(f"indices must be < N = {kv.shape[0]} (kv rows) or negative (unused), got "
                         f"max {int(indices.max())}")
    math_dtype = torch.float64 if (q.dtype == torch.float64 or kv.dtype == torch.float64) else torch.float32
    num_tokens, num_heads, _ = q.shape
    k = indices.shape[1]
    out = torch.zeros(num_tokens, num_heads, KV_LORA_RANK, dtype=math_dtype, device=q.device)
    lse = torch.full((num_tokens, num_heads), -math.inf, dtype=math_dtype, device=q.device)
    chunk = max(1, _GATHER_BUDGET // max(1, k * HEAD_DIM_QK))
    for start in range(0, num_tokens, chunk):
        stop = min(num_tokens, start + chunk)
        idx = indices[start:stop].to(torch.int64)
        valid = idx >= 0
        rows = kv[idx.clamp(min=0)].to(math_dtype)                      # [t, K, 576]
        qc = q[start:stop].to(math_dtype)                                # [t, H, 576]
        logits = torch.einsum("thd,tkd->thk", qc, rows) * softmax_scale
        logits = logits.masked_fill(~valid[:, None, :], -math.inf)
        row_lse = torch.logsumexp(logits, dim=-1)                        # −inf if empty
        has_any = valid.any(dim=-1)[:, None]
        p = torch.exp(logits - torch.where(has_any, row_lse, torch.zeros_like(row_lse))[..., None])
        p = torch.where(has_any[..., None], p, torch.zeros_like(p))
        out[start:stop] = torch.einsum("thk,tkd->thd", p, rows[..., :KV_LORA_RANK])
        lse[start:stop] = row_lse
    out = out.to(out_dtype or q.dtype)
    if return_lse:
        return out, lse.to(torch.float32)
    return out


def dense_masked_reference(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor,
                           softmax_scale: float) -> torch.Tensor:
    """The same attention computed densely over all N rows with a mask built from the indices
    (a second, independent formulation, used to test the gather-based reference). fp64."""
    _check(q, kv, indices)
    n = kv.shape[0]
    mask = torch.zeros(q.shape[0], n, dtype=torch.bool, device=q.device)
    idx = indices.to(torch.int64)
    rows = torch.arange(q.shape[0], device=q.device)[:, None].expand_as(idx)
    mask[rows[idx >= 0], idx[idx >= 0]] = True
    kvd = kv.to(torch.float64)
    logits = torch.einsum("thd,nd->thn", q.to(torch.float64), kvd) * softmax_scale
    logits = logits.masked_fill(~mask[:, None, :], -math.inf)
    p = torch.softmax(logits, dim=-1).nan_to_num(0.0)
    return torch.einsum("thn,nd->thd", p, kvd[:, :KV_LORA_RANK])
