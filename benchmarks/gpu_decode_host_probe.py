"""Where an eager decode transform's host time goes (issue 12, item 2), on a CUDA machine.

Host µs per call, measured in turns (A B C … A B C …, median of rounds), decode × K 2048: a
64-element torch fill (the floor of any launch from Python), sglang 0.5.23's decode transform (read
from its wheel), ours through the API, our decode launcher, the C launch it calls, with arguments
and stream precomputed (no checks, no key), Triton's JIT entry on the same compiled kernel, and a
prefill call through the API (the general launcher) next to sglang's prefill. Every variant's
output is compared with sglang's.

    python benchmarks/gpu_decode_host_probe.py --out DIR [--sglang-wheels .whl_sg]
"""
from __future__ import annotations

import argparse
import json

from runtime_bench_common import environment, host_us_interleaved, import_runtime, load_sglang_transforms, sparse_topk


def probe(rt, tt, sg, torch, gen, rows, width):
    k = 2048
    pt = torch.randint(0, 1 << 24, (rows, width), generator=gen, device="cuda", dtype=torch.int32)
    topk = sparse_topk(rows, k, width, 0.25, "cuda", gen)
    out = torch.empty(rows, k, dtype=torch.int32, device="cuda")
    out_sg = torch.empty_like(out)
    small = torch.empty(64, dtype=torch.int32, device="cuda")
    tt.launch_decode(pt, topk, 1, out)
    key = next(k_ for k_ in tt._DECODE if k_[1] == k and k_[3] == (rows >= 512))
    launch, function, coop, pdl, meta, gy, k_, ps, block, t64, p64 = tt._DECODE[key]
    stream = torch.cuda.current_stream().cuda_stream
    kargs = (topk.data_ptr(), pt.data_ptr(), out.data_ptr(), pt.stride(0), width, k_, ps, block, t64, p64)
    _, warps = tt._plain_block(k, rows, False)

    def c_launch():
        launch(rows, gy, 1, stream, function, coop, pdl, None, None, meta, None, None, None, *kargs)

    def jit():
        tt._decode_kernel_addr[(rows, gy)](*kargs, num_warps=warps)

    # a ragged prefill batch of the same size (one request per 16 rows) through the API
    cu = torch.arange(0, rows + 1, 16, device="cuda", dtype=torch.int32)
    pt_pre = pt[: rows // 16].contiguous()
    out_pre = torch.empty_like(out)
    ext = [16] * (rows // 16)
    fns = {"torch_fill": lambda: small.fill_(0),
           "sglang_0523": lambda: sg.transform_index_page_table_decode(pt, topk, result=out_sg),
           "ours_api": lambda: rt.transform_index_page_table_decode(pt, topk, 1, out, impl="triton"),
           "ours_launch_decode": lambda: tt.launch_decode(pt, topk, 1, out),
           "c_launch_precomputed": c_launch if launch is not None else None,
           "triton_jit_same_kernel": jit,
           "prefill_sglang_0523": lambda: sg.transform_index_page_table_prefill(pt_pre, topk, ext, cu_seqlens_q=cu),
           "prefill_ours_api": lambda: rt.transform_index_page_table_prefill(
               pt_pre, topk, page_size=1, out=out_pre, cu_extend_lens=cu, impl="triton")}
    fns = {name: fn for name, fn in fns.items() if fn is not None}
    ref = sg.transform_index_page_table_decode(pt, topk)
    checks = {}
    for name in ("ours_api", "ours_launch_decode", "c_launch_precomputed", "triton_jit_same_kernel"):
        if name in fns:
            out.fill_(-7)
            fns[name]()
            torch.cuda.synchronize()
            checks[name] = bool(torch.equal(out, ref))
    out_pre.fill_(-7)
    fns["prefill_ours_api"]()
    checks["prefill_ours_api"] = bool(torch.equal(out_pre, fns["prefill_sglang_0523"]()))
    host = host_us_interleaved(fns, torch, rounds=11)
    return dict(rows=rows, k=k, width=width, host_us=host, output_equal_to_sglang=checks,
                direct_c_launch=launch is not None)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--sglang-wheels", default=".whl_sg")
    args = ap.parse_args()
    import torch

    rt, _ = import_runtime()
    from nsa_policy.runtime import _triton_transforms as tt

    sg = load_sglang_transforms(args.sglang_wheels)
    gen = torch.Generator(device="cuda").manual_seed(0)
    results = {"environment": environment(), "shapes": []}
    for rows, width in ((64, 32768), (256, 131072), (1024, 8192)):
        row = probe(rt, tt, sg, torch, gen, rows, width)
        results["shapes"].append(row)
        print(json.dumps(row), flush=True)
    with open(f"{args.out}/gpu_decode_host_probe.json", "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
