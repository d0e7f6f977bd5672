"""The GPU side of `nsa-policy bench`: time every backend this GPU can run, through the adapter, at
the operator's operating points, side by side, and check each output against the fp32 reference.

Imported only inside the command's run (it imports torch). Inputs are sglang-shaped: per request a
block table of 64-token pages placed at random in one shared pool, top-k rows of distinct
request-relative positions written valid-first (−1 after a short causal length).
"""
from __future__ import annotations

import datetime
import importlib
import importlib.metadata
import platform
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch

from nsa_policy.runtime.adapter import BACKEND_LAYOUTS, SparseMLAAdapter, backends_for
from nsa_policy.runtime.bench_report import (
    BenchRun,
    Environment,
    Excluded,
    Point,
    PolicyChoice,
    Settings,
    Timing,
)
from nsa_policy.runtime.errors import AdapterConfigError
from nsa_policy.runtime.quant import BYTES_656, dequantize_fp8_656, quantize_fp8_656
from nsa_policy.runtime.reference import HEAD_DIM_QK, softmax_scale_for, sparse_mla_reference
from nsa_policy.runtime.transforms import transform_index_page_table_decode, transform_index_page_table_prefill

PAGE = 64  # sglang's DSA KV page size; the block table the adapter reads uses it too
# One layer's KV pool, default 1M tokens (1.2 GB bf16, 0.7 GB fp8-656; far past the 60 MB L2): about
# what an H200 holds per layer for DeepSeek-V3.2 at TP 8 (≈ 40 GB of KV over 61 layers). Requests share
# pages where batch × context exceeds it.
POOL_TOKENS = 1 << 20
# Written before every timed call: flushes the 60 MB L2, and at ≈ 0.3 ms keeps the GPU busy while the
# host enqueues the adapter's launches (≈ 0.1 ms), so the time is the GPU's, not the host's. (A 256 MiB
# flush, ≈ 0.07 ms, let the host time in at small decode batches: 0.024 or 0.075 ms for one call.)
FLUSH_MIB = 1024
CHECK_ROWS = 64
TOLERANCE = {"bfloat16": 1e-2, "fp8_e4m3": 3e-2}  # measured 1.8e-3 / 7e-3 (docs/runtime.md)
# Planner routers: on sm90 flashmla_auto always runs one of the measured kernels (flashmla_kv or
# flashmla_sparse), so timing it again adds nothing; the reference is the yardstick, not a choice.
NOT_CHOICES = {"torch": "the fp32 reference (the yardstick, not a serving choice)",
               "flashmla_auto": "a router: on sm90 it runs flashmla_sparse (bf16) or flashmla_kv (fp8), "
                                "both measured here"}


def layout_bytes(layout: str) -> int:
    """Bytes per token per layer of a KV layout: the adapter's own row widths."""
    if layout == "fp8-656-blockwise":
        return BYTES_656
    elem = torch.finfo(torch.bfloat16).bits // 8 if layout == "bf16-576" else 1
    return HEAD_DIM_QK * elem


def _version(dist: str, module: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        try:
            return str(importlib.import_module(module).__version__)
        except Exception:  # noqa: BLE001 - a missing package is reported, not raised
            return "not installed"


def environment(device: str, device_class: str) -> Environment:
    props = torch.cuda.get_device_properties(0)
    return Environment(
        gpu=props.name, device=device, device_class=device_class, capability=f"{props.major}.{props.minor}",
        measured_utc=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        python=platform.python_version(), torch=torch.__version__, triton=_version("triton", "triton"),
        flashinfer=_version("flashinfer-python", "flashinfer"), sgl_flash_mla=_version("sgl-flash-mla", "flash_mla"))


@dataclass
class Spec:
    model: str
    device: str
    tp_size: int
    dp_size: Optional[int]
    enable_dp_attention: bool
    batches: list[int]
    contexts: list[int]
    prefill_tokens: list[int]
    kv_dtypes: list[str]
    decisions: dict[str, Any]  # KV dtype → the default policy's decision
    rounds: int = 20
    warmup: int = 3
    pool_tokens: int = POOL_TOKENS
    phases: tuple[str, ...] = ("prefill", "decode")
    progress: Optional[Callable[[int], None]] = None
    notes: list[str] = field(default_factory=list)


class Pools:
    """One bf16 pool and its fp8-656 quantisation (exact amax/448 scales, sglang's writer)."""

    def __init__(self, tokens: int, kv_dtypes: list[str], gen: torch.Generator):
        self.tokens = tokens
        self.bf16 = torch.empty(tokens, HEAD_DIM_QK, dtype=torch.bfloat16, device="cuda")
        chunk = 1 << 20
        for s in range(0, tokens, chunk):
            self.bf16[s:s + chunk] = torch.randn(min(chunk, tokens - s), HEAD_DIM_QK, generator=gen,
                                                 device="cuda").to(torch.bfloat16)
        self.fp8: Optional[torch.Tensor] = None
        if "fp8_e4m3" in kv_dtypes:
            self.fp8 = torch.empty(tokens, BYTES_656, dtype=torch.uint8, device="cuda")
            for s in range(0, tokens, chunk):
                self.fp8[s:s + chunk] = quantize_fp8_656(self.bf16[s:s + chunk], pow2_scales=False)

    def pool(self, kv: str) -> torch.Tensor:
        if kv == "bfloat16":
            return self.bf16
        assert self.fp8 is not None
        return self.fp8


def _block_table(requests: int, length: int, pages_in_pool: int, gen: torch.Generator) -> torch.Tensor:
    """Each request's pages at random in the pool; distinct pages while the pool holds them all."""
    width = -(-length // PAGE)
    if requests * width <= pages_in_pool:
        pages = torch.randperm(pages_in_pool, generator=gen, device="cuda")[:requests * width]
    else:
        pages = torch.randint(0, pages_in_pool, (requests * width,), generator=gen, device="cuda")
    return pages.to(torch.int32).reshape(requests, width)


def _topk_rows(causal: torch.Tensor, k: int, width: int, gen: torch.Generator) -> torch.Tensor:
    """[T, k] distinct positions in [0, causal[t]) valid-first, −1 after (as sglang's indexer writes)."""
    rows = causal.numel()
    out = torch.empty(rows, k, dtype=torch.int32, device="cuda")
    chunk = max(1, (1 << 27) // max(width, k))
    cols = torch.arange(width, device="cuda")
    for s in range(0, rows, chunk):
        c = causal[s:s + chunk]
        score = torch.rand(c.numel(), width, generator=gen, device="cuda")
        score.masked_fill_(cols[None, :] >= c[:, None], -1.0)
        val, idx = score.topk(min(k, width), dim=1)
        idx = idx.to(torch.int32).masked_fill_(val < 0, -1)
        if idx.shape[1] < k:
            idx = torch.cat([idx, idx.new_full((idx.shape[0], k - idx.shape[1]), -1)], dim=1)
        out[s:s + chunk] = idx
    return out


@dataclass
class Problem:
    phase: str
    context: int
    size: int
    requests: int
    q: torch.Tensor
    topk: torch.Tensor
    block_table: torch.Tensor
    extend_lens: list[int]
    seq_lens: list[int]


def make_problem(phase: str, context: int, size: int, heads: int, k: int, pools: Pools,
             gen: torch.Generator) -> Problem:
    pages = pools.tokens // PAGE
    if phase == "decode":
        requests, extend, length = size, 1, context
        causal = torch.full((size,), context, device="cuda", dtype=torch.int64)
        seq_lens, extend_lens = [context] * size, [1] * size
    else:
        # `size` new tokens: one request with a prefix up to `context`, or whole `context`-token requests
        requests = max(1, size // context) if size > context else 1
        extend = size // requests
        length = max(context, extend)
        prefix = length - extend
        causal = (prefix + torch.arange(extend, device="cuda", dtype=torch.int64) + 1).repeat(requests)
        seq_lens, extend_lens = [length] * requests, [extend] * requests
    rows = requests * extend
    q = (torch.randn(rows, heads, HEAD_DIM_QK, generator=gen, device="cuda")).to(torch.bfloat16)
    topk = _topk_rows(causal, k, length, gen)
    table = _block_table(requests, length, pages, gen)  # decode: one row per query row
    return Problem(phase, context, size, requests, q, topk, table, extend_lens, seq_lens)


def reference_error(prob: Problem, out: torch.Tensor, kv: str, pools: Pools, scale: float) -> float:
    """‖out − ref‖ / ‖ref‖ on CHECK_ROWS rows spread over the batch, the reference in fp32 on the
    same slots (for fp8: on the dequantised rows it reads)."""
    rows = torch.linspace(0, prob.q.shape[0] - 1, min(CHECK_ROWS, prob.q.shape[0]), device="cuda").long().unique()
    if prob.phase == "decode":
        slots = transform_index_page_table_decode(prob.block_table[rows], prob.topk[rows], PAGE, impl="torch")
    else:
        all_slots = transform_index_page_table_prefill(prob.block_table, prob.topk, prob.extend_lens,
                                                       page_size=PAGE, impl="torch")
        slots = all_slots[rows]
    valid = slots >= 0
    used = torch.unique(slots[valid].long())
    local = torch.searchsorted(used, slots.clamp(min=0).long()).to(torch.int32).masked_fill_(~valid, -1)
    if kv == "bfloat16":
        kv_rows = pools.bf16[used].float()
    else:
        kv_rows = dequantize_fp8_656(pools.pool(kv)[used], torch.float32)
    ref = sparse_mla_reference(prob.q[rows].float(), kv_rows, local, scale, out_dtype=torch.float32)
    assert isinstance(ref, torch.Tensor)  # no lse asked for
    got = out[rows].float()
    if not bool(torch.isfinite(got).all()):
        return float("inf")
    return float((got - ref).norm() / ref.norm().clamp(min=1e-30))


def _adapter(decision: Any, phase: str, backend: str, heads: int, scale: float,
             pool_tokens: int) -> SparseMLAAdapter:
    # the pool's size goes in so that a kernel which cannot address it is refused, not timed
    return SparseMLAAdapter.from_decision(
        decision, device="cuda", num_heads=heads, softmax_scale=scale, phases=(phase,),
        prefill_backend=backend if phase == "prefill" else None,
        decode_backend=backend if phase == "decode" else None, table_page_size=PAGE,
        kv_pool_tokens=pool_tokens)


def layer_call(ad: SparseMLAAdapter, prob: Problem, pool: torch.Tensor) -> Callable[[], torch.Tensor]:
    """One layer's call as an engine makes it, on a plan made once for the point (per forward pass)."""
    if prob.phase == "decode":
        plan = ad.plan_decode(prob.seq_lens)
        return lambda: ad.decode(prob.q, pool, prob.topk, prob.block_table, plan)
    plan = ad.plan_prefill(prob.extend_lens, prob.seq_lens)
    return lambda: ad.prefill(prob.q, pool, prob.topk, prob.block_table, plan)


def candidates(spec: Spec, device_class: str, heads: int, scale: float,
               pool_tokens: int) -> tuple[dict, list[Excluded]]:
    """(phase, kv) → {backend: adapter} for every backend the catalog lets run here on that layout and
    the installed kernel packages provide (the adapter refuses the rest at construction, with why)."""
    found: dict[tuple[str, str], dict[str, SparseMLAAdapter]] = {}
    excluded = []
    for kv in spec.kv_dtypes:
        decision = spec.decisions[kv]
        for phase in spec.phases:
            found[(phase, kv)] = {}
            for b in backends_for(device_class):
                if b in NOT_CHOICES:
                    excluded.append(Excluded(backend=b, phase=phase, kv_cache_dtype=kv, reason=NOT_CHOICES[b]))
                    continue
                layouts = BACKEND_LAYOUTS.get(b, ())
                if decision.kv_cache_layout not in layouts:
                    excluded.append(Excluded(backend=b, phase=phase, kv_cache_dtype=kv,
                                             reason=f"the adapter runs it on {' or '.join(layouts) or 'no layout'} "
                                                    f"only, not {decision.kv_cache_layout}"))
                    continue
                try:
                    found[(phase, kv)][b] = _adapter(decision, phase, b, heads, scale, pool_tokens)
                except (AdapterConfigError, ValueError, ImportError) as exc:
                    excluded.append(Excluded(backend=b, phase=phase, kv_cache_dtype=kv,
                                             reason=str(exc).splitlines()[0][:300]))
    return found, excluded


def timed_in_turns(fns: dict[str, Callable[[], torch.Tensor]], rounds: int, warmup: int,
                    flush: torch.Tensor) -> dict[str, list[float]]:
    names = list(fns)
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    torch.cuda.synchronize()
    events = {n: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(rounds)] for n in names}
    for i in range(rounds):
        k = i % len(names)  # rotate the order: no backend always follows the same one
        for n in names[k:] + names[:k]:
            flush.zero_()
            start, end = events[n][i]
            start.record()
            fns[n]()
            end.record()
    torch.cuda.synchronize()
    return {n: [s.elapsed_time(e) for s, e in events[n]] for n in names}


def warm_clocks(seconds: float = 2.0) -> None:
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()


def operating_points(spec: Spec) -> list[tuple[str, int, int]]:
    pts = []
    for phase in spec.phases:
        sizes = spec.batches if phase == "decode" else spec.prefill_tokens
        pts += [(phase, c, s) for c in spec.contexts for s in sizes]
    return pts


def run(spec: Spec, device_class: str) -> BenchRun:
    first = spec.decisions[spec.kv_dtypes[0]]
    heads = int(first.heads_per_rank)
    k = int(first.index_topk)
    scale = softmax_scale_for(128, 64, 40, 1.0)  # DeepSeek-V3.2 / GLM-5's yarn mscale (docs/runtime.md)
    gen = torch.Generator(device="cuda").manual_seed(0)
    pts = operating_points(spec)
    need = max(max(1, s // c) * max(c, s) if ph == "prefill" else s * c for ph, c, s in pts)
    pool_tokens = -(-min(spec.pool_tokens, need) // PAGE) * PAGE
    pools = Pools(pool_tokens, spec.kv_dtypes, gen)
    found, excluded = candidates(spec, device_class, heads, scale, pool_tokens)
    flush = torch.empty(FLUSH_MIB << 20, dtype=torch.int8, device="cuda")
    warm_clocks()
    points = []
    for phase, context, size in pts:
        prob = make_problem(phase, context, size, heads, k, pools, gen)
        fns: dict[str, Callable[[], torch.Tensor]] = {}
        timings: dict[str, Timing] = {}
        for kv in spec.kv_dtypes:
            for b, ad in found[(phase, kv)].items():
                key = f"{kv}/{b}"
                pool = pools.pool(kv)
                try:
                    fn = layer_call(ad, prob, pool)
                    err = reference_error(prob, fn(), kv, pools, scale)
                    fns[key] = fn
                    timings[key] = Timing(backend=b, kv_cache_dtype=kv, ms=None, rel_error=err,
                                          tolerance=TOLERANCE[kv])
                except Exception as exc:  # noqa: BLE001 - a failing backend is reported, never ranked
                    timings[key] = Timing(backend=b, kv_cache_dtype=kv, ms=None, tolerance=TOLERANCE[kv],
                                          error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}")
        if fns:
            times = timed_in_turns(fns, spec.rounds, spec.warmup, flush)
            for key, ms in times.items():
                srt = sorted(ms)
                med = srt[len(srt) // 2] if len(srt) % 2 else (srt[len(srt) // 2 - 1] + srt[len(srt) // 2]) / 2
                timings[key] = timings[key].model_copy(update={"ms": med, "ms_rounds": [round(x, 5) for x in ms]})
        points.append(Point(phase=phase, context=context, size=size, requests=prob.requests,  # type: ignore[arg-type]
                            timings=list(timings.values())))
        del prob, fns
        if spec.progress is not None:
            spec.progress(1)
    policy = [PolicyChoice(kv_cache_dtype=kv, kv_cache_layout=d.kv_cache_layout, prefill_backend=d.prefill_backend,
                           decode_backend=d.decode_backend, prefill_rule=d.provenance["prefill_backend"].rule,
                           decode_rule=d.provenance["decode_backend"].rule, policy=d.policy,
                           policy_digest=d.policy_digest)
              for kv, d in spec.decisions.items()]
    layouts = {d.kv_cache_layout for d in spec.decisions.values()}
    note = ("Block table of 64-token pages (the adapter's table_page_size=64); q passed as a [T, H, 576] "
            "tensor (copied into FlashMLA's padded buffer below 64 heads); the plan is made once per point "
            "(once per forward pass in an engine) and not timed. " + " ".join(spec.notes)).strip()
    return BenchRun(model=spec.model, tp_size=spec.tp_size, dp_size=spec.dp_size,
                    enable_dp_attention=spec.enable_dp_attention, heads_per_rank=heads, index_topk=k,
                    environment=environment(spec.device, device_class),
                    settings=Settings(rounds=spec.rounds, warmup_calls=spec.warmup, flush_mib=FLUSH_MIB,
                                      table_page_size=PAGE, checked_rows=CHECK_ROWS, pool_tokens=pool_tokens,
                                      note=note),
                    policy=policy, kv_bytes_per_token={lay: layout_bytes(lay) for lay in sorted(layouts)},
                    points=points, excluded=excluded)
