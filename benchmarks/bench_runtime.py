"""Runtime-adapter benchmarks on a CUDA GPU, side by side in one run (RUNTIME.md §5 shapes).

(a) Top-k → page-table transform, K = 2048, a quarter of each row −1, against sglang 0.5.23's own
    single-launch Triton transforms, loaded from the sglang wheel at run time
    (runtime_bench_common.load_sglang_transforms; not vendored, not re-implemented). Eager time
    (do_bench median, L2 flushed), per call inside a CUDA graph of 20 calls, host time per eager
    call (launch loop without synchronisation), outputs compared, large shapes against the byte
    floor. Our plain transform is also timed at other (block, warps) settings.
(b) FlashMLA sparse prefill (sgl-flash-mla 1.0.0, legacy kernel) and flashinfer's FA3 paged MLA
    side by side, bare kernels and adapter paths, T × H ∈ {4096 × 128, 4096 × 64, 4096 × 16,
    128 × 128}, K = 2048, a 1M-token bf16 pool, rows partly −1 (sglang-shaped: half the tokens
    belong to a request with no prefix, so token i has i + 1 positions then −1s); TFLOP/s for both
    counted the same way: 2 · H · (576 + 512) per valid index.

Both parts also time side by side in turns: (a) eager rounds alternating ours / sglang, and the
cold-L2 time at a finer resolution than one event pair (runtime_bench_common.cold_graph_times);
(b) every path call by call in turns (bench_interleaved), besides do_bench rounds; the adapter
reads the token table and the page-64 block table, with q copied in or written into its
query_buffer().

Usage: python3 benchmarks/bench_runtime.py --out DIR [--skip-mla] [--skip-transforms] [--passes N]
       [--mla-repeats N] [--sweep]
"""
from __future__ import annotations

import argparse
import json

from runtime_bench_common import (
    bench,
    bench_interleaved,
    cold_graph_times,
    copy_tbps,
    decision,
    environment,
    graph_time,
    host_us,
    host_us_interleaved,
    import_runtime,
    load_sglang_transforms,
    median,
    mla_pool,
    sglang_shaped_rows,
    sparse_topk,
    warm_up_clocks,
)

K = 2048
# name, requests, tokens per request, page-table width, decode?
TRANSFORM_SHAPES = [
    ("prefill 1 x 8192", 1, 8192, 8192, False),
    ("prefill 16 x 512", 16, 512, 8192, False),
    ("prefill 128 x 64", 128, 64, 8192, False),
    ("prefill 512 x 8", 512, 8, 8192, False),
    ("prefill 4 x 16384 (64k-wide table)", 4, 16384, 65536, False),
    ("decode 256 @ 128k", 256, 1, 131072, True),
    ("decode 1024 @ 8k", 1024, 1, 8192, True),
    ("decode 64 @ 32k", 64, 1, 32768, True),
]
VARIANTS = [(2048, 8), (1024, 4), (1024, 8), (512, 4)]
COMPACT_VARIANTS = [(1024, 4), (1024, 8), (2048, 8), (2048, 16), (512, 4), (256, 2)]
PAGE = 64  # the MLA benchmark's KV page size (sglang's for DSA)
EAGER_ROUNDS = 5


def _transform_shape(rt, sg, tt, torch, gen, copy_rate, name, b, per_req, width, is_decode):
    t = b * per_req
    pt = torch.randint(0, 1 << 24, (b, width), generator=gen, device="cuda", dtype=torch.int32)
    topk = sparse_topk(t, K, width, 0.25, "cuda", gen)
    out = torch.empty(t, K, dtype=torch.int32, device="cuda")
    out_sg = torch.empty(t, K, dtype=torch.int32, device="cuda")
    ext = [per_req] * b
    cu = torch.arange(0, t + 1, per_req, device="cuda", dtype=torch.int32)
    if is_decode:
        def ours():
            return rt.transform_index_page_table_decode(pt, topk, 1, out, impl="triton")

        def ours_direct(block=None, warps=None, addresses=True):
            return tt.launch_transform(pt, topk, None, 1, out, block, warps, addresses)

        def theirs():
            return sg.transform_index_page_table_decode(pt, topk, result=out_sg)

        def ours_fast():
            return tt.launch_decode(pt, topk, 1, out)
    else:
        def ours():
            return rt.transform_index_page_table_prefill(pt, topk, page_size=1, out=out,
                                                         cu_extend_lens=cu, impl="triton")

        def ours_direct(block=None, warps=None, addresses=True):
            return tt.launch_transform(pt, topk, cu, 1, out, block, warps, addresses)

        def theirs():
            return sg.transform_index_page_table_prefill(pt, topk, ext, cu_seqlens_q=cu)
        ours_fast = None
    a = ours().clone()
    bres = theirs()
    equal = bool(torch.equal(a, bres))
    row = dict(shape=name, tokens=t, requests=b, width=width, equal_to_sglang_0523=equal)
    row["ours_eager_ms"] = bench(ours)
    row["sglang_eager_ms"] = bench(theirs)
    row["ours_graph_ms"] = graph_time(ours, torch)
    row["sglang_graph_ms"] = graph_time(theirs, torch)
    row["ours_host_us"] = host_us(ours, torch)
    row["ours_direct_host_us"] = host_us(ours_direct, torch)
    row["sglang_host_us"] = host_us(theirs, torch)
    # the same kernel launched with tensor arguments (Triton resolves each pointer)
    row["ours_tensor_args_host_us"] = host_us(lambda: ours_direct(addresses=False), torch)
    row["ours_tensor_args_graph_ms"] = graph_time(lambda: ours_direct(addresses=False), torch)
    row["sglang_host_us_again"] = host_us(theirs, torch)
    row["ours_host_us_again"] = host_us(ours, torch)
    if ours_fast is not None:  # the decode fast path called directly (no API checks)
        row["ours_fast_direct_host_us"] = host_us(ours_fast, torch)
        row["ours_fast_direct_graph_ms"] = graph_time(ours_fast, torch)
        row["host_us_interleaved"] = host_us_interleaved(
            {"ours_api": ours, "sglang": theirs, "ours_fast_direct": ours_fast,
             "ours_general_direct": ours_direct}, torch)
    # eager side by side in turns (ours, sglang, ours, …): drift of the GPU's clocks hits both alike
    rounds = [(bench(ours, 100), bench(theirs, 100)) for _ in range(EAGER_ROUNDS)]
    row["eager_rounds_ms"] = rounds
    row["ratio_eager_rounds"] = [a / b for a, b in rounds]
    row["ratio_eager"] = row["ours_eager_ms"] / row["sglang_eager_ms"]
    # the same cold-L2 GPU time at a finer resolution (graphs of flush + call, flushes subtracted),
    # three times in turns
    cold = [cold_graph_times({"ours": ours, "sglang": theirs}, torch) for _ in range(3)]
    row["cold_graph_ms"] = cold
    row["ratio_cold_graph"] = [c["ours"] / c["sglang"] for c in cold]
    row["ratio_graph"] = row["ours_graph_ms"] / row["sglang_graph_ms"]
    variants = {}
    for block, warps in VARIANTS:
        ours_direct(block, warps)
        same = bool(torch.equal(out, bres))
        def variant(block=block, warps=warps):
            return ours_direct(block, warps)

        variants[f"{block}/{warps}"] = dict(graph_ms=graph_time(variant, torch), eager_ms=bench(variant),
                                            equal=same)
    row["variants"] = variants
    if not is_decode:  # the request search forced one way or the other (graph ms, output equal)
        searches = {}
        for vector in (True, False):
            out.fill_(-7)
            tt.launch_transform(pt, topk, cu, 1, out, vector_search=vector)
            same = bool(torch.equal(out, bres))
            searches["vector" if vector else "binary"] = dict(graph_ms=graph_time(
                lambda v=vector: tt.launch_transform(pt, topk, cu, 1, out, vector_search=v), torch), equal=same)
        row["search_variants"] = searches
    valid = int((topk >= 0).sum())
    stream_bytes = t * K * 8
    row["floor_stream_ms"] = stream_bytes / (copy_rate * 1e12) * 1e3
    row["floor_with_gathers_ms"] = (stream_bytes + valid * 32) / (copy_rate * 1e12) * 1e3
    return row


def transform_bench(rt, sg, torch, copy_rate, seed=0):
    from nsa_policy.runtime import _triton_transforms as tt

    gen = torch.Generator(device="cuda").manual_seed(seed)
    rows = []
    for name, b, per_req, width, is_decode in TRANSFORM_SHAPES:
        row = _transform_shape(rt, sg, tt, torch, gen, copy_rate, name, b, per_req, width, is_decode)
        rows.append(row)
        print(json.dumps(row), flush=True)
        torch.cuda.empty_cache()
    return rows


def _mla_shape(rt, torch, flashinfer, flash_mla, gen, pool, scale, kv, page_table, pages, rows3, ckv, kpe, t,
               heads, repeats=3, sweep=False):
    q = torch.randn(t, heads, 576, generator=gen, device="cuda").to(torch.bfloat16)
    # two requests, sglang-shaped rows (runtime_bench_common.sglang_shaped_rows); the adapter reads the
    # token table or the block table of 64-token pages (sglang's DSA page size), same slots
    topk, table, block_table, extend, seq = sglang_shaped_rows(torch, gen, t, K, pages, page_table, PAGE)
    valid = int((topk >= 0).sum())
    flops = 2 * heads * (576 + 512) * valid
    slots = rt.transform_index_page_table_prefill(table, topk, extend, impl="triton")
    packed, counts = rt.transform_index_page_table_prefill_compact(table, topk, extend, impl="triton")
    row = dict(tokens=t, heads=heads, k=K, pool=pool, valid_indices=valid,
               minus_one_fraction=1 - valid / (t * K))

    # --- FlashMLA sparse prefill (padded to 64 heads below 64, as the adapter does)
    qp = q if heads in (64, 128) else torch.cat(
        [q, q.new_zeros(t, 64 - heads, 576)], dim=1)
    fm_in = dict(q=qp, kv=rows3, sm_scale=scale, d_v=512, use_legacy=True, return_log2_lse=False)

    def fm_bare():
        return flash_mla.flash_mla_sparse_fwd(indices=slots.unsqueeze(1), **fm_in)[0]

    def fm_bare_len():
        return flash_mla.flash_mla_sparse_fwd(indices=packed.unsqueeze(1), topk_length=counts, **fm_in)[0]

    fm = rt.SparseMLAAdapter.from_decision(
        decision(prefill_backend="flashmla_sparse", decode_backend="fa3"), device="cuda",
        softmax_scale=scale, num_heads=heads, phases=("prefill",))
    fm_plan = fm.plan_prefill(extend, seq)

    def fm_adapter():
        return fm.prefill(q, kv, topk, table, fm_plan)

    # the same adapter given q in its own query buffer (no head-padding copy below 64 heads) and
    # the block table (page 64) instead of the token table
    fm64 = rt.SparseMLAAdapter.from_decision(
        decision(prefill_backend="flashmla_sparse", decode_backend="fa3"), device="cuda",
        softmax_scale=scale, num_heads=heads, phases=("prefill",), table_page_size=PAGE)
    fm64_plan = fm64.plan_prefill(extend, seq)
    q_buf = fm64.query_buffer(fm64_plan)
    q_buf.copy_(q)

    def fm_adapter_qbuf_block64():
        return fm64.prefill(q_buf, kv, topk, block_table, fm64_plan)

    fmq_plan = fm.plan_prefill(extend, seq)
    q_buf_tok = fm.query_buffer(fmq_plan)
    q_buf_tok.copy_(q)

    def fm_adapter_qbuf():
        return fm.prefill(q_buf_tok, kv, topk, table, fmq_plan)

    # --- flashinfer FA3 paged MLA on the same valid indices (CSR, no −1)
    fa = rt.SparseMLAAdapter.from_decision(decision(), device="cuda", softmax_scale=scale,
                                           num_heads=heads, prefill_backend="fa3", phases=("prefill",))
    fa_plan = fa.plan_prefill(extend, seq)

    def fa_adapter():
        return fa.prefill(q, kv, topk, table, fa_plan)

    fa64 = rt.SparseMLAAdapter.from_decision(decision(), device="cuda", softmax_scale=scale, num_heads=heads,
                                             prefill_backend="fa3", phases=("prefill",), table_page_size=PAGE)
    fa64_plan = fa64.plan_prefill(extend, seq)

    def fa_adapter_block64():
        return fa64.prefill(q, kv, topk, block_table, fa64_plan)

    bare = flashinfer.mla.BatchMLAPagedAttentionWrapper(
        torch.empty(128 << 20, dtype=torch.int8, device="cuda"), backend="fa3")
    indptr = torch.zeros(t + 1, dtype=torch.int32, device="cuda")
    torch.cumsum(counts, 0, out=indptr[1:])
    indices = packed[packed >= 0]  # rows are valid-first, so this keeps the CSR order
    bare.plan(qo_indptr=torch.arange(t + 1, dtype=torch.int32, device="cuda"), kv_indptr=indptr,
              kv_indices=indices, kv_len_arr=counts, num_heads=heads, head_dim_ckv=512,
              head_dim_kpe=64, page_size=1, causal=False, sm_scale=scale,
              q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
    q_nope, q_pe = q[..., :512], q[..., 512:]

    def fa_bare():
        return bare.run(q_nope=q_nope, q_pe=q_pe, ckv_cache=ckv, kpe_cache=kpe)

    ref_out = fa_bare().float()
    checks = {}
    fns = {"flashmla_bare": fm_bare, "flashmla_bare_topk_length": fm_bare_len, "flashmla_adapter": fm_adapter,
           "flashmla_adapter_qbuf": fm_adapter_qbuf, "flashmla_adapter_qbuf_block64": fm_adapter_qbuf_block64,
           "fa3_bare": fa_bare, "fa3_adapter": fa_adapter, "fa3_adapter_block64": fa_adapter_block64}
    for nm, fn in fns.items():
        if nm == "fa3_bare":
            continue
        o = fn()[:, :heads].float()
        checks[nm] = float((o - ref_out).norm() / ref_out.norm())
    row["rel_diff_vs_fa3_bare"] = checks
    # the adapter paths against the bare kernel fed the same packed slots: the same kernel, the same
    # inputs, so the same bits
    row["adapter_equals_bare_bitwise"] = {
        "flashmla_adapter": bool(torch.equal(fm_adapter()[:, :heads], fm_bare_len()[:, :heads])),
        "flashmla_adapter_qbuf": bool(torch.equal(fm_adapter_qbuf()[:, :heads], fm_bare_len()[:, :heads])),
        "flashmla_adapter_qbuf_block64": bool(torch.equal(fm_adapter_qbuf_block64()[:, :heads],
                                                          fm_bare_len()[:, :heads])),
        "fa3_adapter_block64": bool(torch.equal(fa_adapter_block64(), fa_adapter())),
    }
    # side by side: `repeats` rounds, each timing every path once (do_bench median, L2 flushed)
    rounds = []
    for _ in range(repeats):
        rounds.append({nm: bench(fn, 200) for nm, fn in fns.items()})
    times = {nm: sorted(r[nm] for r in rounds)[len(rounds) // 2] for nm in fns}
    row["ms_rounds"] = rounds
    row["ms"] = times
    row["tflops"] = {nm: flops / ms / 1e9 for nm, ms in times.items()}
    pairs = {"flashmla_vs_bare": ("flashmla_bare", "flashmla_adapter"),
             "flashmla_vs_bare_topk_length": ("flashmla_bare_topk_length", "flashmla_adapter"),
             "flashmla_qbuf_vs_bare_topk_length": ("flashmla_bare_topk_length", "flashmla_adapter_qbuf"),
             "flashmla_qbuf_block64_vs_bare_topk_length": ("flashmla_bare_topk_length",
                                                           "flashmla_adapter_qbuf_block64"),
             "fa3": ("fa3_bare", "fa3_adapter"), "fa3_block64": ("fa3_bare", "fa3_adapter_block64")}
    row["ratio_rounds"] = {k: [r[b] / r[a] for r in rounds] for k, (b, a) in pairs.items()}
    # the same paths timed call by call in turns (bench_interleaved), `repeats` blocks of 30
    # iterations: per block, the median over iterations of bare / adapter of the same iteration
    paired = [bench_interleaved(fns, torch) for _ in range(repeats)]
    row["paired_ms"] = [{nm: median(v) for nm, v in blk.items()} for blk in paired]
    row["paired_ratio_blocks"] = {k: [median([x / y for x, y in zip(blk[b], blk[a])]) for blk in paired]
                                  for k, (b, a) in pairs.items()}
    pk, pc = torch.empty_like(packed), torch.empty_like(counts)
    cu = fm_plan.cu_extend_lens
    fm_adapter()
    qp_adapter = fm._padded_q(fm_plan, q)
    row["stage_ms"] = {
        "compact_transform": bench(lambda: rt.transform_index_page_table_prefill_compact(
            table, topk, page_size=1, out=pk, counts=pc, cu_extend_lens=cu, impl="triton")),
        "pad_heads_copy": bench(lambda: fm._padded_q(fm_plan, q)) if qp_adapter is not q else 0.0,
        # the kernel alone on the adapter's own buffers (its padded q, packed slots, counts)
        "flashmla_kernel_on_adapter_buffers": bench(lambda: flash_mla.flash_mla_sparse_fwd(
            indices=fm_plan.slots.unsqueeze(1), topk_length=fm_plan.counts,
            **{**fm_in, "q": qp_adapter})[0]),
    }
    pk64, pc64 = torch.empty_like(packed), torch.empty_like(counts)
    cu64 = fm64_plan.cu_extend_lens
    row["stage_ms"]["compact_transform_block64"] = bench(lambda: rt.transform_index_page_table_prefill_compact(
        block_table, topk, page_size=PAGE, out=pk64, counts=pc64, cu_extend_lens=cu64, impl="triton"))
    row["block64_compaction_equal"] = bool(torch.equal(pk64, packed) and torch.equal(pc64, counts))
    # what the FlashMLA path runs since run 9: slots in place, last valid position + 1 per row
    row["stage_ms"]["lengths_transform"] = bench(lambda: rt.transform_index_page_table_prefill_lengths(
        table, topk, page_size=1, out=pk, lengths=pc, cu_extend_lens=cu, impl="triton"))
    row["stage_ms"]["lengths_transform_block64"] = bench(lambda: rt.transform_index_page_table_prefill_lengths(
        block_table, topk, page_size=PAGE, out=pk64, lengths=pc64, cu_extend_lens=cu64, impl="triton"))
    # on these valid-first rows the lengths are the counts and the slots the packed ones
    row["lengths_equal_counts"] = bool(torch.equal(pc64, counts) and torch.equal(pk64, packed))
    # the compacting transform at other (block / warps): time and output equal to the default's
    from nsa_policy.runtime import _triton_transforms as tt
    variants = {}
    for block, warps in (COMPACT_VARIANTS if sweep else ()):
        pk.fill_(-7)
        tt.launch_transform_compact(table, topk, cu, 1, pk, pc, block=block, warps=warps)
        same = bool(torch.equal(pk, packed) and torch.equal(pc, counts))
        variants[f"{block}/{warps}"] = dict(ms=bench(lambda b=block, w=warps: tt.launch_transform_compact(
            table, topk, cu, 1, pk, pc, block=b, warps=w)), equal=same)
    row["compact_variants"] = variants
    # GPU time alone (host gaps removed): per call in a graph of 20 calls
    graphs = {}
    for nm, fn in (("flashmla_bare_topk_length", fm_bare_len), ("flashmla_adapter", fm_adapter),
                   ("flashmla_adapter_qbuf_block64", fm_adapter_qbuf_block64),
                   ("fa3_bare", fa_bare), ("fa3_adapter", fa_adapter), ("fa3_adapter_block64", fa_adapter_block64)):
        try:
            graphs[nm] = graph_time(fn, torch)
        except Exception as exc:  # a kernel that cannot be captured: say so, time nothing
            graphs[nm] = f"not capturable: {exc!r}"[:300]
    row["graph_ms"] = graphs
    row["host_us"] = {"flashmla_adapter": host_us(fm_adapter, torch, calls=50),
                      "flashmla_bare_topk_length": host_us(fm_bare_len, torch, calls=50),
                      "fa3_adapter": host_us(fa_adapter, torch, calls=50),
                      "fa3_bare": host_us(fa_bare, torch, calls=50)}
    row["adapter_vs_bare"] = {k: times[b] / times[a] for k, (b, a) in pairs.items()}
    return row


def compact_sweep(rt, torch, seed=2):
    """The compacting transform (decode form, K = 2048, a quarter −1) at several row counts and
    (block / warps): do_bench ms, and whether the output equals the default setting's."""
    from nsa_policy.runtime import _triton_transforms as tt

    gen = torch.Generator(device="cuda").manual_seed(seed)
    rows_out = []
    for rows in (128, 256, 512, 1024, 2048, 4096):
        pt = torch.randint(0, 1 << 20, (rows, 8192), generator=gen, device="cuda", dtype=torch.int32)
        topk = sparse_topk(rows, K, 8192, 0.25, "cuda", gen)
        ref, ref_n = rt.transform_index_page_table_decode_compact(pt, topk, 1, impl="triton")
        pk, pc = torch.empty_like(ref), torch.empty_like(ref_n)
        row = dict(rows=rows, default=list(tt._compact_block(K, rows, 1.0)), ms={}, equal={})
        for block, warps in COMPACT_VARIANTS:
            pk.fill_(-7)
            tt.launch_transform_compact(pt, topk, None, 1, pk, pc, block=block, warps=warps)
            row["equal"][f"{block}/{warps}"] = bool(torch.equal(pk, ref) and torch.equal(pc, ref_n))
            row["ms"][f"{block}/{warps}"] = bench(
                lambda b=block, w=warps, a=(pt, topk, None, 1, pk, pc): tt.launch_transform_compact(
                    *a, block=b, warps=w))
        rows_out.append(row)
        print(json.dumps(row), flush=True)
    return rows_out


def mla_bench(rt, torch, repeats=3, sweep=False):
    import flash_mla
    import flashinfer

    gen = torch.Generator(device="cuda").manual_seed(1)
    pool = 1 << 20
    scale = rt.softmax_scale_for(128, 64, 40.0, 1.0)
    kv, pages, page_table = mla_pool(torch, gen, pool, PAGE)
    rows3 = kv.view(-1, 1, 576)
    ckv, kpe = rows3[..., :512], rows3[..., 512:]
    results = []
    for t, heads in ((4096, 128), (4096, 64), (4096, 16), (128, 128)):
        row = _mla_shape(rt, torch, flashinfer, flash_mla, gen, pool, scale, kv, page_table, pages, rows3,
                         ckv, kpe, t, heads, repeats=repeats, sweep=sweep)
        results.append(row)
        print(json.dumps(row), flush=True)
        torch.cuda.empty_cache()
    return results


def _graph_cell(row, adapter, bare) -> str:
    a, b = row["graph_ms"][adapter], row["graph_ms"][bare]
    if isinstance(a, str) or isinstance(b, str):
        return "not captured"
    return f"{a:.4f} / {b:.4f} ({b / a * 100:.0f}%)"


def markdown(env, copy_rate, passes, mla_rows, sweep=()) -> str:
    lines = [f"# Runtime adapter on {env.get('device')} ({env['measured_utc']})", "",
             f"torch {env['torch']} (CUDA {env['torch_cuda']}), triton {env['triton']}, flashinfer "
             f"{env['flashinfer']}, sgl-flash-mla {env.get('flash_mla')}, sglang transforms from "
             f"{env.get('sglang_wheel', '(not run)')}. Host µs of a 64-element torch fill launch: "
             f"{env['host_us_torch_fill_launch']:.1f}. Device-to-device copy measured here: {copy_rate:.2f} TB/s.", ""]
    if passes:
        lines += ["## Top-k → page-table transform vs sglang 0.5.23, K = 2048, ¼ of each row −1", "",
                  "Eager: do_bench median, L2 flushed. Graph: per call in a graph of 20 calls. Host: µs per "
                  "eager call (launch loop, no sync). Floor: 8 B per entry (read + write) at the measured "
                  "copy rate; with gathers: + a 32 B sector per valid entry.", "",
                  "| shape (pass) | ours eager / graph (ms) | sglang 0.5.23 eager / graph (ms) | ratio eager / graph "
                  "| host µs ours API (direct; tensor args) / sglang | floor stream / with gathers (ms) | equal |",
                  "|---|---|---|---|---|---|---|"]
        for i, rows in enumerate(passes, 1):
            for r in rows:
                lines.append(
                    f"| {r['shape']} ({i}) | {r['ours_eager_ms']:.4f} / {r['ours_graph_ms']:.4f} | "
                    f"{r['sglang_eager_ms']:.4f} / {r['sglang_graph_ms']:.4f} | {r['ratio_eager']:.2f} / "
                    f"{r['ratio_graph']:.2f} | {r['ours_host_us']:.1f} ({r['ours_direct_host_us']:.1f}; tensor args "
                    f"{r['ours_tensor_args_host_us']:.1f}) / {r['sglang_host_us']:.1f} | "
                    f"{r['floor_stream_ms']:.4f} / {r['floor_with_gathers_ms']:.4f} | "
                    f"{r['equal_to_sglang_0523']} |")
        lines += ["", f"Eager ratio ours / sglang 0.5.23 in {EAGER_ROUNDS} rounds taken in turns (do_bench median "
                  "each, L2 flushed):", "", "| shape (pass) | ratio per round | ours ms per round | sglang ms per round |",
                  "|---|---|---|---|"]
        for i, rows in enumerate(passes, 1):
            for r in rows:
                lines.append(f"| {r['shape']} ({i}) | " + " ".join(f"{x:.3f}" for x in r["ratio_eager_rounds"]) +
                             " | " + " ".join(f"{a:.4f}" for a, _ in r["eager_rounds_ms"]) + " | " +
                             " ".join(f"{b:.4f}" for _, b in r["eager_rounds_ms"]) + " |")
        lines += ["", "Cold-L2 GPU time at a finer resolution: a CUDA graph of 20 × (zero a 128 MiB buffer, call), "
                  "replayed (do_bench median), minus a graph of the 20 zeroings; three measurements in turns:", "",
                  "| shape (pass) | ours ms | sglang ms | ratio |", "|---|---|---|---|"]
        for i, rows in enumerate(passes, 1):
            for r in rows:
                c = r["cold_graph_ms"]
                lines.append(f"| {r['shape']} ({i}) | " + " ".join(f"{x['ours']:.4f}" for x in c) + " | " +
                             " ".join(f"{x['sglang']:.4f}" for x in c) + " | " +
                             " ".join(f"{x:.3f}" for x in r["ratio_cold_graph"]) + " |")
        lines += ["", "Our plain transform at other (block / warps), graph ms (pass 1):", "",
                  "| shape | " + " | ".join(f"{b}/{w}" for b, w in VARIANTS) + " |",
                  "|---|" + "---|" * len(VARIANTS)]
        for r in passes[0]:
            lines.append(f"| {r['shape']} | " + " | ".join(
                f"{r['variants'][f'{b}/{w}']['graph_ms']:.4f}" for b, w in VARIANTS) + " |")
    if mla_rows:
        lines += ["", "## FlashMLA sparse prefill vs flashinfer FA3 paged MLA "
                  "(K = 2048, 1M-token bf16 pool in 64-token pages, rows partly −1)", "",
                  "TFLOP/s = 2 · H · (576 + 512) · valid indices / time, the same count for both kernels. "
                  "FlashMLA below 64 heads runs padded to 64 (counted on the real heads). Median of the "
                  "rounds (each round times every path once, do_bench median, L2 flushed). Adapter columns: "
                  "token table (page 1) with the caller's q (copied into the padded buffer below 64 heads); "
                  "q written into `query_buffer()` (no copy); that and the block table (page 64).", "",
                  "| T × H | FlashMLA bare (ms, TFLOP/s) | bare + topk_length | adapter, token table | "
                  "adapter, q in its buffer | adapter, q in buffer + block table | FA3 bare | FA3 adapter, "
                  "token table | FA3 adapter, block table |",
                  "|---|---|---|---|---|---|---|---|---|"]
        cols = ("flashmla_bare", "flashmla_bare_topk_length", "flashmla_adapter", "flashmla_adapter_qbuf",
                "flashmla_adapter_qbuf_block64", "fa3_bare", "fa3_adapter", "fa3_adapter_block64")
        for r in mla_rows:
            ms, tf = r["ms"], r["tflops"]
            lines.append(f"| {r['tokens']} × {r['heads']} | " + " | ".join(
                f"{ms[c]:.4f}, {tf[c]:.0f}" for c in cols) + " |")
        lines += ["", "Adapter / bare kernel per round (round 1 / 2 / 3):", "",
                  "| T × H | FlashMLA adapter / bare | / bare + topk_length: token table, q copied | "
                  "q in buffer | q in buffer + block table | FA3 adapter / bare: token table | block table |",
                  "|---|---|---|---|---|---|---|"]
        keys = ("flashmla_vs_bare", "flashmla_vs_bare_topk_length", "flashmla_qbuf_vs_bare_topk_length",
                "flashmla_qbuf_block64_vs_bare_topk_length", "fa3", "fa3_block64")
        for r in mla_rows:
            lines.append(f"| {r['tokens']} × {r['heads']} | " + " | ".join(
                " / ".join(f"{x * 100:.1f}%" for x in r["ratio_rounds"][k]) for k in keys) + " |")
        lines += ["", "The same, timed call by call in turns (every path once per iteration, order rotated, L2 "
                  "flushed before each call): median over 30 iterations of bare / adapter of the same iteration, "
                  "per block (block 1 / 2 / 3):", "",
                  "| T × H | FlashMLA adapter / bare | / bare + topk_length: token table, q copied | "
                  "q in buffer | q in buffer + block table | FA3 adapter / bare: token table | block table |",
                  "|---|---|---|---|---|---|---|"]
        for r in mla_rows:
            lines.append(f"| {r['tokens']} × {r['heads']} | " + " | ".join(
                " / ".join(f"{x * 100:.1f}%" for x in r["paired_ratio_blocks"][k]) for k in keys) + " |")
        lines += ["", "Adapter stages (do_bench ms): the compacting transform (FA3's CSR path) and the lengths "
                  "transform (FlashMLA's path: slots in place, last valid position + 1) on the token table / on the "
                  "block table, the head-padding copy, the kernel alone on the adapter's own buffers; host µs "
                  "per eager call; per call in a graph of 20 calls (host gaps removed):", "",
                  "| T × H | compact, token / block table | lengths, token / block table | pad copy | "
                  "kernel on adapter buffers | "
                  "adapter host µs / bare host µs | graph ms FlashMLA adapter / bare+len | graph ms FlashMLA "
                  "adapter q in buffer + block table / bare+len | graph ms FA3 adapter / bare | graph ms FA3 "
                  "adapter block table / bare | outputs bit-equal to the bare kernel's |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in mla_rows:
            st, hu = r["stage_ms"], r["host_us"]
            eq = r["adapter_equals_bare_bitwise"]
            lines.append(
                f"| {r['tokens']} × {r['heads']} | {st['compact_transform']:.4f} / "
                f"{st['compact_transform_block64']:.4f} | {st.get('lengths_transform', float('nan')):.4f} / "
                f"{st.get('lengths_transform_block64', float('nan')):.4f} | {st['pad_heads_copy']:.4f} | "
                f"{st['flashmla_kernel_on_adapter_buffers']:.4f} | {hu['flashmla_adapter']:.1f} / "
                f"{hu['flashmla_bare_topk_length']:.1f} | "
                f"{_graph_cell(r, 'flashmla_adapter', 'flashmla_bare_topk_length')} | "
                f"{_graph_cell(r, 'flashmla_adapter_qbuf_block64', 'flashmla_bare_topk_length')} | "
                f"{_graph_cell(r, 'fa3_adapter', 'fa3_bare')} | {_graph_cell(r, 'fa3_adapter_block64', 'fa3_bare')} | "
                f"{all(eq.values())} ({sum(eq.values())}/{len(eq)}) |")
    if sweep:
        lines += ["", "Compacting transform alone (decode form, K = 2048, ¼ −1), do_bench ms by rows and "
                  "(block / warps); * = the default setting; all outputs equal unless marked:", "",
                  "| rows | " + " | ".join(f"{b}/{w}" for b, w in COMPACT_VARIANTS) + " |",
                  "|---|" + "---|" * len(COMPACT_VARIANTS)]
        for r in sweep:
            cells = []
            for b, w in COMPACT_VARIANTS:
                name = f"{b}/{w}"
                mark = "*" if [b, w] == r["default"] else ""
                cells.append(f"{r['ms'][name]:.4f}{mark}{'' if r['equal'][name] else ' (DIFFERS)'}")
            lines.append(f"| {r['rows']} | " + " | ".join(cells) + " |")
    searches = [(i, r) for i, rows in enumerate(passes, 1) for r in rows if "search_variants" in r]
    if searches:
        lines += ["", "Ragged prefill, request search forced (graph ms; default in the main table):", "",
                  "| shape (pass) | vector compare | binary search | equal |", "|---|---|---|---|"]
        for i, r in searches:
            sv = r["search_variants"]
            lines.append(f"| {r['shape']} ({i}) | {sv['vector']['graph_ms']:.4f} | {sv['binary']['graph_ms']:.4f} | "
                         f"{sv['vector']['equal'] and sv['binary']['equal']} |")
    decode_rows = [(i, r) for i, rows in enumerate(passes, 1) for r in rows if "host_us_interleaved" in r]
    if decode_rows:
        lines += ["", "## Eager decode: host µs per call, measured in turns (median of 9 rounds × 500 calls)", "",
                  "| shape (pass) | ours API | ours decode launcher direct | ours general launcher direct | "
                  "sglang 0.5.23 | ours API / sglang |", "|---|---|---|---|---|---|"]
        for i, r in decode_rows:
            h = r["host_us_interleaved"]
            lines.append(f"| {r['shape']} ({i}) | {h['ours_api']:.1f} | {h['ours_fast_direct']:.1f} | "
                         f"{h['ours_general_direct']:.1f} | {h['sglang']:.1f} | {h['ours_api'] / h['sglang']:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--skip-mla", action="store_true")
    ap.add_argument("--skip-transforms", action="store_true")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--mla-repeats", type=int, default=3)
    ap.add_argument("--sweep", action="store_true", help="also the compaction (block, warps) sweeps")
    ap.add_argument("--sglang-wheels", default=".whl", help="folder (under the repo) holding sglang-0.5.23-*.whl")
    args = ap.parse_args()
    import torch

    rt, note = import_runtime()
    env = environment()
    env["runtime_import_note"] = note
    try:
        import flash_mla
        env["flash_mla"] = flash_mla.__version__
    except Exception as exc:
        env["flash_mla"] = f"unavailable: {exc!r}"
    sg = None
    if not args.skip_transforms:
        sg = load_sglang_transforms(args.sglang_wheels)
        env["sglang_wheel"] = sg.__wheel__
    warm_up_clocks(torch)
    rate = copy_tbps(torch)
    small = torch.empty(64, dtype=torch.int32, device="cuda")
    env["host_us_torch_fill_launch"] = host_us(lambda: small.fill_(0), torch)
    passes = [] if args.skip_transforms else [transform_bench(rt, sg, torch, rate, seed)
                                              for seed in range(args.passes)]
    torch.cuda.empty_cache()
    mla_rows = [] if args.skip_mla else mla_bench(rt, torch, args.mla_repeats, args.sweep)
    sweep = compact_sweep(rt, torch) if args.sweep and not args.skip_mla else []
    criteria = {}
    for i, rows in enumerate(passes, 1):
        for r in rows:
            criteria[f"pass {i} {r['shape']}: eager <= 1.0x sglang 0.5.23"] = r["ratio_eager"] <= 1.0
            rr = r["ratio_eager_rounds"]
            criteria[f"pass {i} {r['shape']}: eager <= 1.0x sglang 0.5.23 in every one of {len(rr)} rounds in turns "
                     f"({min(rr):.3f}-{max(rr):.3f})"] = max(rr) <= 1.0
            rc = r["ratio_cold_graph"]
            criteria[f"pass {i} {r['shape']}: cold-L2 GPU time <= 1.0x sglang 0.5.23, fine resolution, all 3 "
                     f"({min(rc):.3f}-{max(rc):.3f})"] = max(rc) <= 1.0
            criteria[f"pass {i} {r['shape']}: graph <= 1.0x sglang 0.5.23"] = r["ratio_graph"] <= 1.0
            criteria[f"pass {i} {r['shape']}: host per eager call <= sglang's"] = \
                max(r["ours_host_us"], r["ours_host_us_again"]) <= min(r["sglang_host_us"], r["sglang_host_us_again"])
            if "host_us_interleaved" in r:
                h = r["host_us_interleaved"]
                criteria[f"pass {i} {r['shape']}: host per eager call <= sglang's (in turns)"] = \
                    h["ours_api"] <= h["sglang"]
            criteria[f"pass {i} {r['shape']}: output equal to sglang 0.5.23"] = r["equal_to_sglang_0523"]
    names = {"flashmla_vs_bare": "flashmla adapter (token table) >= 95% of bare",
             "flashmla_vs_bare_topk_length": "flashmla adapter (token table, q copied) >= 95% of bare with topk_length",
             "flashmla_qbuf_vs_bare_topk_length": "flashmla adapter (token table, q in its buffer) >= 95% of bare "
                                                  "with topk_length",
             "flashmla_qbuf_block64_vs_bare_topk_length": "flashmla adapter (block table, q in its buffer) >= 95% "
                                                          "of bare with topk_length",
             "fa3": "fa3 adapter (token table) >= 95% of bare", "fa3_block64": "fa3 adapter (block table) >= 95% of bare"}
    for r in mla_rows:
        shape = f"{r['tokens']} x {r['heads']}"
        for key, text in names.items():
            rounds = r["ratio_rounds"][key]
            criteria[f"{shape}: {text}, every round ({min(rounds) * 100:.1f}% lowest)"] = min(rounds) >= 0.95
            blocks = r["paired_ratio_blocks"][key]
            criteria[f"{shape}: {text}, timed in turns, every block ({min(blocks) * 100:.1f}% lowest)"] = \
                min(blocks) >= 0.95
    report = {"environment": env, "copy_tbps": rate, "transform_passes": passes, "mla": mla_rows,
              "compact_sweep": sweep, "criteria": criteria}
    part = "transforms" if not mla_rows else "mla" if not passes else "all"
    with open(f"{args.out}/bench_runtime_{part}.json", "w") as f:
        json.dump(report, f, indent=1, default=str)
    md = markdown(env, rate, passes, mla_rows, sweep) + "\n## Criteria (issue 12)\n\n" + "\n".join(
        f"- {'met' if ok else 'NOT met'}: {name}" for name, ok in criteria.items()) + "\n"
    with open(f"{args.out}/bench_runtime_{part}.md", "w") as f:
        f.write(md)
    print(md, flush=True)


if __name__ == "__main__":
    main()
