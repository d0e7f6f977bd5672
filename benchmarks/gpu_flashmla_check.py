"""The default policy's Hopper decisions through the adapter, on the H200 (issue 12).

1. The fp8-656 quantiser against FlashMLA's expected V3.2 format: FlashMLA's own sparse fp8 decode
   over a cache written by `quantize_fp8_656` (exact amax/448 scales, and power-of-two scales)
   equals the fp32 reference on the dequantised cache.
2. bf16 decision (flashmla_sparse prefill + fa3 decode), fp8 decision (flashmla_kv both sides) and
   flashmla_auto (the planner picks per batch), built from `nsa_policy.resolve(..., device="h200")`
   when the policy package imports, else from the same fields by hand: ragged prefill with a
   prefix and decode, rows partly −1 (random holes and short sglang-shaped rows), one row with no
   valid index; H = 128 and H = 16 (padded to 64); against the fp32 reference (relative error
   ≤ 1e-2 bf16, ≤ 2e-2 fp8; no NaN; the empty row is 0); several layers on one plan; a
   negative control (slots shifted by one row) must fail.

Usage: python3 benchmarks/gpu_flashmla_check.py --out DIR   (writes DIR/gpu_flashmla_check.json)
"""
from __future__ import annotations

import argparse
import json
import traceback

from runtime_bench_common import decision, environment, import_runtime

RESULTS: list[dict] = []
K = 2048


def record(name, passed, **detail):
    RESULTS.append(dict(name=name, passed=bool(passed), **detail))
    print(f"[{'PASS' if passed else 'FAIL'}] {name} {json.dumps(detail, default=str)}", flush=True)


def guarded(fn):
    def run(*args, **kw):
        try:
            fn(*args, **kw)
        except Exception as exc:
            record(fn.__name__ + str(kw or ""), False, error=repr(exc), trace=traceback.format_exc()[-2500:])
    return run


def rel(out, ref):
    return float((out.float() - ref).norm() / ref.norm())


def hopper_decision(kv_cache_dtype):
    """The policy's own H200 decision when the package resolves here, else its fields by hand."""
    try:
        import nsa_policy
        d = nsa_policy.resolve({} if kv_cache_dtype == "bfloat16" else {"kv_cache_dtype": kv_cache_dtype},
                               device="h200", model="deepseek-ai/DeepSeek-V3.2")
        return d, "nsa_policy.resolve(device='h200')"
    except Exception as exc:
        if kv_cache_dtype == "bfloat16":
            d = decision(prefill_backend="flashmla_sparse", decode_backend="fa3")
        else:
            d = decision(kv_cache_dtype="fp8_e4m3", kv_cache_layout="fp8-656-blockwise",
                         prefill_backend="flashmla_kv", decode_backend="flashmla_kv")
        return d, f"by hand ({exc!r})"


def problem(torch, gen, extend, prefix, heads, pool=1 << 18, holes=True):
    """A ragged batch: sglang-shaped top-k rows (0..L-1 then −1 for L ≤ K, else K distinct
    positions < L), then a random eighth of each long row dropped; the last token's row emptied."""
    seq = [p + e for p, e in zip(prefix, extend)]
    width = max(seq)
    page_table = torch.stack([torch.randperm(pool, generator=gen, device="cuda")[:width]
                              for _ in seq]).int()
    rows = []
    for p, e in zip(prefix, extend):
        for i in range(e):
            length = p + i + 1
            if length <= K:
                row = torch.cat([torch.arange(length, device="cuda"),
                                 torch.full((K - length,), -1, device="cuda")])
            else:
                row = torch.randperm(length, generator=gen, device="cuda")[:K]
                if holes:  # not sglang-shaped: FlashMLA reads any −1 (fa3 plans counts = min(L, K))
                    row = row.masked_fill(torch.rand(K, generator=gen, device="cuda") < 0.125, -1)
            rows.append(row)
    topk = torch.stack(rows).int()
    topk[-1] = -1
    q = (torch.randn(len(rows), heads, 576, generator=gen, device="cuda")).to(torch.bfloat16)
    kv = torch.randn(pool, 576, generator=gen, device="cuda")
    return dict(q=q, kv=kv, topk=topk, page_table=page_table, extend=list(extend), seq=seq)


def reference(rt, prob, kv_rows, scale, decode=False):
    if decode:
        slots = rt.transform_index_page_table_decode(prob["page_table"], prob["topk"], impl="torch")
    else:
        slots = rt.transform_index_page_table_prefill(prob["page_table"], prob["topk"], prob["extend"],
                                                      impl="torch")
    return rt.sparse_mla_reference(prob["q"].float(), kv_rows.float(), slots, scale, out_dtype=torch_f32())


def torch_f32():
    import torch
    return torch.float32


@guarded
def quantiser_matches_flashmla(rt, torch):
    import flash_mla

    gen = torch.Generator(device="cuda").manual_seed(0)
    b, heads, pool = 64, 128, 1 << 16
    scale = rt.softmax_scale_for(128, 64, 40.0, 1.0)
    kv = torch.randn(pool, 576, generator=gen, device="cuda") * torch.linspace(0.05, 3, 576, device="cuda")
    q = torch.randn(b, 1, heads, 576, generator=gen, device="cuda").to(torch.bfloat16)
    idx = torch.randint(0, pool, (b, 1, K), generator=gen, device="cuda", dtype=torch.int32)
    idx[:, :, -K // 8:] = -1
    out = {}
    for pow2 in (False, True):
        packed = rt.quantize_fp8_656(kv, pow2_scales=pow2)
        meta = flash_mla.get_mla_metadata()[0]
        o = flash_mla.flash_mla_with_kvcache(
            q, packed.view(-1, 64, 1, 656), torch.empty(b, 0, dtype=torch.int32, device="cuda"), None, 512,
            meta, softmax_scale=scale, is_fp8_kvcache=True, indices=idx, kv_format="V32",
            use_legacy=True)[0]
        ref = rt.sparse_mla_reference(q[:, 0].float(), rt.dequantize_fp8_656(packed, torch.float32),
                                      idx[:, 0].long(), scale)
        out["pow2" if pow2 else "exact"] = rel(o[:, 0], ref)
    # negative control: the scales read as bf16 pairs would be a different layout entirely
    record("quantiser_matches_flashmla_v32_layout", max(out.values()) < 1e-2, rel_err=out)


@guarded
def decision_runs(rt, torch, kv_cache_dtype, heads):
    gen = torch.Generator(device="cuda").manual_seed(heads + (7 if kv_cache_dtype == "fp8_e4m3" else 0))
    d, source = hopper_decision(kv_cache_dtype)
    scale = rt.softmax_scale_for(128, 64, 40.0, 1.0)
    a = rt.SparseMLAAdapter.from_decision(d, device="cuda", softmax_scale=scale, num_heads=heads)
    fp8 = kv_cache_dtype == "fp8_e4m3"
    detail = dict(decision=source, backends=a.backends, layout=a.kv_cache_layout, heads=heads)
    prob = problem(torch, gen, extend=(700, 200, 99), prefix=(0, 2500, 4000), heads=heads)
    if fp8:
        cache = rt.quantize_fp8_656(prob["kv"], pow2_scales=False)
        kv_rows = rt.dequantize_fp8_656(cache, torch.float32)
    else:
        cache = prob["kv"].to(torch.bfloat16)
        kv_rows = cache.float()
    ref = reference(rt, prob, kv_rows, scale)
    plan = a.plan_prefill(prob["extend"], prob["seq"])
    errs = []
    for _ in range(3):  # layers on one plan
        out = a.prefill(prob["q"], cache, prob["topk"], prob["page_table"], plan)
        errs.append(rel(out[:-1], ref[:-1]))
    nan = bool(torch.isnan(out).any())
    empty_zero = bool((out[-1] == 0).all())
    # negative control: slots shifted by one row
    shifted = torch.roll(prob["topk"], 1, 0)
    bad = rel(a.prefill(prob["q"], cache, shifted, prob["page_table"], plan)[:-1], ref[:-1])
    tol = 2e-2 if fp8 else 1e-2
    detail.update(prefill_kernel=plan.kernel_backend, prefill_rel_err=errs, nan=nan,
                  empty_row_is_zero=empty_zero, negative_control_rel_err=bad)
    ok = max(errs) <= tol and not nan and bad > 10 * tol
    dec = problem(torch, gen, extend=(1,) * 64, prefix=tuple(int(x) for x in
                                                            torch.randint(1, 30000, (64,), generator=gen, device="cuda")),
                  heads=heads, holes=fp8)
    dref = reference(rt, dec, rt.dequantize_fp8_656(rt.quantize_fp8_656(dec["kv"], pow2_scales=False),
                                                    torch.float32) if fp8 else dec["kv"].to(torch.bfloat16).float(),
                     scale, decode=False)
    dcache = rt.quantize_fp8_656(dec["kv"], pow2_scales=False) if fp8 else dec["kv"].to(torch.bfloat16)
    dplan = a.plan_decode(dec["seq"])
    dout = a.decode(dec["q"], dcache, dec["topk"], dec["page_table"], dplan)
    derr = rel(dout[:-1], dref[:-1])
    detail.update(decode_kernel=dplan.kernel_backend, decode_rel_err=derr,
                  decode_nan=bool(torch.isnan(dout).any()))
    ok = ok and derr <= tol and not detail["decode_nan"]
    record(f"{'fp8' if fp8 else 'bf16'}_default_decision_h{heads}", ok, **detail)


@guarded
def flashmla_auto_runs(rt, torch, layout):
    gen = torch.Generator(device="cuda").manual_seed(11)
    scale = rt.softmax_scale_for(128, 64, 40.0, 1.0)
    fp8 = layout != "bf16-576"
    d = decision(kv_cache_dtype="fp8_e4m3" if fp8 else "bfloat16", kv_cache_layout=layout,
                 prefill_backend="flashmla_auto", decode_backend="flashmla_kv" if fp8 else "fa3")
    a = rt.SparseMLAAdapter.from_decision(d, device="cuda", softmax_scale=scale, num_heads=128,
                                          phases=("prefill",))
    prob = problem(torch, gen, extend=(300, 50), prefix=(0, 3000), heads=128)
    cache = rt.quantize_fp8_656(prob["kv"], pow2_scales=False) if fp8 else prob["kv"].to(torch.bfloat16)
    kv_rows = rt.dequantize_fp8_656(cache, torch.float32) if fp8 else cache.float()
    plan = a.plan_prefill(prob["extend"], prob["seq"])
    out = a.prefill(prob["q"], cache, prob["topk"], prob["page_table"], plan)
    err = rel(out[:-1], reference(rt, prob, kv_rows, scale)[:-1])
    want = "flashmla_kv" if fp8 else "flashmla_sparse"
    record(f"flashmla_auto_{layout}", plan.kernel_backend == want and err <= (2e-2 if fp8 else 1e-2),
           kernel=plan.kernel_backend, rel_err=err)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
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
    print(json.dumps(env), flush=True)
    quantiser_matches_flashmla(rt, torch)
    for dtype in ("bfloat16", "fp8_e4m3"):
        for heads in (128, 16):
            decision_runs(rt, torch, kv_cache_dtype=dtype, heads=heads)
    for layout in ("bf16-576", "fp8-656-blockwise"):
        flashmla_auto_runs(rt, torch, layout=layout)
    passed = sum(r["passed"] for r in RESULTS)
    print(f"{passed}/{len(RESULTS)} checks passed", flush=True)
    with open(f"{args.out}/gpu_flashmla_check.json", "w") as f:
        json.dump({"environment": env, "results": RESULTS}, f, indent=1, default=str)


if __name__ == "__main__":
    main()
