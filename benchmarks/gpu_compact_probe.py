# mypy: disable-error-code="untyped-decorator,no-untyped-def,no-untyped-call"
"""Where the adapter's time goes at FlashMLA 128 × 128 (issue 12, item 3): the top-k → slot
compaction in front of the kernel, against the floor of any second launch.

Every path below is a function timed call by call in turns (bench_interleaved: L2 flushed before
each call, one event pair around the call), the same 128 × 128 × 2048 batch as bench_runtime's
MLA part (1M-token bf16 pool in random 64-token pages, two requests, sglang-shaped rows):
- bare: flash_mla_sparse_fwd on packed slots with topk_length (the bare kernel of run 8);
- adapter_*: SparseMLAAdapter.prefill, q already in its query_buffer, block table / token table;
- <transform> + kernel: the compaction variant, then the same kernel call on its output;
- empty + kernel: an empty Triton launch, then the kernel (the floor of any one-launch transform).
Experimental kernels live here; what wins moves into nsa_policy/runtime/_triton_transforms.py.

--context N gives the second request N tokens of KV instead of the whole pool (131072: the 128k
context of RUNTIME.md's decode shape; DeepSeek-V3.2 serves at most 163840), so its token-table row
is 512 KB instead of 4 MB.

Usage (GPU machine): python3 benchmarks/gpu_compact_probe.py --out DIR [--context N]
"""
from __future__ import annotations

import argparse
import json
import pathlib

import torch
import triton
import triton.language as tl
from runtime_bench_common import (
    bench_interleaved,
    cold_graph_times,
    decision,
    environment,
    import_runtime,
    median,
    mla_pool,
    sglang_shaped_rows,
    warm_up_clocks,
)

from nsa_policy.runtime import _triton_transforms as tt
from nsa_policy.runtime._triton_transforms import _lookup_slots, _row_request

K, PAGE, T, HEADS = 2048, 64, 128, 128


@triton.jit
def _empty(out_ptr):
    pass


@triton.jit
def _compact_variant(topk_ptr, pt_ptr, pt_stride, cu_ptr, out_ptr, counts_ptr, indptr_ptr, num_reqs, row_len,
                     K: tl.constexpr, PAGE_SIZE: tl.constexpr, VECTOR_BLOCK: tl.constexpr,
                     FILL_TAIL: tl.constexpr, PREFIX_LEN: tl.constexpr, CSR: tl.constexpr):
    """One program per row, the whole row at once (no loop). FILL_TAIL: −1 after the packed slots
    (the library kernel does); PREFIX_LEN: no packing at all, slots stay in place and the length is
    the last valid position + 1 (equal to the count on sglang-shaped rows, valid first); CSR: the
    packed slots go to out[indptr[t]:], no tail (capacity = count on these rows)."""
    t = tl.program_id(0)
    cols = tl.arange(0, K)
    req, row_ok = _row_request(cu_ptr, t, num_reqs, True, VECTOR_BLOCK, 1)
    idx = tl.load(topk_ptr + t.to(tl.int64) * K + cols).to(tl.int64)
    ok = (idx >= 0) & (idx < row_len) & row_ok
    slot, ok = _lookup_slots(pt_ptr, req.to(tl.int64) * pt_stride, idx, ok, PAGE_SIZE)
    if CSR:
        base = out_ptr + tl.load(indptr_ptr + t).to(tl.int64)
    else:
        base = out_ptr + t.to(tl.int64) * K
    if PREFIX_LEN:
        tl.store(base + cols, tl.where(ok, slot, -1).to(tl.int32))
        tl.store(counts_ptr + t, tl.max(tl.where(ok, cols + 1, 0), axis=0))
    else:
        flags = ok.to(tl.int32)
        rank = tl.cumsum(flags, axis=0) - 1
        tl.store(base + rank, slot.to(tl.int32), mask=ok)
        count = tl.sum(flags, axis=0)
        if not CSR:
            tl.store(counts_ptr + t, count)
        if FILL_TAIL:
            tl.store(base + cols, tl.full([K], -1, tl.int32), mask=cols >= count)


@triton.jit
def _as_ptr(addr, ALIGNED: tl.constexpr):
    p = addr.to(tl.pointer_type(tl.int32))
    if ALIGNED:
        p = tl.multiple_of(p, 16)
    return p


@triton.jit
def _compact_variant_addr(topk_addr, pt_addr, pt_stride, cu_addr, out_addr, counts_addr, indptr_addr, num_reqs,
                          row_len, K: tl.constexpr, PAGE_SIZE: tl.constexpr, VECTOR_BLOCK: tl.constexpr,
                          FILL_TAIL: tl.constexpr, PREFIX_LEN: tl.constexpr, CSR: tl.constexpr,
                          ALIGNED: tl.constexpr):
    """The same on raw addresses (as the library's launches pass them); ALIGNED: the pointers are
    declared 16-byte aligned (tl.multiple_of), so row loads and stores can be vectorised."""
    _compact_variant(_as_ptr(topk_addr, ALIGNED), _as_ptr(pt_addr, ALIGNED), pt_stride, _as_ptr(cu_addr, ALIGNED),
                     _as_ptr(out_addr, ALIGNED), _as_ptr(counts_addr, ALIGNED), _as_ptr(indptr_addr, ALIGNED),
                     num_reqs, row_len, K, PAGE_SIZE, VECTOR_BLOCK, FILL_TAIL, PREFIX_LEN, CSR)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--context", type=int, default=0,
                    help="the second request's KV length (default: the whole 1M-token pool, as bench_runtime)")
    args = ap.parse_args()
    out_dir = pathlib.Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    rt, note = import_runtime()
    import flash_mla

    warm_up_clocks(torch)
    gen = torch.Generator(device="cuda").manual_seed(1)
    pool = 1 << 20
    scale = rt.softmax_scale_for(128, 64, 40.0, 1.0)
    kv, pages, page_table = mla_pool(torch, gen, pool, PAGE)
    rows3 = kv.view(-1, 1, 576)
    q = torch.randn(T, HEADS, 576, generator=gen, device="cuda").to(torch.bfloat16)
    topk, table, block_table, extend, seq = sglang_shaped_rows(torch, gen, T, K, pages, page_table, PAGE,
                                                               args.context)
    half = T // 2
    packed, counts = rt.transform_index_page_table_prefill_compact(table, topk, extend, impl="triton")
    fm_in = dict(q=q, kv=rows3, sm_scale=scale, d_v=512, use_legacy=True, return_log2_lse=False)

    def kernel(slots, lens):
        return flash_mla.flash_mla_sparse_fwd(indices=slots.unsqueeze(1), topk_length=lens, **fm_in)[0]

    adapters = {}
    for name, tps, tbl in (("block64", PAGE, block_table), ("token", 1, table)):
        ad = rt.SparseMLAAdapter.from_decision(
            decision(prefill_backend="flashmla_sparse", decode_backend="fa3"), device="cuda",
            softmax_scale=scale, num_heads=HEADS, phases=("prefill",), table_page_size=tps)
        plan = ad.plan_prefill(extend, seq)
        buf = ad.query_buffer(plan)
        buf.copy_(q)
        adapters[name] = (ad, plan, buf, tbl)

    cu = torch.tensor([0, half, T], dtype=torch.int32, device="cuda")
    bufs = {}

    def variant(name, tbl, page, warps, fill_tail=True, prefix_len=False, addr=None):
        """addr None: tensor arguments; False / True: raw addresses without / with the alignment hint."""
        out = torch.empty_like(packed)
        lens = torch.empty_like(counts)
        bufs[name] = (out, lens, prefix_len)
        row_len = tbl.shape[1] * page
        if addr is None:
            def launch():
                _compact_variant[(T,)](topk, tbl, tbl.stride(0), cu, out, lens, cu, 2, row_len, K, page, 16,
                                       fill_tail, prefix_len, False, num_warps=warps)
        else:
            a = (topk.data_ptr(), tbl.data_ptr(), tbl.stride(0), cu.data_ptr(), out.data_ptr(), lens.data_ptr(),
                 cu.data_ptr(), 2, row_len)

            def launch():
                _compact_variant_addr[(T,)](*a, K, page, 16, fill_tail, prefix_len, False, addr, num_warps=warps)

        def run():
            launch()
            return kernel(out, lens)
        return run

    dummy = torch.empty(1, device="cuda")
    ad64, plan64, buf64, _ = adapters["block64"]
    pk, pc = torch.empty_like(packed), torch.empty_like(counts)
    fns = {
        "bare": lambda: kernel(packed, counts),
        "adapter_block64": lambda: ad64.prefill(buf64, kv, topk, block_table, plan64),
        "adapter_token": lambda a=adapters["token"]: a[0].prefill(a[2], kv, topk, a[3], a[1]),
        "empty+kernel": lambda: (_empty[(T,)](dummy, num_warps=4), kernel(packed, counts))[1],
        "lib_compact_b64+kernel": lambda: (tt.launch_transform_compact(block_table, topk, cu, PAGE, pk, pc),
                                           kernel(pk, pc))[1],
        "straight_tensor_b64+kernel": variant("st", block_table, PAGE, 16),
        "straight_addr_b64+kernel": variant("sa", block_table, PAGE, 16, addr=False),
        "straight_addr_hint_b64+kernel": variant("sah", block_table, PAGE, 16, addr=True),
        "prefixlen_tensor_b64+kernel": variant("pt", block_table, PAGE, 16, prefix_len=True),
        "prefixlen_addr_b64+kernel": variant("pa", block_table, PAGE, 16, prefix_len=True, addr=False),
        "prefixlen_addr_hint_b64+kernel": variant("pah", block_table, PAGE, 16, prefix_len=True, addr=True),
        "prefixlen_addr_hint8_b64+kernel": variant("pah8", block_table, PAGE, 8, prefix_len=True, addr=True),
        "prefixlen_addr_hint_tok+kernel": variant("paht", table, 1, 16, prefix_len=True, addr=True),
    }
    # FA3 (flashinfer paged MLA): bare on the exact CSR, the adapter, and the one-block CSR kernel
    import flashinfer

    fa = rt.SparseMLAAdapter.from_decision(decision(), device="cuda", softmax_scale=scale, num_heads=HEADS,
                                           prefill_backend="fa3", phases=("prefill",), table_page_size=PAGE)
    fa_plan = fa.plan_prefill(extend, seq)
    ckv, kpe = rows3[..., :512], rows3[..., 512:]
    q_nope, q_pe = q[..., :512], q[..., 512:]
    bare_fa = flashinfer.mla.BatchMLAPagedAttentionWrapper(
        torch.empty(128 << 20, dtype=torch.int8, device="cuda"), backend="fa3")
    indptr = torch.zeros(T + 1, dtype=torch.int32, device="cuda")
    torch.cumsum(counts, 0, out=indptr[1:])
    bare_fa.plan(qo_indptr=torch.arange(T + 1, dtype=torch.int32, device="cuda"), kv_indptr=indptr,
                 kv_indices=packed[packed >= 0], kv_len_arr=counts, num_heads=HEADS, head_dim_ckv=512,
                 head_dim_kpe=64, page_size=1, causal=False, sm_scale=scale,
                 q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
    assert torch.equal(fa_plan.kv_indptr, indptr)  # the plan's capacities are the counts here
    csr_args = (topk.data_ptr(), block_table.data_ptr(), block_table.stride(0), cu.data_ptr(),
                fa_plan.kv_indices.data_ptr(), counts.data_ptr(), fa_plan.kv_indptr.data_ptr(), 2,
                block_table.shape[1] * PAGE)

    def fa3_straight():
        _compact_variant_addr[(T,)](*csr_args, K, PAGE, 16, False, False, True, True, num_warps=16)
        return fa_plan.wrapper.run(q_nope=q_nope, q_pe=q_pe, ckv_cache=ckv, kpe_cache=kpe)

    fa_tok = rt.SparseMLAAdapter.from_decision(decision(), device="cuda", softmax_scale=scale, num_heads=HEADS,
                                               prefill_backend="fa3", phases=("prefill",))
    fa_tok_plan = fa_tok.plan_prefill(extend, seq)
    fa_fns = {
        "fa3_bare": lambda: bare_fa.run(q_nope=q_nope, q_pe=q_pe, ckv_cache=ckv, kpe_cache=kpe),
        "fa3_adapter_b64": lambda: fa.prefill(q, kv, topk, block_table, fa_plan),
        "fa3_adapter_token": lambda: fa_tok.prefill(q, kv, topk, table, fa_tok_plan),
        "fa3_straight_addr_hint_b64": fa3_straight,
    }
    fa_ref = fa_fns["fa3_bare"]()
    fa_equal = {n: bool(torch.equal(fn(), fa_ref)) for n, fn in fa_fns.items()}
    fa_blocks = [bench_interleaved(fa_fns, torch, iters=args.iters) for _ in range(args.blocks)]
    fa_ratio = {n: [median([b / x for b, x in zip(blk["fa3_bare"], blk[n])]) for blk in fa_blocks] for n in fa_fns}
    fa_over = {n: [1000 * (median(blk[n]) - median(blk["fa3_bare"])) for blk in fa_blocks] for n in fa_fns}
    for n in fa_fns:
        print(f"{n:32s} bare/path {' '.join(f'{r:.3f}' for r in fa_ratio[n])}  over µs "
              f"{' '.join(f'{u:5.2f}' for u in fa_over[n])}  bits {fa_equal[n]}", flush=True)

    # correctness: every path's output equals the bare kernel's bits (same kernel, same slots)
    ref = fns["bare"]()
    equal = {n: bool(torch.equal(fn()[:, :HEADS], ref)) for n, fn in fns.items()}
    for name, (o, n, prefix_len) in bufs.items():
        assert torch.equal(n, counts), name  # rows are valid-first, so the prefix length is the count
        if not prefix_len:
            assert torch.equal(o[packed >= 0], packed[packed >= 0]), name
    blocks = [bench_interleaved(fns, torch, iters=args.iters) for _ in range(args.blocks)]
    ratio = {n: [median([b / x for b, x in zip(blk["bare"], blk[n])]) for blk in blocks] for n in fns}
    ms = {n: [median(blk[n]) for blk in blocks] for n in fns}
    over_us = {n: [1000 * (median(blk[n]) - median(blk["bare"])) for blk in blocks] for n in fns}
    fine = cold_graph_times(fns, torch)
    result = dict(env=environment(), note=note, shape=dict(tokens=T, heads=HEADS, k=K, pool=pool,
                                                           context=seq[1]),
                  equal_bits=equal, bare_over_path_blocks=ratio, ms_blocks=ms, overhead_us_blocks=over_us,
                  cold_graph_ms=fine, fa3=dict(equal_bits=fa_equal, bare_over_path_blocks=fa_ratio,
                                               overhead_us_blocks=fa_over))
    (out_dir / "compact_probe.json").write_text(json.dumps(result, indent=1))
    for n in fns:
        print(f"{n:32s} bare/path {' '.join(f'{r:.3f}' for r in ratio[n])}  over µs "
              f"{' '.join(f'{u:5.2f}' for u in over_us[n])}  fine ms {fine.get(n)}  bits {equal[n]}")


if __name__ == "__main__":
    main()
