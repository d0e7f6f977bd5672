"""Top-k → page-table transforms in plain torch (CPU and GPU).

Vectorised over the whole ragged batch: no Python loop over requests and no host
synchronisation (nothing reads a device value back), so it also serves as the GPU fallback.
Indices are clamped before every gather, so an out-of-range or −1 entry never reads out of
bounds; it is written as −1 instead.
"""
from __future__ import annotations

from typing import Optional

import torch


def token_requests(cu_extend_lens: torch.Tensor, num_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For each query token, the request it belongs to, and whether it belongs to any.

    `cu_extend_lens` [B+1] holds cumulative offsets (cu[0] is normally 0). A token outside
    [cu[0], cu[B]) maps to no request (row_valid False).
    """
    num_reqs = cu_extend_lens.numel() - 1
    tokens = torch.arange(num_tokens, device=cu_extend_lens.device, dtype=cu_extend_lens.dtype)
    # number of request ends at or before t = index of t's request
    req = torch.searchsorted(cu_extend_lens[1:].contiguous(), tokens, right=True)
    row_valid = (req < num_reqs) & (tokens >= cu_extend_lens[0])
    return req.clamp_(max=max(num_reqs - 1, 0)), row_valid


def gather_slots(page_table: torch.Tensor, topk_indices: torch.Tensor, req: torch.Tensor,
                 row_valid: torch.Tensor, page_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Slots [T, K] (int64, garbage where invalid) and the validity mask [T, K]."""
    row_len = page_table.shape[1] * page_size
    idx = topk_indices.to(torch.int64)
    valid = (idx >= 0) & (idx < row_len) & row_valid[:, None]
    if page_table.shape[0] == 0 or page_table.shape[1] == 0:
        return torch.zeros_like(idx), torch.zeros_like(valid)
    safe = torch.where(valid, idx, torch.zeros_like(idx))
    rows = req.to(torch.int64)[:, None]
    if page_size == 1:
        slots = page_table[rows, safe].to(torch.int64)
        valid = valid & (slots >= 0)
    else:
        pages = page_table[rows, torch.div(safe, page_size, rounding_mode="floor")].to(torch.int64)
        slots = pages * page_size + torch.remainder(safe, page_size)
        valid = valid & (pages >= 0)  # an unmapped page: −1, not slots −P…−1
    return slots, valid


def point_empty_rows(out: torch.Tensor, counts: torch.Tensor, slot: int) -> None:
    """Rows with no valid slot → [slot, −1, …] with count 1 (on the device, no sync)."""
    empty = counts == 0
    out[:, 0] = torch.where(empty, torch.full_like(out[:, 0], slot), out[:, 0])
    counts.clamp_(min=1)


def write_rows(slots: torch.Tensor, valid: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """out[t, j] = slot where valid, else −1."""
    out.copy_(torch.where(valid, slots, torch.full_like(slots, -1)))
    return out


def write_lengths(valid: torch.Tensor, lengths: torch.Tensor) -> None:
    """lengths[t] = the last valid position of row t + 1 (0 for a row with none)."""
    if valid.shape[1] == 0:
        lengths.zero_()
        return
    positions = torch.arange(1, valid.shape[1] + 1, device=valid.device)
    lengths.copy_(torch.where(valid, positions, torch.zeros_like(positions)).amax(dim=1))


def write_packed_rows(slots: torch.Tensor, valid: torch.Tensor, out: torch.Tensor,
                      counts: torch.Tensor) -> None:
    """Valid slots first (in their original order), −1 after; counts[t] = valid entries."""
    vi = valid.to(torch.int64)
    n_valid = vi.sum(dim=1)
    valid_rank = vi.cumsum(dim=1) - 1
    invalid_rank = (1 - vi).cumsum(dim=1) - 1
    position = torch.where(valid, valid_rank, n_valid[:, None] + invalid_rank)
    values = torch.where(valid, slots, torch.full_like(slots, -1)).to(out.dtype)
    out.scatter_(1, position, values)
    counts.copy_(n_valid)


def write_csr(slots: torch.Tensor, valid: torch.Tensor, kv_indptr: torch.Tensor,
              kv_indices: torch.Tensor, pad_slot: int, counts: Optional[torch.Tensor]) -> None:
    """Pack row t's valid slots into kv_indices[kv_indptr[t] : kv_indptr[t+1]].

    A row with more valid slots than its planned capacity keeps the first ones; a row with
    fewer is padded with `pad_slot` (an in-bounds KV row) so the kernel never reads −1.
    """
    num_rows, width = slots.shape
    packed = torch.empty_like(slots)
    n_valid = torch.empty(num_rows, dtype=torch.int64, device=slots.device)
    write_packed_rows(slots, valid, packed, n_valid)
    if counts is not None:
        counts.copy_(n_valid)
    total = kv_indices.numel()
    if total == 0 or num_rows == 0:
        return
    positions = torch.arange(total, device=slots.device, dtype=torch.int64)
    indptr = kv_indptr.to(torch.int64)
    row = torch.searchsorted(indptr[1:].contiguous(), positions, right=True).clamp_(max=num_rows - 1)
    col = positions - indptr[row]
    in_row = (col >= 0) & (col < width) & (positions < indptr[-1])
    take = in_row & (col < n_valid[row])
    if width == 0:
        value = torch.full_like(positions, pad_slot)
    else:
        value = packed[row, col.clamp(0, width - 1)]
        value = torch.where(take, value, torch.full_like(value, pad_slot))
    kv_indices.copy_(value)
