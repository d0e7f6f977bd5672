"""fp8 KV-cache layouts (sglang mem_cache/kv_cache_configurator.py calculate_mla_kv_cache_dim),
quantise and dequantise, runnable on the CPU.

* fp8-656 blockwise (FlashMLA / flashinfer sparse on sm12x): 656 bytes per token =
  512 × e4m3 (the latent, in 4 tiles of 128) + 4 × fp32 scales (one per tile, powers of two)
  + 64 × bf16 (the rope part, unquantised). Dequantised latent = e4m3 value × its tile's scale.
* fp8-576 per-tensor (trtllm): 576 × e4m3 with one fp32 scale for the whole cache.
"""
from __future__ import annotations

from typing import Optional

import torch

LATENT = 512
ROPE = 64
TILE = 128
NUM_TILES = LATENT // TILE
BYTES_656 = LATENT + 4 * NUM_TILES + 2 * ROPE  # 656
FP8_MAX = 448.0  # largest finite float8_e4m3fn
_SMALLEST_AMAX = 2.0 ** -100  # keeps log2 finite for an all-zero tile


def _check_576(name: str, x: torch.Tensor) -> None:
    if not isinstance(x, torch.Tensor) or x.dim() < 1 or x.shape[-1] != LATENT + ROPE:
        raise ValueError(f"{name} must be [..., {LATENT + ROPE}], got shape "
                         f"{tuple(getattr(x, 'shape', ()))}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be floating point, got {x.dtype}")


def quantize_fp8_656(kv: torch.Tensor, pow2_scales: bool = True) -> torch.Tensor:
    """kv [..., 576] (bf16/fp32) → packed [..., 656] uint8.

    Each 128-wide latent tile gets scale = amax / 448, rounded up to a power of two when
    `pow2_scales` (the layout's convention; False gives sglang's older exact-amax scales)."""
    _check_576("kv", kv)
    lead = kv.shape[:-1]
    latent = kv[..., :LATENT].to(torch.float32).reshape(*lead, NUM_TILES, TILE)
    amax = latent.abs().amax(dim=-1).clamp(min=_SMALLEST_AMAX)
    scale = amax / FP8_MAX
    if pow2_scales:
        scale = torch.exp2(torch.ceil(torch.log2(scale)))
    q = (latent / scale[..., None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    out = torch.empty(*lead, BYTES_656, dtype=torch.uint8, device=kv.device)
    out[..., :LATENT] = q.reshape(*lead, LATENT).view(torch.uint8)
    out[..., LATENT:LATENT + 4 * NUM_TILES] = scale.contiguous().view(torch.uint8).reshape(*lead, 4 * NUM_TILES)
    rope = kv[..., LATENT:].to(torch.bfloat16).contiguous()
    out[..., LATENT + 4 * NUM_TILES:] = rope.view(torch.uint8).reshape(*lead, 2 * ROPE)
    return out


def dequantize_fp8_656(packed: torch.Tensor, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """packed [..., 656] (uint8 or float8 bytes) → [..., 576] in `dtype`."""
    if not isinstance(packed, torch.Tensor) or packed.dim() < 1 or packed.shape[-1] != BYTES_656:
        raise ValueError(f"packed must be [..., {BYTES_656}] bytes, got shape "
                         f"{tuple(getattr(packed, 'shape', ()))}")
    if packed.element_size() != 1:
        raise ValueError(f"packed must be a 1-byte dtype (uint8 / float8), got {packed.dtype}")
    raw = packed.contiguous().view(torch.uint8)
    lead = raw.shape[:-1]
    q = raw[..., :LATENT].contiguous().view(torch.float8_e4m3fn).to(torch.float32)
    scale = raw[..., LATENT:LATENT + 4 * NUM_TILES].contiguous().view(torch.float32)
    latent = (q.reshape(*lead, NUM_TILES, TILE) * scale[..., None]).reshape(*lead, LATENT)
    rope = raw[..., LATENT + 4 * NUM_TILES:].contiguous().view(torch.bfloat16).to(torch.float32)
    return torch.cat([latent, rope], dim=-1).to(dtype)


def quantize_fp8_per_tensor(x: torch.Tensor, scale: Optional[float] = None) -> tuple[torch.Tensor, float]:
    """x → (e4m3 tensor, scale) with x ≈ e4m3 · scale; scale = amax / 448 unless given."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise ValueError(f"x must be a floating-point tensor, got {getattr(x, 'dtype', type(x))}")
    if scale is None:
        amax = float(x.abs().max()) if x.numel() else 0.0
        scale = max(amax, _SMALLEST_AMAX) / FP8_MAX
    if not scale > 0:
        raise ValueError(f"scale must be > 0, got {scale!r}")
    q = (x.to(torch.float32) / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, float(scale)


def dequantize_fp8_per_tensor(q: torch.Tensor, scale: float, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    if not isinstance(q, torch.Tensor) or q.dtype != torch.float8_e4m3fn:
        raise ValueError(f"q must be a float8_e4m3fn tensor, got {getattr(q, 'dtype', type(q))}")
    return (q.to(torch.float32) * scale).to(dtype)
