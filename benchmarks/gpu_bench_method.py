"""Issue 25 on one GPU: where fa3 breaks over large pools, and the issue's timing method beside bench's.

  python3 benchmarks/gpu_bench_method.py probe OUT.json    fa3 over a pool past 2^32 bf16 elements,
                                                           called directly (the adapter refuses it)
  python3 benchmarks/gpu_bench_method.py method OUT.jsonl  16/32/64/128 heads per rank, 32k context

probe: one pool of 7.7M rows of 576 bf16 (2^32 elements end inside row 7,456,540). The same 32 decode
rows (K = 2048) run four ways: slots all below the 2^32 boundary; all above it; the above slots through
a view whose base starts at row 7,000,000 (same data, offsets under 2^32); and a reference on the rows a
32-bit offset would reach ((slot × 576) mod 2^32 elements). If the kernel wraps its offsets, the second
disagrees with the true reference and agrees with the wrapped one, and the third agrees.

method: every Hopper backend through the adapter (transform + kernel, the plan made once per point, as
bench does) timed three ways at each point: bench's rounds taken in turns with a 1 GiB flush (median
of 20); triton.testing.do_bench medians (its own 256 MiB flush; twice); do_bench of the call with the
plan made inside it. Host µs per call too: enqueueing 30 calls without waiting.
"""
from __future__ import annotations

import json
import sys
import time

import torch

import nsa_policy
from nsa_policy.runtime import bench as gpu
from nsa_policy.runtime.adapter import SparseMLAAdapter
from nsa_policy.runtime.errors import AdapterConfigError
from nsa_policy.runtime.reference import HEAD_DIM_QK, softmax_scale_for, sparse_mla_reference

MODEL = "deepseek-ai/DeepSeek-V3.2"
SCALE = softmax_scale_for(128, 64, 40, 1.0)
K = 2048
CONTEXT = 32768
SHAPES = {16: dict(tp_size=8), 32: dict(tp_size=4), 64: dict(tp_size=2),
          128: dict(tp_size=8, dp_size=8, enable_dp_attention=True)}
DECODE, PREFILL = (1, 8, 32, 128, 512), (1024, 4096, 16384)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.float(), b.float()
    return float("inf") if not bool(torch.isfinite(a).all()) else float((a - b).norm() / b.norm())


def fa3_direct(pool: torch.Tensor, q: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """flashinfer's fa3 MLA wrapper over `pool`, one request per row, page size 1: what the adapter
    passes (the same views of one [N, 576] pool), without its pool check."""
    import flashinfer.mla

    from nsa_policy.runtime import _flashinfer
    rows, heads = q.shape[0], q.shape[1]
    ws = torch.empty(128 << 20, dtype=torch.int8, device="cuda")
    w = flashinfer.mla.BatchMLAPagedAttentionWrapper(ws, backend="fa3")
    lens = torch.full((rows,), slots.shape[1], dtype=torch.int32, device="cuda")
    indptr = torch.zeros(rows + 1, dtype=torch.int32, device="cuda")
    indptr[1:] = torch.cumsum(lens, 0)
    w.plan(**_flashinfer.fa3_plan_call(
        qo_indptr=torch.arange(rows + 1, dtype=torch.int32, device="cuda"), kv_indptr=indptr,
        kv_indices=slots.reshape(-1).to(torch.int32).contiguous(), kv_len_arr=lens, num_heads=heads,
        softmax_scale=SCALE, q_dtype=torch.bfloat16, kv_dtype=torch.bfloat16))
    v = pool.view(-1, 1, HEAD_DIM_QK)
    out = w.run(q_nope=q[..., :512], q_pe=q[..., 512:], ckv_cache=v[..., :512], kpe_cache=v[..., 512:])
    torch.cuda.synchronize()
    return out


def reference(q: torch.Tensor, kv_rows: torch.Tensor) -> torch.Tensor:
    """fp32 reference over [R, K, 576] rows gathered per query row."""
    r, k = kv_rows.shape[:2]
    local = torch.arange(r * k, device="cuda", dtype=torch.int32).reshape(r, k)
    out = sparse_mla_reference(q.float(), kv_rows.reshape(-1, HEAD_DIM_QK).float(), local, SCALE,
                               out_dtype=torch.float32)
    assert isinstance(out, torch.Tensor)
    return out


def probe(path: str) -> None:
    import flashinfer
    n, base, rows, heads = 7_700_000, 7_000_000, 32, 16
    boundary = (1 << 32) // HEAD_DIM_QK + 1  # first row whose offset × 576 wraps in 32 bits
    gen = torch.Generator(device="cuda").manual_seed(1)
    pool = torch.empty(n, HEAD_DIM_QK, dtype=torch.bfloat16, device="cuda")
    for s in range(0, n, 1 << 20):
        pool[s:s + (1 << 20)] = torch.randn(min(1 << 20, n - s), HEAD_DIM_QK, generator=gen, device="cuda")
    q = torch.randn(rows, heads, HEAD_DIM_QK, generator=gen, device="cuda").to(torch.bfloat16)

    def distinct(lo: int, hi: int) -> torch.Tensor:
        return torch.stack([lo + torch.randperm(hi - lo, generator=gen, device="cuda")[:K] for _ in range(rows)])

    low, high = distinct(0, boundary - 1), distinct(boundary, n)
    flat = pool.view(-1)
    wrapped = ((high.long() * HEAD_DIM_QK) % (1 << 32))[..., None] + torch.arange(HEAD_DIM_QK, device="cuda")
    res: dict = dict(flashinfer=flashinfer.__version__, pool_rows=n, boundary_row=boundary, rows=rows, heads=heads,
                     pool_bytes=pool.numel() * 2, gpu=torch.cuda.get_device_name(),
                     utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    out_low = fa3_direct(pool, q, low)
    res["below_boundary_vs_reference"] = rel(out_low, reference(q, pool[low.long()]))
    out_high = fa3_direct(pool, q, high)
    res["above_boundary_vs_reference"] = rel(out_high, reference(q, pool[high.long()]))
    res["above_boundary_vs_wrapped_32bit_rows"] = rel(out_high, reference(q, flat[wrapped]))
    out_rebased = fa3_direct(pool[base:], q, high - base)
    res["above_boundary_rebased_view_vs_reference"] = rel(out_rebased, reference(q, pool[high.long()]))
    # FlashMLA reads the same pool and slots (it takes the [N, 1, 576] view and [T, 1, K] indices)
    try:
        from nsa_policy.runtime import _flashmla
        fm = _flashmla.load()
        qp = torch.cat([q, q.new_zeros(rows, 64 - heads, HEAD_DIM_QK)], dim=1)
        o = fm.flash_mla_sparse_fwd(**_flashmla.sparse_prefill_call(
            q=qp, kv=pool.view(-1, 1, HEAD_DIM_QK), indices=high.to(torch.int32).unsqueeze(1).contiguous(),
            sm_scale=SCALE, topk_length=None))[0]
        res["flashmla_sparse_above_boundary_vs_reference"] = rel(o[:, :heads], reference(q, pool[high.long()]))
    except Exception as exc:  # noqa: BLE001 - recorded, the probe goes on
        res["flashmla_sparse_above_boundary"] = f"{type(exc).__name__}: {exc}"[:300]
    # the adapter: refused at construction with the pool's size, and at the call without it
    d = nsa_policy.resolve({"tp_size": 8, "kv_cache_dtype": "bfloat16"}, device="h200", model=MODEL)
    try:
        SparseMLAAdapter.from_decision(d, device="cuda", softmax_scale=SCALE, phases=("decode",),
                                       decode_backend="fa3", table_page_size=1, kv_pool_tokens=n)
        res["adapter_construction"] = "built (no limit with this flashinfer)"
    except AdapterConfigError as exc:
        res["adapter_construction"] = f"AdapterConfigError: {exc}"
    ad = SparseMLAAdapter.from_decision(d, device="cuda", softmax_scale=SCALE, phases=("decode",),
                                        decode_backend="fa3", table_page_size=1, num_heads=heads)
    plan = ad.plan_decode([CONTEXT] * rows)
    table = torch.arange(n, dtype=torch.int32, device="cuda").expand(rows, n).contiguous()  # token slots
    try:
        out = ad.decode(q, pool, high.to(torch.int32), table, plan)
        res["adapter_call"] = f"ran; vs reference {rel(out, reference(q, pool[high.long()])):.3g}"
    except Exception as exc:  # noqa: BLE001 - the refusal (ValueError) is what this records
        res["adapter_call"] = f"{type(exc).__name__}: {exc}"[:400]
    print(json.dumps(res, indent=1), flush=True)
    with open(path, "w") as f:
        json.dump(res, f, indent=1)


def host_us(fn, n: int = 30) -> float:
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6


def unplanned(ad: SparseMLAAdapter, prob, pool: torch.Tensor):
    """The layer call with its plan made inside it (plan + transform + kernel per call)."""
    if prob.phase == "decode":
        return lambda: ad.decode(prob.q, pool, prob.topk, prob.block_table, ad.plan_decode(prob.seq_lens))
    return lambda: ad.prefill(prob.q, pool, prob.topk, prob.block_table,
                              ad.plan_prefill(prob.extend_lens, prob.seq_lens))


def method(path: str) -> None:
    from triton.testing import do_bench
    gen = torch.Generator(device="cuda").manual_seed(0)
    kv_dtypes = ["bfloat16", "fp8_e4m3"]
    pools = gpu.Pools(gpu.POOL_TOKENS, kv_dtypes, gen)
    flush = torch.empty(gpu.FLUSH_MIB << 20, dtype=torch.int8, device="cuda")
    gpu.warm_clocks()
    out = open(path, "w")
    for heads, shape in SHAPES.items():
        decisions = {kv: nsa_policy.resolve({**shape, "kv_cache_dtype": kv}, device="h200", model=MODEL)
                     for kv in kv_dtypes}
        assert all(int(d.heads_per_rank) == heads for d in decisions.values())
        spec = gpu.Spec(model=MODEL, device="h200", tp_size=shape["tp_size"], dp_size=shape.get("dp_size"),
                        enable_dp_attention=bool(shape.get("enable_dp_attention")), batches=list(DECODE),
                        contexts=[CONTEXT], prefill_tokens=list(PREFILL), kv_dtypes=kv_dtypes, decisions=decisions)
        found, excluded = gpu.candidates(spec, "sm90", heads, SCALE, pools.tokens)
        for e in excluded:
            out.write(json.dumps(dict(heads=heads, excluded=e.model_dump())) + "\n")
        for phase, sizes in (("decode", DECODE), ("prefill", PREFILL)):
            for size in sizes:
                prob = gpu.make_problem(phase, CONTEXT, size, heads, K, pools, gen)
                fns, rows = {}, {}
                for kv in kv_dtypes:
                    for b, ad in found[(phase, kv)].items():
                        key = f"{kv}/{b}"
                        try:
                            fn = gpu.layer_call(ad, prob, pools.pool(kv))
                            err = gpu.reference_error(prob, fn(), kv, pools, SCALE)
                        except Exception as exc:  # noqa: BLE001 - recorded, never timed
                            out.write(json.dumps(dict(heads=heads, phase=phase, size=size, kv=kv, backend=b,
                                                      error=f"{type(exc).__name__}: {exc}"[:300])) + "\n")
                            continue
                        fns[key] = fn
                        rows[key] = dict(heads=heads, phase=phase, size=size, context=CONTEXT, kv=kv, backend=b,
                                         rel_error=err)
                t0 = time.time()  # wall-clock spans, to line the runs up with sampled clocks
                ours = gpu.timed_in_turns(fns, 20, 3, flush)
                t1 = time.time()
                for key, fn in fns.items():
                    srt = sorted(ours[key])
                    rows[key]["ours_ms"] = (srt[9] + srt[10]) / 2
                    rows[key]["ours_rounds"] = [round(x, 5) for x in ours[key]]
                    rows[key]["ours_span"] = [round(t0, 3), round(t1, 3)]
                    t2 = time.time()
                    rows[key]["do_bench_ms"] = [do_bench(fn, return_mode="median") for _ in range(2)]
                    rows[key]["do_bench_span"] = [round(t2, 3), round(time.time(), 3)]
                    rows[key]["host_us"] = host_us(fn)
                for key in fns:  # planning per call replaces the planned wrapper's plan: last
                    kv, b = key.split("/")
                    fn2 = unplanned(found[(phase, kv)][b], prob, pools.pool(kv))
                    rows[key]["do_bench_plan_per_call_ms"] = do_bench(fn2, return_mode="median")
                    rows[key]["host_us_plan_per_call"] = host_us(fn2, 10)
                for r in rows.values():
                    out.write(json.dumps(r) + "\n")
                    print(f"{heads:4d} {phase:7s} {size:6d} {r['kv']:9s} {r['backend']:16s} err {r['rel_error']:.1e} "
                          f"ours {r['ours_ms']:.4f} do_bench {r['do_bench_ms'][0]:.4f}/{r['do_bench_ms'][1]:.4f} "
                          f"host {r['host_us']:.0f}us plan/call {r['do_bench_plan_per_call_ms']:.4f}", flush=True)
                del prob, fns
    out.close()


if __name__ == "__main__":
    {"probe": probe, "method": method}[sys.argv[1]](sys.argv[2])
