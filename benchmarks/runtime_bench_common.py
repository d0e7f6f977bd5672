"""Shared pieces of the GPU runtime scripts: imports, environment record, inputs, baselines."""
from __future__ import annotations

import datetime
import importlib
import pathlib
import platform
import sys
import time
import types

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def import_runtime():
    """nsa_policy.runtime; if the policy package's own deps (pydantic…) are missing on the GPU
    machine, load the runtime subpackage alone (it needs only torch/triton/flashinfer)."""
    try:
        return importlib.import_module("nsa_policy.runtime"), None
    except ImportError as exc:
        for name in [m for m in sys.modules if m == "nsa_policy" or m.startswith("nsa_policy.")]:
            del sys.modules[name]
        pkg = types.ModuleType("nsa_policy")
        pkg.__path__ = [str(ROOT / "nsa_policy")]
        sys.modules["nsa_policy"] = pkg
        return importlib.import_module("nsa_policy.runtime"), f"policy package not importable ({exc!r})"


def environment() -> dict:
    import torch

    env = {
        "measured_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
    }
    for mod in ("triton", "flashinfer"):
        try:
            env[mod] = importlib.import_module(mod).__version__
        except Exception as exc:
            env[mod] = f"unavailable: {exc!r}"
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        env.update(device=p.name, capability=f"{p.major}.{p.minor}", sms=p.multi_processor_count,
                   memory_gib=round(p.total_memory / 2 ** 30, 1))
    return env


def sparse_topk(num_tokens: int, k: int, row_len: int, minus_one_fraction: float, device, gen=None,
                dtype=None):
    """[T, K] positions uniform in [0, row_len), a fraction of each row's entries set to −1."""
    import torch

    dtype = dtype or torch.int32
    topk = torch.randint(0, row_len, (num_tokens, k), device=device, dtype=torch.int64, generator=gen)
    drop = torch.rand(num_tokens, k, device=device, generator=gen) < minus_one_fraction
    return topk.masked_fill_(drop, -1).to(dtype)


def mla_pool(torch, gen, pool: int, page: int):
    """A bf16 KV pool [pool, 576] laid out in `page`-token pages placed at random (sglang's DSA
    page size is 64): (kv, the page order, the token table [1, pool] that expands it)."""
    kv = torch.randn(pool, 576, generator=gen, device="cuda").to(torch.bfloat16)
    pages = torch.randperm(pool // page, generator=gen, device="cuda").to(torch.int32)
    page_table = (pages[:, None] * page + torch.arange(page, device="cuda", dtype=torch.int32)).reshape(1, -1)
    return kv, pages, page_table


def sglang_shaped_rows(torch, gen, t: int, k: int, pages, page_table, page: int, context: int = 0):
    """Two requests' top-k rows as sglang's indexer writes them: the first has no prefix, so its
    token i has i + 1 positions then −1s (rows partly −1); the second has `context` tokens of KV
    (default: nearly the whole pool), so its rows hold k random positions. Returns (top-k, token
    table, block table, extend_lens, seq_lens); each token-table row is the expansion of its
    block-table row, so both give the same slots."""
    pool, half = page_table.shape[1], t // 2
    kv_len = context or pool - half
    cols = torch.arange(k, device="cuda")
    first = torch.where(cols[None, :] <= torch.arange(half, device="cuda")[:, None], cols[None, :], -1)
    second = torch.randint(0, kv_len - (t - half), (t - half, k), generator=gen, device="cuda")
    topk = torch.cat([first, second]).to(torch.int32)
    start = page * (half // page)
    table = torch.stack([page_table[0, :kv_len], page_table[0, start:start + kv_len]])
    width = -(-kv_len // page)
    block_table = torch.stack([pages[:width], pages[half // page: half // page + width]])
    return topk, table, block_table, [half, t - half], [half, kv_len]


def sglang_prefill_transform(page_table, topk_indices, extend_lens_cpu):
    """sglang 0.5.10's prefill transform algorithm (re-implemented): a Python loop over requests,
    one torch gather per request on the request's page-table row, then −1 where topk < 0."""
    import torch

    result = torch.empty_like(topk_indices, dtype=torch.int32)
    offset = 0
    for i, n in enumerate(extend_lens_cpu):
        rows = topk_indices[offset: offset + n]
        out = result[offset: offset + n]
        torch.gather(page_table[i].unsqueeze(0).expand(n, -1).to(torch.int32), 1,
                     rows.clamp(min=0), out=out)
        out[rows < 0] = -1
        offset += n
    return result


def decision(**kw):
    """A duck-typed decision (what SparseMLAAdapter.from_decision reads)."""
    base = dict(applies=True, device_class="sm90", kv_cache_dtype="bfloat16",
                kv_cache_layout="bf16-576", prefill_backend="fa3", decode_backend="fa3",
                page_size=64, index_topk=2048, dense_attn_kv_len_threshold=2048,
                heads_per_rank=None, runtime=None, errors=[])
    base.update(kw)
    return types.SimpleNamespace(**base)


def load_sglang_transforms(wheel_dir: str = ".whl"):
    """sglang 0.5.23's own transform module, read out of the sglang wheel at run time and loaded
    by path (not vendored, not re-implemented): `sglang/kernels/ops/attention/dsa/transform_index.py`.
    The wheel is cp311; only this pure-Python Triton file is needed, so it is not installed."""
    import glob
    import importlib.util
    import tempfile
    import zipfile

    wheels = sorted(glob.glob(str(ROOT / wheel_dir / "sglang-0.5.23-*.whl")))
    if not wheels:
        raise FileNotFoundError(f"no sglang-0.5.23 wheel under {ROOT / wheel_dir} "
                                f"(pip download --no-deps sglang==0.5.23 -d {wheel_dir})")
    member = "sglang/kernels/ops/attention/dsa/transform_index.py"
    target = pathlib.Path(tempfile.mkdtemp(prefix="sglang0523_")) / "transform_index.py"
    with zipfile.ZipFile(wheels[0]) as z:
        target.write_bytes(z.read(member))
    spec = importlib.util.spec_from_file_location("sglang_0523_transform_index", target)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.__wheel__ = pathlib.Path(wheels[0]).name
    return module


# ---------------------------------------------------------------- timing (every GPU runtime script)
def bench(fn, rep_ms=200):
    """GPU time per call, ms: triton's do_bench median (L2 flushed before each call)."""
    import triton.testing

    return triton.testing.do_bench(fn, warmup=25, rep=rep_ms, return_mode="median")


def bench_interleaved(fns: dict, torch, iters=30, warmup=3) -> dict:
    """GPU ms of each call of each function, the functions taken in turns within every iteration
    (rotating the order), L2 flushed before each call as do_bench does: a slow drift of the GPU's
    clocks hits all of them alike, so per-iteration ratios compare like with like."""
    cache = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    names = list(fns)
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    torch.cuda.synchronize()
    events = {n: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(iters)] for n in names}
    for i in range(iters):
        k = i % len(names)
        for n in names[k:] + names[:k]:
            cache.zero_()
            start, end = events[n][i]
            start.record()
            fns[n]()
            end.record()
    torch.cuda.synchronize()
    return {n: [s.elapsed_time(e) for s, e in events[n]] for n in names}


def cold_graph_times(fns: dict, torch, calls=20, flush_mb=128) -> dict:
    """Per-call GPU ms of each function with a cold L2, at a finer resolution than one event pair
    per call: a CUDA graph of `calls` × (zero a flush buffer, call) is replayed (do_bench median),
    and a graph of the flushes alone is subtracted. (CUDA events tick in ≈ 0.5 µs steps, as large
    as the differences between two ≈ 19 µs kernels.)"""
    cache = torch.empty(flush_mb << 20, dtype=torch.int8, device="cuda")

    def capture(body):
        body()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            body()
            torch.cuda.synchronize()
            with torch.cuda.graph(graph):
                for _ in range(calls):
                    body()
        torch.cuda.current_stream().wait_stream(stream)
        return graph

    flush_only = capture(lambda: cache.zero_())
    graphs = {name: capture(lambda fn=fn: (cache.zero_(), fn())) for name, fn in fns.items()}
    out = {}
    for name, graph in graphs.items():
        base = bench(flush_only.replay)
        out[name] = (bench(graph.replay) - base) / calls
    return out


def median(values):
    v = sorted(values)
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2


def graph_time(fn, torch, calls=20):
    """Per-call time from replaying a graph of `calls` launches (launch gaps removed)."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
    torch.cuda.current_stream().wait_stream(stream)
    return bench(graph.replay) / calls


def host_us_interleaved(fns: dict, torch, rounds=9, calls=500, warmup=50):
    """Host µs per eager call of each function: loops of launches with no synchronisation inside
    (the GPU queue never fills at these sizes), measured in turns (A B C A B C …) so that drift of
    the host's speed hits all alike; median over rounds."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    times: dict = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            times[name].append((time.perf_counter() - start) / calls * 1e6)
            torch.cuda.synchronize()
    return {name: sorted(v)[len(v) // 2] for name, v in times.items()}


def host_us(fn, torch, calls=400, repeats=5):
    """Host µs per eager call of one function (median of `repeats` loops of `calls`)."""
    return host_us_interleaved({"fn": fn}, torch, rounds=repeats, calls=calls, warmup=20)["fn"]


def warm_up_clocks(torch, seconds=2.0):
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()


def copy_tbps(torch):
    """Device-to-device copy rate, TB/s counting bytes read plus written."""
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    ms = bench(lambda: y.copy_(x))
    return 2 * x.numel() / (ms * 1e-3) / 1e12
