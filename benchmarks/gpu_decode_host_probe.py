"""Where an eager decode transform's host time goes (issue 12, item 2), on a CUDA machine.

Host µs per call, measured in turns (A B C … A B C …, median of rounds), decode 64 rows × K 2048:
a 64-element torch fill (the floor of any launch from Python), sglang 0.5.23's decode transform
(read from its wheel), ours through the API, our decode launcher, the compiled kernel's launcher
called with precomputed arguments (no checks, no key), Triton's JIT entry on the same kernel, and
the C launch function called with the exact arguments Triton's Python launcher passed it once
(captured; what bypassing that Python layer would leave).

    python benchmarks/gpu_decode_host_probe.py --out DIR [--sglang-wheels .whl_sg]
"""
from __future__ import annotations

import argparse
import json
import time

from runtime_bench_common import environment, import_runtime, load_sglang_transforms, sparse_topk


def turns(fns, torch, rounds=11, calls=500):
    for fn in fns.values():
        for _ in range(50):
            fn()
    torch.cuda.synchronize()
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            times[name].append((time.perf_counter() - start) / calls * 1e6)
            torch.cuda.synchronize()
    return {name: sorted(v)[len(v) // 2] for name, v in times.items()}


def probe(rt, tt, sg, torch, gen, rows, width):
    k = 2048
    pt = torch.randint(0, 1 << 24, (rows, width), generator=gen, device="cuda", dtype=torch.int32)
    topk = sparse_topk(rows, k, width, 0.25, "cuda", gen)
    out = torch.empty(rows, k, dtype=torch.int32, device="cuda")
    out_sg = torch.empty_like(out)
    small = torch.empty(64, dtype=torch.int32, device="cuda")
    tt.launch_decode(pt, topk, 1, out)
    key = next(k_ for k_ in tt._DECODE if k_[1] == k and k_[3] == (rows >= 512))
    run, function, meta, gy, k_, ps, block, t64, p64 = tt._DECODE[key]
    stream = torch.cuda.current_stream().cuda_stream
    kargs = (topk.data_ptr(), pt.data_ptr(), out.data_ptr(), pt.stride(0), width, k_, ps, block, t64, p64)
    block_, warps = tt._plain_block(k, rows, False)

    def raw():
        run(rows, gy, 1, stream, function, meta, None, None, None, *kargs)

    def jit():
        tt._decode_kernel_addr[(rows, gy)](*kargs, num_warps=warps)

    captured = {}
    c_launch = getattr(run, "launch", None)
    if c_launch is not None:
        def recorder(*a):
            captured["args"] = a
            return c_launch(*a)
        run.launch = recorder
        raw()
        run.launch = c_launch
    fns = {"torch_fill": lambda: small.fill_(0),
           "sglang_0523": lambda: sg.transform_index_page_table_decode(pt, topk, result=out_sg),
           "ours_api": lambda: rt.transform_index_page_table_decode(pt, topk, 1, out, impl="triton"),
           "ours_launch_decode": lambda: tt.launch_decode(pt, topk, 1, out),
           "compiled_run_precomputed": raw,
           "triton_jit_same_kernel": jit}
    if "args" in captured:
        cargs = captured["args"]
        fns["c_launch_captured_args"] = lambda: c_launch(*cargs)
    ref = sg.transform_index_page_table_decode(pt, topk)
    checks = {}
    for name in ("ours_api", "ours_launch_decode", "compiled_run_precomputed", "triton_jit_same_kernel",
                 "c_launch_captured_args"):
        if name in fns:
            out.fill_(-7)
            fns[name]()
            torch.cuda.synchronize()
            checks[name] = bool(torch.equal(out, ref))
    host = turns(fns, torch)
    row = dict(rows=rows, k=k, width=width, host_us=host, output_equal_to_sglang=checks,
               launcher_type=type(run).__name__, captured_arg_count=len(captured.get("args", ())))
    return row


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
    for rows, width in ((64, 32768), (1024, 8192)):
        row = probe(rt, tt, sg, torch, gen, rows, width)
        results["shapes"].append(row)
        print(json.dumps(row), flush=True)
    with open(f"{args.out}/gpu_decode_host_probe.json", "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
