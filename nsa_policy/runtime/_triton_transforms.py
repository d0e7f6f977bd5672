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
def _index_ptr(addr, I64: tl.constexpr):
    """A raw device address (an int argument) as a pointer to int64 (I64) or int32 values."""
    return addr.to(tl.pointer_type(tl.int64 if I64 else tl.int32))


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
def _row_slots(topk_ptr, topk_stride, t, cols, K, row_len, row_ok, page_table_ptr, pt_off,
               PAGE_SIZE: tl.constexpr):
    """(slots, ok, in_k) of row t's top-k entries at `cols`: ok where the entry is a position of
    the row (0 ≤ i < row_len) that maps to a slot; nothing outside the row is dereferenced."""
    in_k = cols < K
    idx = tl.load(topk_ptr + t.to(tl.int64) * topk_stride + cols, mask=in_k, other=-1).to(tl.int64)
    ok = in_k & (idx >= 0) & (idx < row_len) & row_ok
    slot, ok = _lookup_slots(page_table_ptr, pt_off, idx, ok, PAGE_SIZE)
    return slot, ok, in_k


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
    _transform_body(_index_ptr(topk_addr, TOPK_I64), topk_stride, _index_ptr(pt_addr, PT_I64), pt_stride,
                    _index_ptr(cu_addr, CU_I64), _index_ptr(out_addr, False), out_stride,
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
    topk_ptr, pt_ptr = _index_ptr(topk_addr, TOPK_I64), _index_ptr(pt_addr, PT_I64)
    out_ptr = _index_ptr(out_addr, False)
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
    CSR: tl.constexpr, HAS_COUNTS: tl.constexpr, HAS_DUMMY: tl.constexpr, ONE_BLOCK: tl.constexpr,
    LENGTHS: tl.constexpr,
):
    _transform_compact_body(topk_ptr, topk_stride, page_table_ptr, pt_stride, cu_ptr, out_ptr,
                            out_stride, counts_ptr, indptr_ptr, num_reqs, K, row_len, pad_value,
                            dummy_slot, RAGGED, PAGE_SIZE, BLOCK, VECTOR_BLOCK, SEARCH_STEPS, CSR,
                            HAS_COUNTS, HAS_DUMMY, ONE_BLOCK, LENGTHS)


@triton.jit(do_not_specialize=["num_reqs", "row_len", "pad_value", "dummy_slot"])
def _transform_compact_kernel_addr(
    topk_addr, topk_stride, pt_addr, pt_stride, cu_addr, out_addr, out_stride,
    counts_addr, indptr_addr, num_reqs, K, row_len, pad_value, dummy_slot,
    RAGGED: tl.constexpr, PAGE_SIZE: tl.constexpr, BLOCK: tl.constexpr,
    VECTOR_BLOCK: tl.constexpr, SEARCH_STEPS: tl.constexpr,
    CSR: tl.constexpr, HAS_COUNTS: tl.constexpr, HAS_DUMMY: tl.constexpr, ONE_BLOCK: tl.constexpr,
    LENGTHS: tl.constexpr,
    TOPK_I64: tl.constexpr, PT_I64: tl.constexpr, CU_I64: tl.constexpr,
):
    """The compacting kernel on raw device addresses (see _transform_kernel_addr)."""
    _transform_compact_body(_index_ptr(topk_addr, TOPK_I64), topk_stride, _index_ptr(pt_addr, PT_I64),
                            pt_stride, _index_ptr(cu_addr, CU_I64), _index_ptr(out_addr, False), out_stride,
                            _index_ptr(counts_addr, False), _index_ptr(indptr_addr, False), num_reqs, K, row_len,
                            pad_value, dummy_slot, RAGGED, PAGE_SIZE, BLOCK, VECTOR_BLOCK,
                            SEARCH_STEPS, CSR, HAS_COUNTS, HAS_DUMMY, ONE_BLOCK, LENGTHS)


@triton.jit
def _transform_compact_body(
    topk_ptr, topk_stride, page_table_ptr, pt_stride, cu_ptr, out_ptr, out_stride,
    counts_ptr, indptr_ptr, num_reqs, K, row_len, pad_value, dummy_slot,
    RAGGED: tl.constexpr, PAGE_SIZE: tl.constexpr, BLOCK: tl.constexpr,
    VECTOR_BLOCK: tl.constexpr, SEARCH_STEPS: tl.constexpr,
    CSR: tl.constexpr, HAS_COUNTS: tl.constexpr, HAS_DUMMY: tl.constexpr, ONE_BLOCK: tl.constexpr,
    LENGTHS: tl.constexpr,
):
    """Valid slots packed to the front of the row, in their original order.

    CSR False: row t is out[t, :K]; the tail is −1. CSR True: row t is
    out[indptr[t] : indptr[t+1]] (the planned capacity); extra valid slots are dropped and a
    short row is padded with pad_value (an in-bounds KV row) so the attention kernel never
    reads −1. LENGTHS (CSR False, counts given): no packing at all; the slots stay where they
    are (−1 where unused) and counts[t] is the last valid position + 1, for a kernel that takes
    a length per row and skips −1 within it (FlashMLA's topk_length).
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
    if LENGTHS:
        if ONE_BLOCK:  # no loop (see below)
            cols = tl.arange(0, BLOCK)
            slot, ok, in_k = _row_slots(topk_ptr, topk_stride, t, cols, K, row_len, row_ok, page_table_ptr,
                                        pt_off, PAGE_SIZE)
            tl.store(base_ptr + cols, tl.where(ok, slot, -1).to(tl.int32), mask=in_k)
            last = tl.max(tl.where(ok, cols + 1, 0), axis=0)
        else:
            last = t * 0
            for start in range(0, K, BLOCK):
                cols = start + tl.arange(0, BLOCK)
                slot, ok, in_k = _row_slots(topk_ptr, topk_stride, t, cols, K, row_len, row_ok, page_table_ptr,
                                            pt_off, PAGE_SIZE)
                tl.store(base_ptr + cols, tl.where(ok, slot, -1).to(tl.int32), mask=in_k)
                last = tl.maximum(last, tl.max(tl.where(ok, cols + 1, 0), axis=0))
        tl.store(counts_ptr + t, last)
    elif ONE_BLOCK:
        # the whole row in one block (K <= BLOCK), without a loop: measured at 128 × 2048 on the
        # H200 (runtime_h200_run9), the loop, the prefix scan and the scattered stores cost about
        # 1 µs of the ≈ 5 µs the compaction adds in front of an 86 µs kernel
        cols = tl.arange(0, BLOCK)
        slot, ok, in_k = _row_slots(topk_ptr, topk_stride, t, cols, K, row_len, row_ok, page_table_ptr,
                                    pt_off, PAGE_SIZE)
        if CSR:
            # the row fills its planned capacity in place exactly when its first `capacity`
            # entries are valid and none after them is: one int32 sum tells (an entry past the
            # capacity weighs more than a whole row)
            weight = tl.where(ok, tl.where(cols < capacity, 1, 2 * BLOCK), 0)
            in_place = tl.sum(weight, axis=0) == capacity
            count = capacity  # where in place; counted below otherwise
        else:
            # one reduction for two numbers: the count (high word) and the sum of the valid
            # positions (low word); they are 0 … count − 1 exactly when that sum is count·(count − 1)/2
            both = tl.sum(tl.where(ok, cols.to(tl.int64) + (1 << 32), 0), axis=0)
            count64 = both >> 32
            count = count64.to(tl.int32)
            in_place = both - (count64 << 32) == count64 * (count64 - 1) // 2
        if in_place:
            # valid slots already first (how sglang's indexer writes its rows): stored in place
            vals = tl.where(ok, slot, tail)
            if HAS_DUMMY:
                # a row with no valid slot attends to one dummy token (kernels that give NaN
                # otherwise); in the same store, since two stores to one address are not ordered
                vals = tl.where((cols == 0) & (count == 0), dummy_slot, vals)
            tl.store(base_ptr + cols, vals.to(tl.int32), mask=cols < capacity)
        else:
            if CSR:
                count = tl.sum(ok.to(tl.int32), axis=0)
            rank = tl.cumsum(ok.to(tl.int32), axis=0) - 1
            tl.store(base_ptr + rank, slot.to(tl.int32), mask=ok & (rank < capacity))
            tl.store(base_ptr + cols, tl.zeros([BLOCK], dtype=tl.int32) + tail,
                     mask=(cols >= count) & (cols < capacity))
        for start in range(BLOCK, capacity, BLOCK):  # a planned capacity past K (malformed top-k)
            cols = start + tl.arange(0, BLOCK)
            tl.store(base_ptr + cols, tl.zeros([BLOCK], dtype=tl.int32) + tail, mask=cols < capacity)
        if HAS_DUMMY:
            if count == 0:
                count = tl.minimum(capacity, 1)
        if HAS_COUNTS:
            tl.store(counts_ptr + t, count)
    else:
        count = t * 0
        for start in range(0, K, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            slot, ok, in_k = _row_slots(topk_ptr, topk_stride, t, cols, K, row_len, row_ok, page_table_ptr,
                                        pt_off, PAGE_SIZE)
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
# Triton's JIT entry re-binds and re-specialises every argument on every call (≈ 12 µs of host
# time per call on the H200's host, longer than a decode transform runs on the GPU). The first call
# of a shape class goes through it and compiles; the compiled kernel is kept under a key at least as
# fine as Triton's own specialisation (dtypes, 16-byte alignment of every pointer, ints equal to 1 or
# divisible by 16, 64-bit ints), and later calls hand it straight to its launcher's C function.
_knobs = getattr(triton, "knobs", None)
_runtime_knobs = getattr(_knobs, "runtime", None)
_HookChain = getattr(_knobs, "HookChain", None)
_raw_stream: Any = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # absent from CPU-only torch
# The C launch's argument order used below is triton 3.6's (CudaLauncher.__call__), the version
# this was checked on; under any other Triton every launch takes the JIT entry (correct, slower).
_DIRECT_OK = triton.__version__.split(".")[:2] == ["3", "6"]
_MISSING = object()


def _hooks_on() -> bool:
    """Whether a launch hook is installed (a profiler): launches then take Triton's JIT entry, which
    calls it. Triton >= 3.5 keeps the hooks in a HookChain that is never None (an empty chain means
    none), so a plain `is not None` test would send every launch through the JIT entry."""
    if _runtime_knobs is None:
        return False
    for hook in (_runtime_knobs.launch_enter_hook, _runtime_knobs.launch_exit_hook):
        if hook is not None and (type(hook) is not _HookChain or hook.calls):
            return True
    return False


def _direct(compiled: Any) -> Optional[tuple[Any, ...]]:
    """(C launch function, CUfunction, cooperative, pdl, packed metadata) of a compiled kernel, or
    None where it must go through Triton (another Triton version, or a kernel needing scratch
    memory, which the Python launcher allocates per call)."""
    if not _DIRECT_OK:
        return None
    run = compiled.run
    launch = getattr(run, "launch", None)
    scratch = (getattr(run, "global_scratch_size", 1), getattr(run, "profile_scratch_size", 1))
    if launch is None or scratch != (0, 0):
        return None
    return (launch, compiled.function, run.launch_cooperative_grid, run.launch_pdl, compiled.packed_metadata)


# key → _direct(compiled kernel), or None: that key always takes the JIT entry
_COMPILED: dict[tuple[Any, ...], Optional[tuple[Any, ...]]] = {}


def _launch(kernel: Any, key: tuple[Any, ...], grid: tuple[int, int], args: tuple[Any, ...],
            warps: Optional[int], dev: int) -> None:
    entry: Any = _COMPILED.get(key, _MISSING)
    if entry is _MISSING or entry is None or _hooks_on():
        compiled = kernel[grid](*args, num_warps=warps)
        if entry is _MISSING:
            _COMPILED[key] = _direct(compiled)
        return
    assert entry is not None
    launch, function, coop, pdl, meta = entry
    launch(grid[0], grid[1], 1, _raw_stream(dev), function, coop, pdl, None, None, meta, None, None, None,
           *args)


def _arg_key(arg) -> object:
    if isinstance(arg, torch.Tensor):
        return (arg.dtype, arg.data_ptr() % 16 == 0)
    if isinstance(arg, int) and not isinstance(arg, bool):
        return _spec(arg)
    return arg


def _launch_tensors(kernel: Any, grid: tuple[int, int], args: tuple[Any, ...], warps: Optional[int]) -> None:
    """A kernel taking tensor arguments (empty inputs, or addresses=False): keyed on every argument."""
    dev = args[0].get_device()
    _launch(kernel, (kernel, dev, warps, tuple(_arg_key(a) for a in args)), grid, args, warps, dev)


def _spec(x: int) -> int:
    """Triton's specialisation of an int argument: divisible by 16, equal to 1, 64-bit."""
    return (x & 15 == 0) | ((x == 1) << 1) | ((not -(1 << 31) <= x < (1 << 31)) << 2)


_SEARCH: dict[int, tuple[int, int]] = {}


def _search(num_reqs: int) -> tuple[int, int]:
    search = _SEARCH.get(num_reqs)
    if search is None:
        search = _SEARCH[num_reqs] = _search_params(num_reqs)
    return search


def _index_args(topk_indices: torch.Tensor, page_table: torch.Tensor,
                cu_extend_lens: Optional[torch.Tensor]) -> tuple[int, int, int, bool, bool, bool]:
    """Addresses and int64-ness of top-k, page table and cumulative lengths (the table's address
    stands in for absent lengths: never read, RAGGED is off)."""
    ta, pa = topk_indices.data_ptr(), page_table.data_ptr()
    ca = cu_extend_lens.data_ptr() if cu_extend_lens is not None else pa
    return (ta, pa, ca, topk_indices.dtype == torch.int64, page_table.dtype == torch.int64,
            cu_extend_lens is not None and cu_extend_lens.dtype == torch.int64)


def launch_transform(page_table: torch.Tensor, topk_indices: torch.Tensor,
                     cu_extend_lens: Optional[torch.Tensor], page_size: int,
                     out: torch.Tensor, block: Optional[int] = None, warps: Optional[int] = None,
                     addresses: bool = True, vector_search: Optional[bool] = None) -> torch.Tensor:
    num_rows, k = topk_indices.shape
    if num_rows == 0 or k == 0:
        return out
    ragged = cu_extend_lens is not None
    num_reqs = cu_extend_lens.shape[0] - 1 if cu_extend_lens is not None else page_table.shape[0]
    vector_block, steps = _search(num_reqs)
    if vector_search is not None:  # (benchmark variants) force one request search or the other
        vector_block = max(16, triton.next_power_of_2(max(num_reqs, 1))) if vector_search else 0
        steps = 1 if vector_search else max(1, num_reqs.bit_length() + 1)
    if block is None:
        block, warps = _plain_block(k, num_rows, ragged and num_reqs == 1)
    grid = (num_rows, (k + block - 1) // block)
    row_len = page_table.shape[1] * page_size
    if not addresses or page_table.numel() == 0:
        pt = _nonempty(page_table)
        _launch_tensors(_transform_kernel, grid, (
            topk_indices, topk_indices.stride(0), pt, page_table.stride(0),
            cu_extend_lens if ragged else pt, out, out.stride(0),
            num_reqs, k, row_len, ragged, page_size, block, vector_block, steps), warps)
        return out
    ta, pa, ca, t64, p64, c64 = _index_args(topk_indices, page_table, cu_extend_lens)
    oa = out.data_ptr()
    ts, ps, os_ = topk_indices.stride(0), page_table.stride(0), out.stride(0)
    args = (ta, ts, pa, ps, ca, oa, os_, num_reqs, k, row_len, ragged, page_size, block,
            vector_block, steps, t64, p64, c64)
    dev = topk_indices.get_device()
    # num_reqs and row_len are not specialised (do_not_specialize)
    key = ("plain", dev, ragged, page_size, block, vector_block, steps, warps, t64, p64, c64,
           _spec(ta), _spec(ts), _spec(pa), _spec(ps), _spec(ca), _spec(oa), _spec(os_), _spec(k))
    _launch(_transform_kernel_addr, key, grid, args, warps, dev)
    return out


def _compact_block(k: int, num_rows: int, rows_per_request: float) -> tuple[int, int]:
    """(block, warps) of the compacting transform. K = 2048, measured on the H200
    (runtime_h200_run7/mla, compaction alone): whole 2048-wide rows per program, on 16 warps under
    512 rows (128 rows: 9.1 µs against 9.9 at 1024/4) and 8 from 512 rows on (4096 decode rows
    with their own table rows: 63 µs against 78 at 1024/4 and 133 at 256/2); but 256-wide blocks
    on 2 warps when many rows share a request's table row, which then stays in L2 (4096 prefill
    rows of 2 requests: 44 µs against 55 at 2048/8)."""
    if k == 2048:
        if num_rows >= 1024 and rows_per_request >= 256:
            return 256, 2
        return (2048, 16) if num_rows < 512 else (2048, 8)
    return _block_for(min(k, 1024) if k else 16)


def launch_transform_compact(page_table: torch.Tensor, topk_indices: torch.Tensor,
                             cu_extend_lens: Optional[torch.Tensor], page_size: int,
                             out: torch.Tensor, counts: Optional[torch.Tensor],
                             kv_indptr: Optional[torch.Tensor] = None,
                             pad_slot: int = 0, empty_row_slot: Optional[int] = None,
                             block: Optional[int] = None, warps: Optional[int] = None,
                             lengths: bool = False) -> torch.Tensor:
    num_rows, k = topk_indices.shape
    if num_rows == 0:
        return out
    ragged = cu_extend_lens is not None
    num_reqs = cu_extend_lens.numel() - 1 if cu_extend_lens is not None else page_table.shape[0]
    vector_block, steps = _search(num_reqs)
    if block is None:
        block, warps = _compact_block(k, num_rows, num_rows / max(num_reqs, 1) if ragged else 1.0)
    csr = kv_indptr is not None
    row_len = page_table.shape[1] * page_size
    dummy = 0 if empty_row_slot is None else empty_row_slot
    if page_table.numel() == 0 or out.numel() == 0 or k == 0:
        pt, dst = _nonempty(page_table), _nonempty(out)
        _launch_tensors(_transform_compact_kernel, (num_rows, 1), (
            _nonempty(topk_indices), topk_indices.stride(0), pt, page_table.stride(0),
            cu_extend_lens if ragged else pt, dst, out.stride(0) if not csr else 0,
            counts if counts is not None else dst, kv_indptr if csr else dst,
            num_reqs, k, row_len, pad_slot, dummy,
            ragged, page_size, block, vector_block, steps,
            csr, counts is not None, empty_row_slot is not None, k <= block, lengths), warps)
        return out
    ta, pa, ca, t64, p64, c64 = _index_args(topk_indices, page_table, cu_extend_lens)
    oa = out.data_ptr()
    na = counts.data_ptr() if counts is not None else oa
    ia = kv_indptr.data_ptr() if kv_indptr is not None else oa
    ts, ps, os_ = topk_indices.stride(0), page_table.stride(0), (out.stride(0) if not csr else 0)
    has_counts, has_dummy = counts is not None, empty_row_slot is not None
    one_block = k <= block
    args = (ta, ts, pa, ps, ca, oa, os_, na, ia, num_reqs, k, row_len, pad_slot, dummy,
            ragged, page_size, block, vector_block, steps, csr, has_counts, has_dummy, one_block, lengths,
            t64, p64, c64)
    dev = topk_indices.get_device()
    key = ("compact", dev, ragged, page_size, block, vector_block, steps, warps, csr, has_counts, has_dummy,
           one_block, lengths, t64, p64, c64, _spec(ta), _spec(ts), _spec(pa), _spec(ps), _spec(ca), _spec(oa),
           _spec(os_), _spec(na), _spec(ia), _spec(k))
    _launch(_transform_compact_kernel_addr, key, (num_rows, 1), args, warps, dev)
    return out


# ---------------------------------------------------------------- decode fast path
# Host time per eager decode call is what a small decode batch costs (the kernel runs for a few
# µs). Here: cheap checks, a small key, and the compiled kernel's C launch with five runtime
# arguments. Anything unusual returns None and the caller takes the checked general path.
_DECODE: dict[tuple[Any, ...], tuple[Any, ...]] = {}
_Tensor = torch.Tensor
_I32, _I64 = torch.int32, torch.int64
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
    pt_rows, width = page_table.shape
    if rows == 0 or k == 0 or width == 0 or pt_rows != rows:
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
    # what Triton specialises on: dtypes, each address divisible by 16 or not (K is a constexpr;
    # pt_stride and row_len are not specialised)
    key = (dev, k, page_size, rows >= 512, tdt is _I64, pdt is _I64, not ta & 15, not pa & 15, not oa & 15)
    entry = _DECODE.get(key)
    if entry is None or entry[0] is None or _hooks_on():
        block, warps = _plain_block(k, rows, False)
        gy = (k + block - 1) // block
        compiled = _decode_kernel_addr[(rows, gy)](
            ta, pa, oa, pt_stride, row_len, k, page_size, block, tdt is _I64, pdt is _I64,
            num_warps=warps)
        if entry is None:
            direct = _direct(compiled) or (None,) * 5
            _DECODE[key] = (*direct, gy, k, page_size, block, tdt is _I64, pdt is _I64)
        return out
    launch, function, coop, pdl, meta, gy, k_, ps, block, t64, p64 = entry
    launch(rows, gy, 1, _raw_stream(dev), function, coop, pdl, None, None, meta, None, None, None,
           ta, pa, oa, pt_stride, row_len, k_, ps, block, t64, p64)
    return out
