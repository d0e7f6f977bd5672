"""Top-k → page-table transforms (docs/runtime.md): the public entry points.

`topk_indices` [T, K] holds request-relative token positions (−1 = unused); the result [T, K]
int32 holds KV-pool slots, `page_table[req(t), topk[t, j]]` for 0 ≤ topk[t, j] < row length,
else −1. With page_size P > 1 the table is a block table and
`slot = block_table[req, i // P] * P + i % P` (vLLM's convention). A negative page-table entry
(an unmapped page) gives −1 and counts as unused, never slots −P…−1.

`impl` picks the implementation: "triton" (one fused launch; CUDA tensors only), "torch"
(anywhere), or "auto" (triton where it can run, else torch). An explicit "triton" that cannot run
raises; it never falls back silently.
"""
from __future__ import annotations

import importlib.util
from functools import cache
from typing import Callable, Optional, Sequence, Union

import torch

from nsa_policy.runtime import _torch_transforms as _ref

ExtendLens = Union[Sequence[int], torch.Tensor]
IMPLS = ("auto", "torch", "triton")
_INDEX_DTYPES = (torch.int32, torch.int64)


@cache
def _triton_importable() -> bool:
    return importlib.util.find_spec("triton") is not None


@cache
def _cuda_with_triton() -> bool:
    return torch.cuda.is_available() and _triton_importable()


def triton_available(device: torch.device) -> bool:
    """Whether the fused Triton kernels can run on `device`."""
    return device.type == "cuda" and _cuda_with_triton()


def _resolve_impl(impl: str, device: torch.device) -> str:
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    if impl == "auto":
        return "triton" if triton_available(device) else "torch"
    if impl == "triton" and not triton_available(device):
        why = ("the tensors are on " + str(device)) if device.type != "cuda" else "triton is not installed"
        raise ValueError(f"impl='triton' cannot run: {why}; use impl='torch' or impl='auto'")
    return impl


def _check_index_tensor(name: str, value: object) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if value.dim() != 2:
        raise ValueError(f"{name} must be 2-D, got shape {tuple(value.shape)}")
    if value.dtype not in _INDEX_DTYPES:
        raise ValueError(f"{name} must be int32 or int64, got {value.dtype}")
    return value


def _check_inputs(page_table: torch.Tensor, topk_indices: torch.Tensor, page_size: int) -> None:
    _check_index_tensor("page_table", page_table)
    _check_index_tensor("topk_indices", topk_indices)
    if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
        raise ValueError(f"page_size must be an int >= 1, got {page_size!r}")
    if page_table.device != topk_indices.device:
        raise ValueError(f"page_table is on {page_table.device} but topk_indices is on "
                         f"{topk_indices.device}; both must be on one device")


def _check_out(name: str, out: Optional[torch.Tensor], shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    if out is None:
        return torch.empty(shape, dtype=torch.int32, device=device)
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or None, got {type(out).__name__}")
    if tuple(out.shape) != tuple(shape) or out.dtype != torch.int32 or out.device != device:
        raise ValueError(f"{name} must be an int32 tensor of shape {tuple(shape)} on {device}, got "
                         f"{out.dtype} {tuple(out.shape)} on {out.device}")
    if out.dim() > 1 and out.stride(-1) != 1:
        raise ValueError(f"{name} rows must be contiguous (stride(-1) == 1), got strides {out.stride()}")
    return out


def cumulative_extend_lens(extend_lens: ExtendLens, num_requests: int, num_tokens: int,
                           device: torch.device) -> torch.Tensor:
    """[B+1] int32 cumulative offsets on `device` from per-request lengths.

    A host sequence is checked (B entries, non-negative, summing to T) and copied once; a device
    tensor of lengths is summed on the device, unchecked (checking would synchronise).
    """
    if isinstance(extend_lens, torch.Tensor):
        if extend_lens.dim() != 1 or extend_lens.numel() != num_requests:
            raise ValueError(f"extend_lens must be 1-D with one length per page_table row "
                             f"({num_requests}), got shape {tuple(extend_lens.shape)}")
        if extend_lens.dtype not in _INDEX_DTYPES:
            raise ValueError(f"extend_lens must be int32 or int64, got {extend_lens.dtype}")
        cu = torch.zeros(num_requests + 1, dtype=torch.int32, device=extend_lens.device)
        torch.cumsum(extend_lens, dim=0, out=cu[1:])
        return cu.to(device)
    lens = list(extend_lens)
    if len(lens) != num_requests:
        raise ValueError(f"extend_lens must have one length per page_table row ({num_requests}), "
                         f"got {len(lens)}")
    bad = [x for x in lens if isinstance(x, bool) or not isinstance(x, int) or x < 0]
    if bad:
        raise ValueError(f"extend_lens must be non-negative ints, got {bad[:3]!r}")
    if sum(lens) != num_tokens:
        raise ValueError(f"extend_lens must sum to the number of topk_indices rows ({num_tokens}), "
                         f"got {sum(lens)}")
    offsets = [0]
    for x in lens:
        offsets.append(offsets[-1] + x)
    return torch.tensor(offsets, dtype=torch.int32).to(device)


def _cu_for_prefill(page_table: torch.Tensor, topk_indices: torch.Tensor,
                    extend_lens: Optional[ExtendLens], cu_extend_lens: Optional[torch.Tensor]) -> torch.Tensor:
    if (extend_lens is None) == (cu_extend_lens is None):
        raise ValueError("give exactly one of extend_lens (per-request lengths) and cu_extend_lens "
                         "(device tensor of B+1 cumulative offsets)")
    num_requests = page_table.shape[0]
    if cu_extend_lens is None:
        assert extend_lens is not None  # exactly one of the two is given (checked above)
        return cumulative_extend_lens(extend_lens, num_requests, topk_indices.shape[0],
                                      topk_indices.device)
    if not isinstance(cu_extend_lens, torch.Tensor) or cu_extend_lens.dim() != 1 \
            or cu_extend_lens.numel() != num_requests + 1:
        raise ValueError(f"cu_extend_lens must be a 1-D tensor of page_table rows + 1 "
                         f"({num_requests + 1}) cumulative offsets, got "
                         f"{getattr(cu_extend_lens, 'shape', cu_extend_lens)!r}")
    if cu_extend_lens.dtype not in _INDEX_DTYPES:
        raise ValueError(f"cu_extend_lens must be int32 or int64, got {cu_extend_lens.dtype}")
    if cu_extend_lens.device != topk_indices.device:
        raise ValueError(f"cu_extend_lens is on {cu_extend_lens.device}, topk_indices on "
                         f"{topk_indices.device}; put both on one device")
    return cu_extend_lens


def _rows_of(page_table: torch.Tensor, topk_indices: torch.Tensor,
             cu: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    if cu is None:
        rows = torch.arange(topk_indices.shape[0], device=topk_indices.device)
        return rows, torch.ones_like(rows, dtype=torch.bool)
    return _ref.token_requests(cu, topk_indices.shape[0])


def _transform(page_table: torch.Tensor, topk_indices: torch.Tensor, cu: Optional[torch.Tensor],
               page_size: int, out: Optional[torch.Tensor], impl: str) -> torch.Tensor:
    out = _check_out("out", out, tuple(topk_indices.shape), topk_indices.device)
    if _resolve_impl(impl, topk_indices.device) == "triton":
        from nsa_policy.runtime import _triton_transforms
        return _triton_transforms.launch_transform(page_table, topk_indices, cu, page_size, out)
    req, row_valid = _rows_of(page_table, topk_indices, cu)
    slots, valid = _ref.gather_slots(page_table, topk_indices, req, row_valid, page_size)
    return _ref.write_rows(slots, valid, out)


def _check_empty_row_slot(value: Optional[int]) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ValueError(f"empty_row_slot must be None or a KV slot >= 0, got {value!r}")


def _transform_compact(page_table: torch.Tensor, topk_indices: torch.Tensor, cu: Optional[torch.Tensor],
                       page_size: int, out: Optional[torch.Tensor], counts: Optional[torch.Tensor],
                       impl: str, empty_row_slot: Optional[int] = None,
                       lengths: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    t = topk_indices.shape[0]
    _check_empty_row_slot(empty_row_slot)
    out = _check_out("out", out, tuple(topk_indices.shape), topk_indices.device)
    counts = _check_out("lengths" if lengths else "counts", counts, (t,), topk_indices.device)
    if _resolve_impl(impl, topk_indices.device) == "triton":
        from nsa_policy.runtime import _triton_transforms
        _triton_transforms.launch_transform_compact(page_table, topk_indices, cu, page_size, out, counts,
                                                    empty_row_slot=empty_row_slot, lengths=lengths)
        return out, counts
    req, row_valid = _rows_of(page_table, topk_indices, cu)
    slots, valid = _ref.gather_slots(page_table, topk_indices, req, row_valid, page_size)
    if lengths:
        _ref.write_rows(slots, valid, out)
        _ref.write_lengths(valid, counts)
        return out, counts
    _ref.write_packed_rows(slots, valid, out, counts)
    if empty_row_slot is not None and t and out.shape[1]:
        _ref.point_empty_rows(out, counts, empty_row_slot)
    return out, counts


_Tensor = torch.Tensor


def _fast_ok(page_table: object, topk_indices: object, page_size: object, out: object, impl: str) -> bool:
    """The common eager call (CUDA tensors, preallocated out, triton) passes these cheap checks
    and launches at once; anything else takes the checked path, which names what is wrong."""
    return (type(out) is _Tensor and type(topk_indices) is _Tensor and type(page_table) is _Tensor
            and (impl == "auto" or impl == "triton") and topk_indices.is_cuda and _cuda_with_triton()
            and type(page_size) is int and page_size >= 1
            and page_table.dim() == 2 and topk_indices.dim() == 2
            and topk_indices.dtype in _INDEX_DTYPES and page_table.dtype in _INDEX_DTYPES
            and out.dtype == torch.int32 and out.shape == topk_indices.shape
            and (out.dim() < 2 or out.stride(-1) == 1 or out.shape[-1] <= 1)
            and page_table.get_device() == topk_indices.get_device() == out.get_device())


def _fast_compact_ok(page_table: torch.Tensor, topk_indices: torch.Tensor, page_size: object,
                     out: torch.Tensor, counts: object, impl: str, empty_row_slot: object) -> bool:
    """The adapter's per-layer compaction (preallocated out and counts) passes these cheap checks
    and launches at once; they accept only what the checked path accepts."""
    return (_fast_ok(page_table, topk_indices, page_size, out, impl)
            and type(counts) is _Tensor and counts.dtype == torch.int32
            and counts.shape == topk_indices.shape[:1]
            and counts.get_device() == out.get_device()
            and (empty_row_slot is None or (type(empty_row_slot) is int and empty_row_slot >= 0)))


def _fast_cu_ok(cu_extend_lens: object, page_table: torch.Tensor, out: torch.Tensor) -> bool:
    return (type(cu_extend_lens) is _Tensor and cu_extend_lens.dim() == 1
            and cu_extend_lens.shape[0] == page_table.shape[0] + 1
            and cu_extend_lens.dtype in _INDEX_DTYPES
            and cu_extend_lens.get_device() == out.get_device())


@cache
def _decode_launcher() -> Optional[Callable[..., Optional[torch.Tensor]]]:
    """The Triton decode fast path, or None where Triton cannot run (imported on first use)."""
    if not _cuda_with_triton():
        return None
    from nsa_policy.runtime import _triton_transforms
    return _triton_transforms.launch_decode


def transform_index_page_table_prefill(
    page_table: torch.Tensor, topk_indices: torch.Tensor, extend_lens: Optional[ExtendLens] = None,
    page_size: int = 1, out: Optional[torch.Tensor] = None, *,
    cu_extend_lens: Optional[torch.Tensor] = None, impl: str = "auto",
) -> torch.Tensor:
    """Ragged prefill batch: page_table [B, W] (one row per request), topk_indices [T, K] with
    tokens laid out request by request. Give `extend_lens` (B lengths, host list or device
    tensor) or, for a single launch with no copy, `cu_extend_lens` (device tensor, B+1 offsets).
    Returns [T, K] int32 slots, −1 where unused or out of range."""
    if (extend_lens is None and type(cu_extend_lens) is _Tensor and out is not None
            and _fast_ok(page_table, topk_indices, page_size, out, impl)
            and cu_extend_lens.dim() == 1 and cu_extend_lens.shape[0] == page_table.shape[0] + 1
            and cu_extend_lens.dtype in _INDEX_DTYPES and cu_extend_lens.get_device() == out.get_device()):
        from nsa_policy.runtime import _triton_transforms
        return _triton_transforms.launch_transform(page_table, topk_indices, cu_extend_lens, page_size, out)
    _check_inputs(page_table, topk_indices, page_size)
    cu = _cu_for_prefill(page_table, topk_indices, extend_lens, cu_extend_lens)
    return _transform(page_table, topk_indices, cu, page_size, out, impl)


def transform_index_page_table_decode(
    page_table: torch.Tensor, topk_indices: torch.Tensor, page_size: int = 1,
    out: Optional[torch.Tensor] = None, *, impl: str = "auto",
) -> torch.Tensor:
    """Decode: row r of topk_indices [R, K] uses row r of page_table [R, W]."""
    if out is not None and (impl == "auto" or impl == "triton") and type(topk_indices) is _Tensor \
            and topk_indices.is_cuda:
        launch = _decode_launcher()
        if launch is not None and launch(page_table, topk_indices, page_size, out) is not None:
            return out
    if out is not None and _fast_ok(page_table, topk_indices, page_size, out, impl) \
            and page_table.shape[0] == topk_indices.shape[0]:
        from nsa_policy.runtime import _triton_transforms
        return _triton_transforms.launch_transform(page_table, topk_indices, None, page_size, out)
    _check_inputs(page_table, topk_indices, page_size)
    if page_table.shape[0] != topk_indices.shape[0]:
        raise ValueError(f"decode needs one page_table row per topk_indices row, got "
                         f"{page_table.shape[0]} and {topk_indices.shape[0]}")
    return _transform(page_table, topk_indices, None, page_size, out, impl)


def _prefill_rows(page_table, topk_indices, extend_lens, page_size, out, counts, cu_extend_lens, impl,
                  empty_row_slot, lengths: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The compacting (lengths False) or lengths form of the prefill transform: the cheap-check
    fast path when out and counts are preallocated, else the checked path."""
    if (extend_lens is None and out is not None and counts is not None
            and _fast_compact_ok(page_table, topk_indices, page_size, out, counts, impl, empty_row_slot)
            and _fast_cu_ok(cu_extend_lens, page_table, out)):
        from nsa_policy.runtime import _triton_transforms
        _triton_transforms.launch_transform_compact(page_table, topk_indices, cu_extend_lens, page_size, out,
                                                    counts, empty_row_slot=empty_row_slot, lengths=lengths)
        return out, counts
    _check_inputs(page_table, topk_indices, page_size)
    cu = _cu_for_prefill(page_table, topk_indices, extend_lens, cu_extend_lens)
    return _transform_compact(page_table, topk_indices, cu, page_size, out, counts, impl, empty_row_slot,
                              lengths=lengths)


def _decode_rows(page_table, topk_indices, page_size, out, counts, impl, empty_row_slot,
                 lengths: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Decode form of _prefill_rows (one page-table row per top-k row)."""
    if (out is not None and counts is not None
            and _fast_compact_ok(page_table, topk_indices, page_size, out, counts, impl, empty_row_slot)
            and page_table.shape[0] == topk_indices.shape[0]):
        from nsa_policy.runtime import _triton_transforms
        _triton_transforms.launch_transform_compact(page_table, topk_indices, None, page_size, out, counts,
                                                    empty_row_slot=empty_row_slot, lengths=lengths)
        return out, counts
    _check_inputs(page_table, topk_indices, page_size)
    if page_table.shape[0] != topk_indices.shape[0]:
        raise ValueError(f"decode needs one page_table row per topk_indices row, got "
                         f"{page_table.shape[0]} and {topk_indices.shape[0]}")
    return _transform_compact(page_table, topk_indices, None, page_size, out, counts, impl, empty_row_slot,
                              lengths=lengths)


def transform_index_page_table_prefill_compact(
    page_table: torch.Tensor, topk_indices: torch.Tensor, extend_lens: Optional[ExtendLens] = None,
    page_size: int = 1, out: Optional[torch.Tensor] = None, counts: Optional[torch.Tensor] = None, *,
    cu_extend_lens: Optional[torch.Tensor] = None, impl: str = "auto",
    empty_row_slot: Optional[int] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """As the prefill transform, but each row's valid slots are packed first (original order),
    −1 after; returns (packed [T, K] int32, counts [T] int32). With `empty_row_slot`, a row with
    no valid slot becomes [empty_row_slot, −1, …] with count 1 (a dummy token, for kernels that
    cannot take an empty row; sglang 0.5.23's prepare_trtllm_nope_sparse_metadata)."""
    return _prefill_rows(page_table, topk_indices, extend_lens, page_size, out, counts, cu_extend_lens, impl,
                         empty_row_slot, lengths=False)


def transform_index_page_table_decode_compact(
    page_table: torch.Tensor, topk_indices: torch.Tensor, page_size: int = 1,
    out: Optional[torch.Tensor] = None, counts: Optional[torch.Tensor] = None, *, impl: str = "auto",
    empty_row_slot: Optional[int] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Decode form of the compacting transform."""
    return _decode_rows(page_table, topk_indices, page_size, out, counts, impl, empty_row_slot, lengths=False)


def transform_index_page_table_prefill_lengths(
    page_table: torch.Tensor, topk_indices: torch.Tensor, extend_lens: Optional[ExtendLens] = None,
    page_size: int = 1, out: Optional[torch.Tensor] = None, lengths: Optional[torch.Tensor] = None, *,
    cu_extend_lens: Optional[torch.Tensor] = None, impl: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """The prefill transform's slots, each in its place (−1 where unused), and per row the last
    valid position + 1: for a kernel that takes a length per row and skips −1 within it
    (FlashMLA's topk_length). On rows with their valid entries first, which is how sglang's
    indexer writes them, the length is the count and the kernel does exactly the packed work,
    without the compaction's prefix scan (128 × 2048 on the H200: runtime_h200_run9)."""
    return _prefill_rows(page_table, topk_indices, extend_lens, page_size, out, lengths, cu_extend_lens, impl,
                         None, lengths=True)


def transform_index_page_table_decode_lengths(
    page_table: torch.Tensor, topk_indices: torch.Tensor, page_size: int = 1,
    out: Optional[torch.Tensor] = None, lengths: Optional[torch.Tensor] = None, *, impl: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Decode form of transform_index_page_table_prefill_lengths."""
    return _decode_rows(page_table, topk_indices, page_size, out, lengths, impl, None, lengths=True)


def transform_into_csr(
    page_table: torch.Tensor, topk_indices: torch.Tensor, cu_extend_lens: Optional[torch.Tensor],
    page_size: int, kv_indptr: torch.Tensor, kv_indices: torch.Tensor, *, pad_slot: int = 0,
    counts: Optional[torch.Tensor] = None, impl: str = "auto",
) -> torch.Tensor:
    """Fused transform + compaction into a planned CSR index buffer (the FA3 path): row t's valid
    slots go to kv_indices[kv_indptr[t] : kv_indptr[t+1]]. `cu_extend_lens` None = decode rows.
    Only kv_indices is written, so a plan built on kv_indptr stays valid for every layer."""
    _check_inputs(page_table, topk_indices, page_size)
    if kv_indptr.dim() != 1 or kv_indptr.numel() != topk_indices.shape[0] + 1:
        raise ValueError(f"kv_indptr must hold topk_indices rows + 1 ({topk_indices.shape[0] + 1}) "
                         f"offsets, got shape {tuple(kv_indptr.shape)}")
    if kv_indices.dim() != 1 or kv_indices.dtype != torch.int32:
        raise ValueError(f"kv_indices must be a 1-D int32 tensor, got {kv_indices.dtype} "
                         f"{tuple(kv_indices.shape)}")
    if counts is not None:
        counts = _check_out("counts", counts, (topk_indices.shape[0],), topk_indices.device)
    if _resolve_impl(impl, topk_indices.device) == "triton":
        from nsa_policy.runtime import _triton_transforms
        _triton_transforms.launch_transform_compact(page_table, topk_indices, cu_extend_lens, page_size,
                                                    kv_indices, counts, kv_indptr, pad_slot)
        return kv_indices
    req, row_valid = _rows_of(page_table, topk_indices, cu_extend_lens)
    slots, valid = _ref.gather_slots(page_table, topk_indices, req, row_valid, page_size)
    _ref.write_csr(slots, valid, kv_indptr, kv_indices, pad_slot, counts)
    return kv_indices
