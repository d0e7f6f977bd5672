# mypy: disable-error-code="untyped-decorator,no-untyped-def,no-untyped-call"
# (Triton kernels take untyped tensors/constexprs by design)
"""Top-k → page-table transforms as single Triton launches (CUDA only).

One program per query token (row). The row finds its request on the device from the cumulative
extend lengths (a vector compare for small batches, a binary search for large ones), so the
ragged batch needs no host loop and no host synchronisation; with a preallocated output the
launch is CUDA-graph capturable. Every load is masked: −1, negative or past-the-row indices are
written as −1 and never dereferenced.
"""
from __future__ import annotations

from typing import Any, Optional

import torch
import triton
import triton.language as tl

# Up to this many requests the row compares its token index against all request ends at once
# (one coalesced load); past it, a binary search over the ends.
_VECTOR_SEARCH_MAX = 1024


@triton.jit
def _row_request(cu_ptr, t, num_reqs, RAGGED: tl.constexpr, VECTOR_BLOCK: tl.constexpr,
                 SEARCH_STEPS: tl.constexpr):
    """(request index, whether the row belongs to a request) for query row t."""
    if RAGGED:
        start = tl.load(cu_ptr)
        if VECTOR_BLOCK > 0:
            offs = tl.arange(0, VECTOR_BLOCK)
            ends = tl.load(cu_ptr + 1 + offs, mask=offs < num_reqs, other=0)
            req = tl.sum(((ends <= t) & (offs < num_reqs)).to(tl.int32), axis=0)
        else:
            lo = t * 0
            hi = lo + num_reqs
            for _ in tl.static_range(SEARCH_STEPS):
                active = lo < hi
                mid = (lo + hi) // 2
                end = tl.load(cu_ptr + 1 + mid, mask=active, other=0)
                right = active & (end <= t)
                lo = tl.where(right, mid + 1, lo)
                hi = tl.where(active & (end > t), mid, hi)
            req = lo
        row_ok = (req < num_reqs) & (t >= start)
    else:
        req = t
        row_ok = t >= 0
    return req, row_ok


@triton.jit
def _lookup_slots(page_table_ptr, pt_row_ptr_offset, idx, ok, PAGE_SIZE: tl.constexpr):
    """(slots, ok & mapped) for indices idx (int64) where ok; a negative table entry (an
    unmapped page) is not a slot: it comes back invalid, so it is written as −1."""
    if PAGE_SIZE == 1:
        slot = tl.load(page_table_ptr + pt_row_ptr_offset + idx, mask=ok, other=-1).to(tl.int64)
        mapped = ok & (slot >= 0)
    else:
        page = tl.load(page_table_ptr + pt_row_ptr_offset + idx // PAGE_SIZE, mask=ok, other=-1)
        slot = page.to(tl.int64) * PAGE_SIZE + idx % PAGE_SIZE
        mapped = ok & (page >= 0)
    return slot, mapped


@triton.jit
def _transform_body(
    topk_ptr, topk_stride, page_table_ptr, pt_stride, cu_ptr, out_ptr, out_stride,
    num_reqs, K, row_len,
    RAGGED: tl.constexpr, PAGE_SIZE: tl.constexpr, BLOCK: tl.constexpr,
    VECTOR_BLOCK: tl.constexpr, SEARCH_STEPS: tl.constexpr,
):
    t = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    in_k = cols < K
    req, row_ok = _row_request(cu_ptr, t, num_reqs, RAGGED, VECTOR_BLOCK, SEARCH_STEPS)
    idx = tl.load(topk_ptr + t.to(tl.int64) * topk_stride + cols, mask=in_k, other=-1).to(tl.int64)
    ok = in_k & (idx >= 0) & (idx < row_len) & row_ok
    slot, ok = _lookup_slots(page_table_ptr, req.to(tl.int64) * pt_stride, idx, ok, PAGE_SIZE)
    slot = tl.where(ok, slot, -1)
    tl.store(out_ptr + t.to(tl.int64) * out_stride + cols, slot.to(tl.int32), mask=in_k)


@triton.jit
def _transform_kernel(
    topk_ptr, topk_stride, page_table_ptr, pt_stride, cu_ptr, out_ptr, out_stride,
    num_reqs, K, row_len,
    RAGGED: tl.constexpr, PAGE_SIZE: tl.constexpr, BLOCK: tl.constexpr,
    VECTOR_BLOCK: tl.constexpr, SEARCH_STEPS: tl.constexpr,
):
    _transform_body(topk_ptr, topk_stride, page_table_ptr, pt_stride, cu_ptr, out_ptr, out_stride,
                    num_reqs, K, row_len, RAGGED, PAGE_SIZE, BLOCK, VECTOR_BLOCK, SEARCH_STEPS)


# The same kernel taking raw device addresses (ints): Triton's launcher then reads plain integers
# instead of resolving and checking each tensor argument with the driver, which is most of an
# eager call's host time (measured on the H200, benchmarks/results/runtime_h200_run5/).
@triton.jit(do_not_specialize=["num_reqs", "row_len"])
def _transform_kernel_addr(
    topk_addr, topk_stride, pt_addr, pt_stride, cu_addr, out_addr, out_stride,
    num_reqs, K, row_len,
    RAGGED: tl.constexpr, PAGE_SIZE: tl.constexpr, BLOCK: tl.constexpr,
    VECTOR_BLOCK: tl.constexpr, SEARCH_STEPS: tl.constexpr,
    TOPK_I64: tl.constexpr, PT_I64: tl.constexpr, CU_I64: tl.constexpr,
):
    if TOPK_I64:
        topk_ptr = topk_addr.to(tl.pointer_type(tl.int64))
    else:
        topk_ptr = topk_addr.to(tl.pointer_type(tl.int32))
    if PT_I64:
        pt_ptr = pt_addr.to(tl.pointer_type(tl.int64))
    else:
        pt_ptr = pt_addr.to(tl.pointer_type(tl.int32))
    if CU_I64:
        cu_ptr = cu_addr.to(tl.pointer_type(tl.int64))
    else:
        cu_ptr = cu_addr.to(tl.pointer_type(tl.int32))
    out_ptr = out_addr.to(tl.pointer_type(tl.int32))
    _transform_body(topk_ptr, topk_stride, pt_ptr, pt_stride, cu_ptr, out_ptr, out_stride,
                    num_reqs, K, row_len, RAGGED, PAGE_SIZE, BLOCK, VECTOR_BLOCK, SEARCH_STEPS)


# Decode (one page-table row per top-k row) with contiguous top-k and output rows: the row stride
# is K (a constexpr), so the kernel takes five runtime arguments, as sglang 0.5.23's decode kernel
# does; pt_stride and row_len are not specialised, so one compiled kernel serves every batch.
@triton.jit(do_not_specialize=["pt_stride", "row_len"])
def _decode_kernel_addr(
    topk_addr, pt_addr, out_addr, pt_stride, row_len,
    K: tl.constexpr, PAGE_SIZE: tl.constexpr, BLOCK: tl.constexpr,
    TOPK_I64: tl.constexpr, PT_I64: tl.constexpr,
):
    if TOPK_I64:
        topk_ptr = topk_addr.to(tl.pointer_type(tl.int64))
    else:
        topk_ptr = topk_addr.to(tl.pointer_type(tl.int32))
    if PT_I64:
        pt_ptr = pt_addr.to(tl.pointer_type(tl.int64))
    else:
        pt_ptr = pt_addr.to(tl.pointer_type(tl.int32))
    out_ptr = out_addr.to(tl.pointer_type(tl.int32))
    t = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    in_k = cols < K
    idx = tl.load(topk_ptr + t * K + cols, mask=in_k, other=-1).to(tl.int64)
    ok = in_k & (idx >= 0) & (idx < row_len)
    slot, ok = _lookup_slots(pt_ptr, t * pt_stride, idx, ok, PAGE_SIZE)
    tl.store(out_ptr + t * K + cols, tl.where(ok, slot, -1).to(tl.int32), mask=in_k)


@triton.jit
def _transform_compact_kernel(
    topk_ptr, topk_stride, page_table_ptr, pt_stride, cu_ptr, out_ptr, out_stride,
    counts_ptr, indptr_ptr, num_reqs, K, row_len, pad_value, dummy_slot,
    RAGGED: tl.constexpr, PAGE_SIZE: tl.constexpr, BLOCK: tl.constexpr,
    VECTOR_BLOCK: tl.constexpr, SEARCH_STEPS: tl.constexpr,
    CSR: tl.constexpr, HAS_COUNTS: tl.constexpr, HAS_DUMMY: tl.constexpr,
):
    _transform_compact_body(topk_ptr, topk_stride, page_table_ptr, pt_stride, cu_ptr, out_ptr,
                            out_stride, counts_ptr, indptr_ptr, num_reqs, K, row_len, pad_value,
                            dummy_slot, RAGGED, PAGE_SIZE, BLOCK, VECTOR_BLOCK, SEARCH_STEPS, CSR,
                            HAS_COUNTS, HAS_DUMMY)


@triton.jit(do_not_specialize=["num_reqs", "row_len", "pad_value", "dummy_slot"])
def _transform_compact_kernel_addr(
    topk_addr, topk_stride, pt_addr, pt_stride, cu_addr, out_addr, out_stride,
    counts_addr, indptr_addr, num_reqs, K, row_len, pad_value, dummy_slot,
    RAGGED: tl.constexpr, PAGE_SIZE: tl.constexpr, BLOCK: tl.constexpr,
    VECTOR_BLOCK: tl.constexpr, SEARCH_STEPS: tl.constexpr,
    CSR: tl.constexpr, HAS_COUNTS: tl.constexpr, HAS_DUMMY: tl.constexpr,
    TOPK_I64: tl.constexpr, PT_I64: tl.constexpr, CU_I64: tl.constexpr,
):
    """The compacting kernel on raw device addresses (see _transform_kernel_addr)."""
    if TOPK_I64:
        topk_ptr = topk_addr.to(tl.pointer_type(tl.int64))
    else:
        topk_ptr = topk_addr.to(tl.pointer_type(tl.int32))
    if PT_I64:
        pt_ptr = pt_addr.to(tl.pointer_type(tl.int64))
    else:
        pt_ptr = pt_addr.to(tl.pointer_type(tl.int32))
    if CU_I64:
        cu_ptr = cu_addr.to(tl.pointer_type(tl.int64))
    else:
        cu_ptr = cu_addr.to(tl.pointer_type(tl.int32))
    _transform_compact_body(topk_ptr, topk_stride, pt_ptr, pt_stride, cu_ptr,
                            out_addr.to(tl.pointer_type(tl.int32)), out_stride,
                            counts_addr.to(tl.pointer_type(tl.int32)),
                            indptr_addr.to(tl.pointer_type(tl.int32)), num_reqs, K, row_len,
                            pad_value, dummy_slot, RAGGED, PAGE_SIZE, BLOCK, VECTOR_BLOCK,
                            SEARCH_STEPS, CSR, HAS_COUNTS, HAS_DUMMY)


@triton.jit
def _transform_compact_body(
    topk_ptr, topk_stride, page_table_ptr, pt_stride, cu_ptr, out_ptr, out_stride,
    counts_ptr, indptr_ptr, num_reqs, K, row_len, pad_value, dummy_slot,
    RAGGED: tl.constexpr, PAGE_SIZE: tl.constexpr, BLOCK: tl.constexpr,
    VECTOR_BLOCK: tl.constexpr, SEARCH_STEPS: tl.constexpr,
    CSR: tl.constexpr, HAS_COUNTS: tl.constexpr, HAS_DUMMY: tl.constexpr,
):
    """Valid slots packed to the front of the row, in their original order.

    CSR False: row t is out[t, :K]; the tail is −1. CSR True: row t is
    out[indptr[t] : indptr[t+1]] (the planned capacity); extra valid slots are dropped and a
    short row is padded with pad_value (an in-bounds KV row) so the attention kernel never
    reads −1.
    """
    t = tl.program_id(0)
    req, row_ok = _row_request(cu_ptr, t, num_reqs, RAGGED, VECTOR_BLOCK, SEARCH_STEPS)
    pt_off = req.to(tl.int64) * pt_stride
    if CSR:
        base_ptr = out_ptr + tl.load(indptr_ptr + t).to(tl.int64)
        capacity = (tl.load(indptr_ptr + t + 1) - tl.load(indptr_ptr + t)).to(tl.int32)
        tail = pad_value
    else:
        base_ptr = out_ptr + t.to(tl.int64) * out_stride
        capacity = K
        tail = -1
    count = t * 0
    for start in range(0, K, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        in_k = cols < K
        idx = tl.load(topk_ptr + t.to(tl.int64) * topk_stride + cols, mask=in_k, other=-1).to(tl.int64)
        ok = in_k & (idx >= 0) & (idx < row_len) & row_ok
        slot, ok = _lookup_slots(page_table_ptr, pt_off, idx, ok, PAGE_SIZE)
        flags = ok.to(tl.int32)
        rank = count + tl.cumsum(flags, axis=0) - 1
        tl.store(base_ptr + rank, slot.to(tl.int32), mask=ok & (rank < capacity))
        count += tl.sum(flags, axis=0)
    if HAS_DUMMY:
        # a row with no valid slot attends to one dummy token (kernels that give NaN otherwise)
        if count == 0:
            tl.store(base_ptr, (t * 0 + dummy_slot).to(tl.int32), mask=capacity > 0)
            count = tl.minimum(capacity, 1)
    if HAS_COUNTS:
        tl.store(counts_ptr + t, count)
    for start in range(count, capacity, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        tl.store(base_ptr + cols, tl.zeros([BLOCK], dtype=tl.int32) + tail, mask=cols < capacity)


def _nonempty(t: torch.Tensor) -> torch.Tensor:
    """An empty tensor has no storage to point at; give the kernel a one-element stand-in
    (every access through it is masked off, since the row length / capacity is 0)."""
    return t if t.numel() else torch.zeros(1, dtype=t.dtype, device=t.device)


def _search_params(num_reqs: int) -> tuple[int, int]:
    if num_reqs <= _VECTOR_SEARCH_MAX:
        return max(16, triton.next_power_of_2(max(num_reqs, 1))), 1
    return 0, max(1, num_reqs.bit_length() + 1)


# (block, warps) of the plain transform by K; a program covers one row's block.
BLOCK_FOR_K = {2048: (2048, 8)}


def _plain_block(k: int, num_rows: int, one_request: bool) -> tuple[int, int]:
    """K = 2048, measured on the H200 (runtime_h200_run5): whole rows per program, except that
    few rows (small decode batches) and a single request's rows (its page-table row stays in L2)
    run faster as more, smaller programs."""
    if k == 2048:
        if one_request:
            return 512, 4
        if num_rows < 512:
            return 1024, 8
        return 2048, 8
    return _block_for(k)


def _block_for(k: int) -> tuple[int, int]:
    if k in BLOCK_FOR_K:
        return BLOCK_FOR_K[k]
    block = min(2048, max(16, triton.next_power_of_2(max(k, 1))))
    return block, (8 if block >= 2048 else 4)


# ---------------------------------------------------------------- launching
# Triton's JIT entry re-binds and re-specialises every argument on every call (tens of µs of
# host time, longer than a decode transform runs on the GPU). The first call of a shape class
# goes through it and compiles; the compiled kernel is kept under a key at least as fine as
# Triton's own specialisation (dtypes, 16-byte alignment of every pointer, ints equal to 1 or
# divisible by 16, 64-bit ints), and later calls launch it directly.
_COMPILED: dict[tuple[Any, ...], Any] = {}
_knobs = getattr(triton, "knobs", None)


def _arg_key(arg) -> object:
    if isinstance(arg, torch.Tensor):
        return (arg.dtype, arg.data_ptr() % 16 == 0)
    if isinstance(arg, int) and not isinstance(arg, bool):
        return (arg == 1, arg % 16 == 0, -(1 << 31) <= arg < (1 << 31))
    return arg


def _launch(kernel: Any, grid: tuple[int, ...], args: tuple[Any, ...], num_warps: Optional[int]) -> None:
    key = (kernel, grid.__len__(), num_warps, tuple(_arg_key(a) for a in args), args[0].device.index)
    compiled = _COMPILED.get(key)
    hooks = _knobs is not None and _knobs.runtime.launch_enter_hook is not None
    if compiled is None or hooks:
        compiled = kernel[grid](*args, num_warps=num_warps)
        if not hooks:
            _COMPILED[key] = compiled
        return
    stream = torch._C._cuda_getCurrentRawStream(args[0].device.index)
    gx = grid[0]
    gy = grid[1] if len(grid) > 1 else 1
    compiled.run(gx, gy, 1, stream, compiled.function, compiled.packed_metadata, None, None, None, *args)


def _spec(x: int) -> int:
    """Triton's specialisation of an int argument: divisible by 16, equal to 1, 64-bit."""
    return (x & 15 == 0) | ((x == 1) << 1) | ((not -(1 << 31) <= x < (1 << 31)) << 2)


_SEARCH: dict[int, tuple[int, int]] = {}


def launch_transform(page_table: torch.Tensor, topk_indices: torch.Tensor,
                     cu_extend_lens: Optional[torch.Tensor], page_size: int,
                     out: torch.Tensor, block: Optional[int] = None, warps: Optional[int] = None,
                     addresses: bool = True) -> torch.Tensor:
    num_rows, k = topk_indices.shape
    if num_rows == 0 or k == 0:
        return out
    ragged = cu_extend_lens is not None
    num_reqs = cu_extend_lens.shape[0] - 1 if cu_extend_lens is not None else page_table.shape[0]
    search = _SEARCH.get(num_reqs)
    if search is None:
        search = _SEARCH[num_reqs] = _search_params(num_reqs)
    vector_block, steps = search
    if block is None:
        block, warps = _plain_block(k, num_rows, ragged and num_reqs == 1)
    grid = (num_rows, (k + block - 1) // block)
    row_len = page_table.shape[1] * page_size
    if not addresses or page_table.numel() == 0:
        pt = _nonempty(page_table)
        _launch(_transform_kernel, grid, (
            topk_indices, topk_indices.stride(0), pt, page_table.stride(0),
            cu_extend_lens if ragged else pt, out, out.stride(0),
            num_reqs, k, row_len, ragged, page_size, block, vector_block, steps), warps)
        return out
    ta, pa, oa = topk_indices.data_ptr(), page_table.data_ptr(), out.data_ptr()
    ca = cu_extend_lens.data_ptr() if cu_extend_lens is not None else pa
    ts, ps, os_ = topk_indices.stride(0), page_table.stride(0), out.stride(0)
    t64 = topk_indices.dtype == torch.int64
    p64 = page_table.dtype == torch.int64
    c64 = cu_extend_lens is not None and cu_extend_lens.dtype == torch.int64
    args = (ta, ts, pa, ps, ca, oa, os_, num_reqs, k, row_len, ragged, page_size, block,
            vector_block, steps, t64, p64, c64)
    # a key at least as fine as Triton's specialisation of these arguments
    dev = topk_indices.get_device()
    key = ("plain", dev, ragged, page_size, block, vector_block, steps, warps, t64, p64, c64,
           _spec(ta), _spec(ts), _spec(pa), _spec(ps), _spec(ca), _spec(oa), _spec(os_), _spec(k))
    compiled = _COMPILED_ADDR.get(key)
    if compiled is None or (_knobs is not None and _knobs.runtime.launch_enter_hook is not None):
        compiled = _transform_kernel_addr[grid](*args, num_warps=warps)
        _COMPILED_ADDR[key] = compiled
        return out
    compiled.run(grid[0], grid[1], 1, torch._C._cuda_getCurrentRawStream(dev),
                 compiled.function, compiled.packed_metadata, None, None, None, *args)
    return out


_COMPILED_ADDR: dict[tuple[Any, ...], Any] = {}


def launch_transform_compact(page_table: torch.Tensor, topk_indices: torch.Tensor,
                             cu_extend_lens: Optional[torch.Tensor], page_size: int,
                             out: torch.Tensor, counts: Optional[torch.Tensor],
                             kv_indptr: Optional[torch.Tensor] = None,
                             pad_slot: int = 0, empty_row_slot: Optional[int] = None) -> torch.Tensor:
    num_rows, k = topk_indices.shape
    if num_rows == 0:
        return out
    ragged = cu_extend_lens is not None
    num_reqs = cu_extend_lens.numel() - 1 if cu_extend_lens is not None else page_table.shape[0]
    search = _SEARCH.get(num_reqs)
    if search is None:
        search = _SEARCH[num_reqs] = _search_params(num_reqs)
    vector_block, steps = search
    block, warps = _block_for(min(k, 1024) if k else 16)
    csr = kv_indptr is not None
    row_len = page_table.shape[1] * page_size
    dummy = 0 if empty_row_slot is None else empty_row_slot
    if page_table.numel() == 0 or out.numel() == 0 or k == 0:
        pt, dst = _nonempty(page_table), _nonempty(out)
        _launch(_transform_compact_kernel, (num_rows,), (
            _nonempty(topk_indices), topk_indices.stride(0), pt, page_table.stride(0),
            cu_extend_lens if ragged else pt, dst, out.stride(0) if not csr else 0,
            counts if counts is not None else dst, kv_indptr if csr else dst,
            num_reqs, k, row_len, pad_slot, dummy,
            ragged, page_size, block, vector_block, steps,
            csr, counts is not None, empty_row_slot is not None), warps)
        return out
    ta, pa, oa = topk_indices.data_ptr(), page_table.data_ptr(), out.data_ptr()
    ca = cu_extend_lens.data_ptr() if cu_extend_lens is not None else pa
    na = counts.data_ptr() if counts is not None else oa
    ia = kv_indptr.data_ptr() if kv_indptr is not None else oa
    ts, ps, os_ = topk_indices.stride(0), page_table.stride(0), (out.stride(0) if not csr else 0)
    t64 = topk_indices.dtype == torch.int64
    p64 = page_table.dtype == torch.int64
    c64 = cu_extend_lens is not None and cu_extend_lens.dtype == torch.int64
    has_counts, has_dummy = counts is not None, empty_row_slot is not None
    args = (ta, ts, pa, ps, ca, oa, os_, na, ia, num_reqs, k, row_len, pad_slot, dummy,
            ragged, page_size, block, vector_block, steps, csr, has_counts, has_dummy, t64, p64, c64)
    dev = topk_indices.get_device()
    key = ("compact", dev, ragged, page_size, block, vector_block, steps, warps, csr, has_counts, has_dummy,
           t64, p64, c64, _spec(ta), _spec(ts), _spec(pa), _spec(ps), _spec(ca), _spec(oa),
           _spec(os_), _spec(na), _spec(ia), _spec(k))
    compiled = _COMPILED_ADDR.get(key)
    if compiled is None or (_knobs is not None and _knobs.runtime.launch_enter_hook is not None):
        _COMPILED_ADDR[key] = _transform_compact_kernel_addr[(num_rows,)](*args, num_warps=warps)
        return out
    compiled.run(num_rows, 1, 1, torch._C._cuda_getCurrentRawStream(dev), compiled.function,
                 compiled.packed_metadata, None, None, None, *args)
    return out


# ---------------------------------------------------------------- decode fast path
# Host time per eager decode call is what a small decode batch costs (the kernel runs for a few
# µs). Here: cheap checks, a small key, the compiled kernel launched directly with five runtime
# arguments. Anything unusual returns None and the caller takes the checked general path.
_DECODE: dict[tuple[Any, ...], tuple[Any, ...]] = {}
_Tensor = torch.Tensor
_I32, _I64 = torch.int32, torch.int64
_raw_stream = torch._C._cuda_getCurrentRawStream
_runtime_knobs = getattr(_knobs, "runtime", None)
_I32_MAX = (1 << 31) - 1


def launch_decode(page_table, topk_indices, page_size, out):
    """out[r, j] = slot of topk_indices[r, j] in page_table row r (−1 where unused); or None when
    the inputs are not the plain case (then nothing was launched)."""
    if type(page_table) is not _Tensor or type(out) is not _Tensor or type(page_size) is not int:
        return None
    shape = topk_indices.shape
    if len(shape) != 2 or out.shape != shape or page_table.dim() != 2 or page_size < 1:
        return None
    rows, k = shape
    width = page_table.shape[1]
    if rows == 0 or k == 0 or width == 0 or page_table.shape[0] != rows:
        return None
    tdt, pdt = topk_indices.dtype, page_table.dtype
    if out.dtype is not _I32 or (tdt is not _I32 and tdt is not _I64) or (pdt is not _I32 and pdt is not _I64):
        return None
    if not (topk_indices.is_contiguous() and out.is_contiguous()) or page_table.stride(1) != 1:
        return None
    dev = topk_indices.get_device()
    if dev < 0 or page_table.get_device() != dev or out.get_device() != dev:
        return None
    pt_stride, row_len = page_table.stride(0), width * page_size
    if pt_stride > _I32_MAX or row_len > _I32_MAX:
        return None
    ta, pa, oa = topk_indices.data_ptr(), page_table.data_ptr(), out.data_ptr()
    key = (dev, k, page_size, rows >= 512, tdt is _I64, pdt is _I64, not ta & 15, not pa & 15, not oa & 15)
    entry = _DECODE.get(key)
    if entry is None or (_runtime_knobs is not None and _runtime_knobs.launch_enter_hook is not None):
        block, warps = _plain_block(k, rows, False)
        compiled = _decode_kernel_addr[(rows, (k + block - 1) // block)](
            ta, pa, oa, pt_stride, row_len, k, page_size, block, tdt is _I64, pdt is _I64,
            num_warps=warps)
        # the key holds what Triton specialises on: dtypes, each address divisible by 16 or not
        _DECODE[key] = (compiled.run, compiled.function, compiled.packed_metadata,
                        (k + block - 1) // block, k, page_size, block, tdt is _I64, pdt is _I64)
        return out
    run, function, meta, gy, k_, ps, block, t64, p64 = entry
    run(rows, gy, 1, _raw_stream(dev), function, meta, None, None, None,
        ta, pa, oa, pt_stride, row_len, k_, ps, block, t64, p64)
    return out
