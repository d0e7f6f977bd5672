"""SparseMLAAdapter: feeds one resolved decision's sparse-MLA kernels (docs/runtime.md).

Built once from the decision; everything that can be wrong about the backend, the device, the
KV layout or the installed flashinfer is refused at construction, never at the first call.
Per forward pass the engine calls `plan_prefill` / `plan_decode` once, then `prefill` / `decode`
once per layer with that plan. For `fa3` the plan holds flashinfer's planned wrapper and a CSR
index buffer; each layer only rewrites that buffer (the per-token counts, the clipped causal
lengths, are the same for every layer).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch

from nsa_policy.catalog.store import load_catalog
from nsa_policy.runtime import _flashinfer, _flashmla
from nsa_policy.runtime.device import DeviceLike, as_device, detect_device_class
from nsa_policy.runtime.errors import AdapterConfigError
from nsa_policy.runtime.quant import BYTES_656, FP8_MAX, dequantize_fp8_656, dequantize_fp8_per_tensor
from nsa_policy.runtime.reference import HEAD_DIM_QK, KV_LORA_RANK, sparse_mla_reference
from nsa_policy.runtime.transforms import (
    cumulative_extend_lens,
    transform_index_page_table_decode,
    transform_index_page_table_decode_compact,
    transform_index_page_table_decode_lengths,
    transform_index_page_table_prefill,
    transform_index_page_table_prefill_compact,
    transform_index_page_table_prefill_lengths,
    transform_into_csr,
)

PHASES = ("prefill", "decode")
IMPLEMENTED = ("trtllm", "flashinfer_sparse_mla", "fa3", "flashmla_sparse", "flashmla_kv",
               "flashmla_auto", "torch")
FLASHMLA = ("flashmla_sparse", "flashmla_kv", "flashmla_auto")
LAYOUTS = ("bf16-576", "fp8-576-per-tensor", "fp8-656-blockwise")
# Where this adapter's own code is narrower than the catalog's cells for a backend.
# sgl-flash-mla's legacy kernels: verified on an H200 only (docs/runtime.md); flashmla_sparse here reads
# bf16 KV only and flashmla_kv fp8 only (the catalog's dequant/requant paths are not implemented).
ADAPTER_VERIFIED_ON = {"flashmla_sparse": ("sm90",), "flashmla_kv": ("sm90",), "flashmla_auto": ("sm90",)}
ADAPTER_LAYOUTS = {"flashmla_sparse": ("bf16-576",), "flashmla_kv": ("fp8-656-blockwise",)}


def _catalog_tables() -> tuple[dict, dict, dict]:
    """Where each implemented backend runs, the layouts it reads, and who serves the others: from the
    catalog's backend entries (rules/catalog/backends.yaml owns these facts), narrowed where the
    adapter's code does less (ADAPTER_VERIFIED_ON, ADAPTER_LAYOUTS)."""
    catalog = load_catalog()
    runs_on: dict[str, Optional[tuple[str, ...]]] = {"torch": None}  # the reference runs anywhere
    layouts: dict[str, tuple[str, ...]] = {"torch": LAYOUTS}
    for name in IMPLEMENTED:
        if name in catalog.backends:
            runs_on[name] = tuple(c for c in catalog.runs_on(name)
                                  if c in ADAPTER_VERIFIED_ON.get(name, (c,)))
            layouts[name] = tuple(x for x in catalog.layouts_read(name)
                                  if x in ADAPTER_LAYOUTS.get(name, (x,)))
    # Backends the policy may choose that live in other kernel packages.
    others = {name: spec.served_by for name, spec in catalog.backends.items() if name not in IMPLEMENTED}
    return runs_on, layouts, others


RUNS_ON, BACKEND_LAYOUTS, OTHER_PACKAGES = _catalog_tables()
TRTLLM_PAGE_SIZES = (32, 64)  # flashinfer's trtllm-gen MLA accepts these block sizes
DEFAULT_WORKSPACE_BYTES = _flashinfer.WORKSPACE_BYTES  # trtllm / sm12x (sglang's 384 MiB)
FA3_WORKSPACE_BYTES = 128 << 20


def _int_at_least_1(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise AdapterConfigError(f"{name} must be an int >= 1, got {value!r}")
    return value


def backends_for(device_class: str) -> list[str]:
    return [b for b in IMPLEMENTED if RUNS_ON[b] is None or device_class in RUNS_ON[b]]


@dataclass
class ForwardPlan:
    """Per-forward-pass state, reused by every layer of that pass."""

    phase: str
    num_tokens: int
    softmax_scale: float
    cu_extend_lens: Optional[torch.Tensor] = None   # prefill: [B+1] offsets on the device
    # fa3 only
    kv_lens: Optional[torch.Tensor] = None          # [T] int32 = min(causal length, top-k)
    kv_indptr: Optional[torch.Tensor] = None        # [T+1] int32
    kv_indices: Optional[torch.Tensor] = None       # [Σ kv_lens] int32, rewritten per layer
    wrapper: Any = None
    generation: int = 0
    num_heads: Optional[int] = None
    q_dtype: Optional[torch.dtype] = None
    # the concrete kernel this pass runs (flashmla_auto resolved per batch by the planner)
    kernel_backend: Optional[str] = None
    # longest KV length in the batch (trtllm's max_seq_len hint); None = unknown
    max_kv_len: Optional[int] = None
    # flashmla_kv: FlashMLA's scheduler metadata, filled by the first layer, reused by the rest
    flashmla_meta: Any = None
    # flashmla_*: the transform's output buffers, reused by every layer
    slots: Optional[torch.Tensor] = None
    counts: Optional[torch.Tensor] = None
    slots_3d: Optional[torch.Tensor] = None         # slots viewed [T, 1, K] (FlashMLA's indices)
    q_padded: Optional[torch.Tensor] = None


def _causal_lengths(extend_lens: Sequence[int], seq_lens: Sequence[int]) -> torch.Tensor:
    """Per query token: prefix + position + 1, on the host (the engine keeps these lists)."""
    ext = torch.as_tensor(list(extend_lens), dtype=torch.int64)
    seq = torch.as_tensor(list(seq_lens), dtype=torch.int64)
    if ext.numel() != seq.numel():
        raise ValueError(f"extend_lens and seq_lens need one entry per request, got {ext.numel()} "
                         f"and {seq.numel()}")
    if bool((ext < 0).any()) or bool((seq < ext).any()):
        raise ValueError("each request needs 0 <= extend_len <= seq_len (seq_len = prefix + new tokens)")
    total = int(ext.sum())
    starts = torch.cumsum(ext, 0) - ext
    position = torch.arange(total, dtype=torch.int64) - torch.repeat_interleave(starts, ext)
    return torch.repeat_interleave(seq - ext, ext) + position + 1


class SparseMLAAdapter:
    """Runs absorbed sparse MLA for the decision's prefill and decode backends.

    RoPE contract: q's last 64 columns and the cache's rope part must already be rotated; the
    adapter applies no RoPE. On the fp8 paths this matters for the order of operations: sglang
    rotates inside its fp8 quantise step (`mla_rope_quantize_fp8` for trtllm's per-tensor fp8 q
    and KV; the 656-byte layout keeps rope in bf16, written after rotation), so the cache handed
    here holds rotated keys and the adapter's own q quantisation (trtllm fp8) runs on rotated q.
    """

    def __init__(self, *, backends: dict[str, str], device: torch.device, device_class: str,
                 kv_cache_layout: str, page_size: int, index_topk: int,
                 num_heads: Optional[int], softmax_scale: Optional[float], table_page_size: int,
                 transform_impl: str, workspace_bytes: Optional[int], kernels: dict[str, Any],
                 kv_scale_format: str = _flashinfer.DEFAULT_KV_SCALE_FORMAT,
                 planner: Any = None, fa3_max_pool_rows: Optional[int] = None,
                 flashinfer_version: Optional[str] = None) -> None:
        self.backends = dict(backends)
        self.device = device
        self.device_class = device_class
        self.kv_cache_layout = kv_cache_layout
        self.page_size = page_size
        self.index_topk = index_topk
        self.num_heads = num_heads
        self.softmax_scale = softmax_scale
        self.table_page_size = table_page_size
        self.transform_impl = transform_impl
        self.kv_scale_format = kv_scale_format
        self._kernels = kernels
        self._planner = planner
        self._fa3_max_pool_rows = fa3_max_pool_rows
        self._flashinfer_version = flashinfer_version
        self._generation = {phase: 0 for phase in PHASES}
        self._workspace = None
        self._counter: Optional[torch.Tensor] = None  # trtllm-gen's multi-CTA counters, zeroed once, reused
        self._counter_supported = False
        self._fa3_wrappers: dict[str, Any] = {}
        used = set(self.backends.values())
        if used & {"trtllm", "flashinfer_sparse_mla"}:
            # trtllm-gen keeps semaphores here: zeroed once, before the first use.
            self._workspace = torch.zeros(workspace_bytes or DEFAULT_WORKSPACE_BYTES,
                                          dtype=torch.uint8, device=device)
        if "trtllm" in used:
            accepted = _flashinfer.parameters(kernels["trtllm"].trtllm_batch_decode_with_kv_cache_mla)
            self._counter_supported = accepted is None or "multi_ctas_kv_counter_buffer" in accepted
        for phase, backend in self.backends.items():
            if backend == "fa3":
                float_ws = torch.empty(workspace_bytes or FA3_WORKSPACE_BYTES, dtype=torch.int8,
                                       device=device)
                self._fa3_wrappers[phase] = kernels["fa3"].BatchMLAPagedAttentionWrapper(
                    float_ws, backend="fa3")
        self._sm_count = (torch.cuda.get_device_properties(device).multi_processor_count
                          if device.type == "cuda" else 0)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_decision(
        cls, decision: Any, *, device: DeviceLike = None, device_class: Optional[str] = None,
        num_heads: Optional[int] = None, softmax_scale: Optional[float] = None,
        phases: Sequence[str] = PHASES, prefill_backend: Optional[str] = None,
        decode_backend: Optional[str] = None, table_page_size: int = 1,
        transform_impl: str = "auto", workspace_bytes: Optional[int] = None,
        kv_scale_format: str = _flashinfer.DEFAULT_KV_SCALE_FORMAT,
        flashinfer: Any = None, flash_mla: Any = None, kv_pool_tokens: Optional[int] = None,
    ) -> SparseMLAAdapter:
        """Check the decision against this device and the kernel packages, and build the adapter.

        `device_class` overrides detection (a device torch cannot query, or tests);
        `prefill_backend` / `decode_backend` override the decision's choice explicitly (e.g. 'fa3'
        for prefill on sm90, 'torch' for the reference); `phases` limits the adapter to one phase;
        `table_page_size` is the page size of the page table the engine passes (1: token slots);
        `kv_scale_format` says how the fp8-656 cache's fp32 scales were written: sglang's writer
        (and `quantize_fp8_656(pow2_scales=False)`) stores exact amax/448 ("arbitrary_fp32"), the
        power-of-two writer "pow2_fp32"; the sm12x kernel is told which. `workspace_bytes`:
        trtllm / sm12x workspace (default sglang's 384 MiB; the sm12x backend refuses less) and
        the fa3 float workspace (default 128 MiB). `flashinfer` / `flash_mla` replace those modules
        (tests: recording stand-ins with the same entry points and a `__version__`).
        `kv_pool_tokens`, rows in one layer's KV pool when known, lets a pool the installed fa3 kernel
        cannot address be refused here; every fa3 call checks its pool too."""
        errors = list(getattr(decision, "errors", None) or ())
        if errors:
            listed = "; ".join(getattr(e, "code", None) or str(e) for e in errors)
            raise AdapterConfigError(f"the decision was rejected by the policy ({listed}); "
                                     f"fix the inputs and resolve again before building an adapter")
        if not getattr(decision, "applies", False):
            raise AdapterConfigError("the decision does not apply (not a DSA model): there is no "
                                     "sparse attention to run")
        phases = tuple(phases)
        bad_phases = [p for p in phases if p not in PHASES] or ([] if phases else ["(none)"])
        if bad_phases:
            raise ValueError(f"phases must be a non-empty subset of {PHASES}, got {phases!r}")
        if kv_scale_format not in _flashinfer.KV_SCALE_FORMATS:
            raise ValueError(f"kv_scale_format must be one of {_flashinfer.KV_SCALE_FORMATS}, got "
                             f"{kv_scale_format!r}")
        dev = as_device(device)
        dev_class = device_class or detect_device_class(dev)
        layout = getattr(decision, "kv_cache_layout", None)
        if layout not in LAYOUTS:
            raise AdapterConfigError(f"kv_cache_layout must be one of {LAYOUTS}, got {layout!r}")
        page_size = _int_at_least_1("page_size", getattr(decision, "page_size", None))
        top_k = _int_at_least_1("index_topk", getattr(decision, "index_topk", None))
        _int_at_least_1("table_page_size", table_page_size)
        if kv_pool_tokens is not None:
            _int_at_least_1("kv_pool_tokens", kv_pool_tokens)
        if workspace_bytes is not None and (isinstance(workspace_bytes, bool)
                                            or not isinstance(workspace_bytes, int) or workspace_bytes < 1):
            raise ValueError(f"workspace_bytes must be an int >= 1, got {workspace_bytes!r}")
        if num_heads is None:
            num_heads = getattr(decision, "heads_per_rank", None)
        if softmax_scale is not None and not (isinstance(softmax_scale, (int, float)) and softmax_scale > 0):
            raise ValueError(f"softmax_scale must be a positive float, got {softmax_scale!r}")

        chosen = {"prefill": prefill_backend or getattr(decision, "prefill_backend", None),
                  "decode": decode_backend or getattr(decision, "decode_backend", None)}
        requested = {p: chosen[p] for p in phases}
        problems: list[str] = []
        for phase, backend in requested.items():
            problems += cls._backend_problems(phase, backend, dev, dev_class, layout, page_size, top_k,
                                              num_heads, real_kernels=(flash_mla if backend in FLASHMLA
                                                                       else flashinfer) is None)
        # _backend_problems refuses a missing (None) backend as unknown, so every one is a str here
        backends = {p: b for p, b in requested.items() if isinstance(b, str)}
        if (not problems and "flashinfer_sparse_mla" in backends.values() and flashinfer is None
                and (workspace_bytes or DEFAULT_WORKSPACE_BYTES) < _flashinfer.WORKSPACE_BYTES):
            problems.append(f"backend 'flashinfer_sparse_mla' needs a workspace of at least "
                            f"{_flashinfer.WORKSPACE_BYTES >> 20} MiB (sglang's size; flashinfer 0.7.4 "
                            f"raises during CUDA-graph capture when it is short), got {workspace_bytes} bytes")
        if problems:
            raise AdapterConfigError("; ".join(problems))

        kernels: dict[str, Any] = {}
        fi_version = fa3_rows = None
        for backend in sorted(set(backends.values()) - {"torch"}):
            if backend in FLASHMLA:
                if "flashmla" not in kernels:
                    kernels["flashmla"] = cls._flashmla_module(flash_mla)
                continue
            fi_version = getattr(flashinfer, "__version__", None) if flashinfer is not None \
                else _flashinfer.installed_version()
            _flashinfer.check_version(backend, fi_version, dev_class)
            if backend == "fa3":
                fa3_rows = _flashinfer.fa3_max_pool_rows(fi_version, HEAD_DIM_QK)
                why = _flashinfer.fa3_pool_problem(kv_pool_tokens or 0, fa3_rows, fi_version)
                if why:
                    raise AdapterConfigError(why)
            kernels[backend] = cls._entry_points(backend, flashinfer)
        cls._check_call_contracts(backends, kernels, dev_class, num_heads, flashinfer)
        planner = None
        if "flashmla_auto" in backends.values():
            from nsa_policy.runtime.planner import DEFAULT_FLASHMLA_AUTO_RATIO, BatchPlanner
            # dense MHA one-shot is the engine's business: the adapter only runs sparse batches
            planner = BatchPlanner(prefill_backend="flashmla_auto", decode_backend="flashmla_kv",
                                   device_class=dev_class,
                                   kv_cache_dtype="fp8_e4m3" if layout != "bf16-576" else "bfloat16",
                                   dense_attn_kv_len_threshold=0, mha_one_shot=False,
                                   flashmla_auto_ratio=getattr(getattr(decision, "runtime", None),
                                                               "flashmla_auto_ratio", DEFAULT_FLASHMLA_AUTO_RATIO))
        return cls(backends=backends, device=dev, device_class=dev_class, kv_cache_layout=layout,
                   page_size=page_size, index_topk=top_k, num_heads=num_heads,
                   softmax_scale=softmax_scale, table_page_size=table_page_size,
                   transform_impl=transform_impl, workspace_bytes=workspace_bytes, kernels=kernels,
                   kv_scale_format=kv_scale_format, planner=planner, fa3_max_pool_rows=fa3_rows,
                   flashinfer_version=fi_version)

    @staticmethod
    def _flashmla_module(flash_mla: Any) -> Any:
        version = getattr(flash_mla, "__version__", None) if flash_mla is not None \
            else _flashmla.installed_version()
        if version is None:
            raise AdapterConfigError(f"the FlashMLA backends need {_flashmla.DIST} >= "
                                     f"{_flashmla.MIN_VERSION}, which is not installed; install the "
                                     f"'flashmla' extra (with --no-deps on torch < 2.14.1)")
        if _flashinfer.parse_version(version) < _flashinfer.parse_version(_flashmla.MIN_VERSION):
            raise AdapterConfigError(f"the FlashMLA backends need {_flashmla.DIST} >= "
                                     f"{_flashmla.MIN_VERSION}, found {version}")
        return flash_mla if flash_mla is not None else _flashmla.load()

    @staticmethod
    def _check_call_contracts(backends, kernels, dev_class, num_heads, flashinfer) -> None:
        """The installed kernels must accept the keywords the adapter will pass."""
        if "flashinfer_sparse_mla" in backends.values():
            accepted = _flashinfer.parameters(
                kernels["flashinfer_sparse_mla"].trtllm_batch_decode_with_kv_cache_mla)
            if accepted is not None and "kv_scale_format" not in accepted:
                raise AdapterConfigError(
                    "backend 'flashinfer_sparse_mla': the installed flashinfer's "
                    "trtllm_batch_decode_with_kv_cache_mla takes no kv_scale_format, so it would read "
                    "the cache's fp32 scales as powers of two; upgrade flashinfer-python (0.7.x)")
            limit = _flashinfer.sm12x_max_heads(None) if flashinfer is None else _flashinfer.SM12X_MAX_HEADS
            if num_heads is not None and not 1 <= num_heads <= limit:
                raise AdapterConfigError(f"backend 'flashinfer_sparse_mla' on {dev_class} serves 1 to "
                                         f"{limit} query heads per rank, got {num_heads}")

    @staticmethod
    def _backend_problems(phase, backend, dev, dev_class, layout, page_size, top_k, num_heads,
                          real_kernels: bool) -> list[str]:
        valid_here = backends_for(dev_class)
        if backend not in IMPLEMENTED:
            where = OTHER_PACKAGES.get(backend)
            why = f"it is served by {where}, not by this adapter" if where else "unknown backend"
            return [f"{phase} backend {backend!r} on {dev_class}: {why}; this adapter implements "
                    f"{list(IMPLEMENTED)}, of which {valid_here} run on {dev_class}"]
        problems = []
        runs_on = RUNS_ON[backend]
        if runs_on is not None and dev_class not in runs_on:
            problems.append(f"{phase} backend {backend!r} runs on {', '.join(runs_on)}, not on "
                            f"{dev_class}; on {dev_class} the adapter can run {valid_here}")
        # (a stand-in kernel module runs wherever its caller says)
        if runs_on is not None and real_kernels and dev.type != "cuda":
            problems.append(f"{phase} backend {backend!r} needs a CUDA device, got {dev}")
        if layout not in BACKEND_LAYOUTS[backend]:
            problems.append(f"{phase} backend {backend!r} reads KV layout "
                            f"{' or '.join(BACKEND_LAYOUTS[backend])}, but the decision's layout is {layout!r}")
        if backend == "trtllm":
            if page_size not in TRTLLM_PAGE_SIZES:
                problems.append(f"{phase} backend 'trtllm' needs page_size in {TRTLLM_PAGE_SIZES}, "
                                f"got {page_size}")
            if top_k % 4:
                problems.append(f"{phase} backend 'trtllm' needs index_topk a multiple of 4, got {top_k}")
        if backend == "flashinfer_sparse_mla" and phase == "prefill" \
                and top_k % _flashinfer.SM12X_PREFILL_TOPK_MULTIPLE:
            problems.append(f"prefill backend 'flashinfer_sparse_mla' needs index_topk a multiple of "
                            f"{_flashinfer.SM12X_PREFILL_TOPK_MULTIPLE} (whole 64-wide index tiles), "
                            f"got {top_k}")
        if backend in FLASHMLA:
            if num_heads is not None and num_heads > _flashmla.HEAD_VARIANTS[-1]:
                problems.append(f"{phase} backend {backend!r} serves at most "
                                f"{_flashmla.HEAD_VARIANTS[-1]} query heads per rank, got {num_heads}")
            if backend != "flashmla_sparse" and layout == "fp8-656-blockwise" \
                    and page_size != _flashmla.KV_PAGE_SIZE:
                problems.append(f"{phase} backend {backend!r} reads the fp8-656 cache in pages of "
                                f"{_flashmla.KV_PAGE_SIZE} tokens, got page_size {page_size}")
        return problems

    @staticmethod
    def _entry_points(backend: str, flashinfer: Any) -> Any:
        if flashinfer is None:
            return _flashinfer.load(backend)
        try:
            if backend in ("trtllm", "flashinfer_sparse_mla"):
                return flashinfer.decode
            return flashinfer.mla
        except AttributeError as exc:
            raise AdapterConfigError(f"backend {backend!r}: the given flashinfer lacks {exc}") from exc

    # ------------------------------------------------------------------ planning
    def _scale(self, softmax_scale: Optional[float]) -> float:
        scale = softmax_scale if softmax_scale is not None else self.softmax_scale
        if scale is None:
            raise ValueError("softmax_scale is needed (give it here or to from_decision); for "
                             "DeepSeek-V3.2 it is softmax_scale_for(128, 64, 40, 1.0) ≈ 0.135234")
        return float(scale)

    def _backend(self, phase: str) -> str:
        if phase not in self.backends:
            raise ValueError(f"this adapter was built for {tuple(self.backends)} only, not {phase}")
        return self.backends[phase]

    def plan_prefill(self, extend_lens: Sequence[int], seq_lens: Optional[Sequence[int]] = None, *,
                     softmax_scale: Optional[float] = None, num_heads: Optional[int] = None,
                     q_dtype: torch.dtype = torch.bfloat16) -> ForwardPlan:
        """Once per prefill forward pass. extend_lens: new tokens per request (host list);
        seq_lens: prefix + new tokens per request (default: no prefix)."""
        backend = self._backend("prefill")
        extend_lens = list(extend_lens)
        kv_lens = extend_lens if seq_lens is None else list(seq_lens)
        num_tokens = sum(extend_lens)
        cu = cumulative_extend_lens(extend_lens, len(extend_lens), num_tokens, self.device)
        plan = ForwardPlan("prefill", num_tokens, self._scale(softmax_scale), cu_extend_lens=cu,
                           kernel_backend=backend, max_kv_len=max(kv_lens, default=0))
        if backend == "flashmla_auto":
            route = self._planner.plan(plan.max_kv_len, sum(kv_lens), num_tokens, "extend")
            plan.kernel_backend = route.backend
            if route.backend == "flashmla_sparse" and self.kv_cache_layout != "bf16-576":
                # (Blackwell's small-batch rule; flashmla_* run on sm90 only here, so unreachable)
                raise AdapterConfigError("flashmla_auto chose flashmla_sparse over an fp8 cache, which "
                                         "needs a dequantised bf16 copy the adapter does not make")
        if backend == "fa3":
            self._plan_fa3(plan, _causal_lengths(extend_lens, kv_lens), num_heads, q_dtype)
        self._plan_kernel(plan, num_heads)
        return plan

    def plan_decode(self, seq_lens: Sequence[int], *, softmax_scale: Optional[float] = None,
                    num_heads: Optional[int] = None, q_dtype: torch.dtype = torch.bfloat16) -> ForwardPlan:
        """Once per decode forward pass. seq_lens: KV length of each row, current token included."""
        backend = self._backend("decode")
        seq_lens = list(seq_lens)
        plan = ForwardPlan("decode", len(seq_lens), self._scale(softmax_scale),
                           kernel_backend=backend, max_kv_len=max(seq_lens, default=0))
        if backend == "flashmla_auto":
            plan.kernel_backend = "flashmla_kv" if self.kv_cache_layout != "bf16-576" else "flashmla_sparse"
        if backend == "fa3":
            lengths = torch.as_tensor(seq_lens, dtype=torch.int64)
            if bool((lengths < 1).any()):
                raise ValueError("seq_lens must be >= 1 (the decoded token is in the cache)")
            self._plan_fa3(plan, lengths, num_heads, q_dtype)
        self._plan_kernel(plan, num_heads)
        return plan

    def _plan_kernel(self, plan: ForwardPlan, num_heads: Optional[int]) -> None:
        heads = num_heads or self.num_heads
        if plan.kernel_backend == "flashinfer_sparse_mla" and heads is not None:
            limit = _flashinfer.SM12X_MAX_HEADS
            if not 1 <= heads <= limit:
                raise ValueError(f"flashinfer_sparse_mla serves 1 to {limit} query heads, got {heads}")
        if plan.kernel_backend == "trtllm" and self._counter_supported:
            # sized for the largest head count when it is not known yet; grown, never shrunk
            need = _flashinfer.multi_cta_counter_bytes(plan.num_tokens, heads or 128, self._sm_count)
            if self._counter is None or self._counter.numel() < need:
                self._counter = torch.zeros(need, dtype=torch.uint8, device=self.device)
        if plan.kernel_backend == "flashmla_kv":
            plan.flashmla_meta = self._kernels["flashmla"].get_mla_metadata()[0]

    def _plan_fa3(self, plan: ForwardPlan, causal_lengths: torch.Tensor, num_heads: Optional[int],
                  q_dtype: torch.dtype) -> None:
        heads = num_heads or self.num_heads
        if not heads:
            raise ValueError("fa3 needs the number of query heads per rank at plan time: give "
                             "num_heads here or to from_decision")
        counts = causal_lengths.clamp(max=self.index_topk).to(torch.int32)
        indptr = torch.zeros(counts.numel() + 1, dtype=torch.int32)
        torch.cumsum(counts, 0, out=indptr[1:])
        qo_indptr = torch.arange(counts.numel() + 1, dtype=torch.int32)
        dev = self.device
        plan.kv_lens = counts.to(dev)
        plan.kv_indptr = indptr.to(dev)
        plan.kv_indices = torch.zeros(int(indptr[-1]), dtype=torch.int32, device=dev)
        wrapper = self._fa3_wrappers[plan.phase]
        wrapper.plan(**_flashinfer.fa3_plan_call(
            qo_indptr=qo_indptr.to(dev), kv_indptr=plan.kv_indptr, kv_indices=plan.kv_indices,
            kv_len_arr=plan.kv_lens, num_heads=heads, softmax_scale=plan.softmax_scale,
            q_dtype=q_dtype, kv_dtype=torch.bfloat16))
        self._generation[plan.phase] += 1
        plan.wrapper, plan.generation = wrapper, self._generation[plan.phase]
        plan.num_heads, plan.q_dtype = heads, q_dtype

    # ------------------------------------------------------------------ per layer
    def prefill(self, q: torch.Tensor, kv_cache: torch.Tensor, topk_indices: torch.Tensor,
                page_table: torch.Tensor, plan: Optional[ForwardPlan] = None, *,
                q_rope: Optional[torch.Tensor] = None, extend_lens: Optional[Sequence[int]] = None,
                seq_lens: Optional[Sequence[int]] = None, softmax_scale: Optional[float] = None,
                q_scale: float = 1.0, k_scale: float = 1.0) -> torch.Tensor:
        """One layer of sparse prefill → [T, H, 512]. q: [T, H, 576], or latent [T, H, 512] with
        q_rope [T, H, 64]. kv_cache: the layer's KV pool (rows of 576 elements or 656 bytes).
        topk_indices [T, K] request-relative positions; page_table [B, W] (one row per request).
        Without a plan, one is built from extend_lens / seq_lens (costs a plan per layer)."""
        if plan is None:
            if extend_lens is None:
                raise ValueError("prefill needs a plan (plan_prefill) or extend_lens")
            plan = self.plan_prefill(extend_lens, seq_lens, softmax_scale=softmax_scale)
        return self._run("prefill", q, q_rope, kv_cache, topk_indices, page_table, plan,
                         softmax_scale, q_scale, k_scale)

    def decode(self, q: torch.Tensor, kv_cache: torch.Tensor, topk_indices: torch.Tensor,
               page_table: torch.Tensor, plan: Optional[ForwardPlan] = None, *,
               q_rope: Optional[torch.Tensor] = None, seq_lens: Optional[Sequence[int]] = None,
               softmax_scale: Optional[float] = None, q_scale: float = 1.0,
               k_scale: float = 1.0) -> torch.Tensor:
        """One layer of sparse decode → [R, H, 512]; row r of page_table serves query row r."""
        if plan is None:
            if seq_lens is None and self._backend("decode") == "fa3":
                raise ValueError("fa3 decode needs a plan (plan_decode) or seq_lens")
            plan = self.plan_decode(seq_lens if seq_lens is not None else [1] * topk_indices.shape[0],
                                    softmax_scale=softmax_scale)
            if seq_lens is None:
                plan.max_kv_len = None  # unknown: the kernels get the page-table width instead
        return self._run("decode", q, q_rope, kv_cache, topk_indices, page_table, plan,
                         softmax_scale, q_scale, k_scale)

    def _run(self, phase, q, q_rope, kv_cache, topk_indices, page_table, plan, softmax_scale,
             q_scale, k_scale) -> torch.Tensor:
        backend = self._backend(phase)
        if plan.phase != phase:
            raise ValueError(f"a {plan.phase} plan was given to {phase}()")
        scale = plan.softmax_scale
        if softmax_scale is not None and not math.isclose(softmax_scale, scale, rel_tol=1e-6):
            raise ValueError(f"softmax_scale {softmax_scale} differs from the plan's {scale}; plan again")
        kernel = plan.kernel_backend or backend
        flashmla = kernel == "flashmla_sparse" or kernel == "flashmla_kv"
        # FlashMLA takes one [T, H, 576] bf16 q: the caller's own tensor when it already is one
        # (no copy, and no nope/rope views made per layer)
        whole = flashmla and q_rope is None and q.dtype == torch.bfloat16 and (
            q.is_contiguous() or self._in_query_buffer(plan, q))
        q_nope, q_pe = self._split_q(q, q_rope, topk_indices.shape[0], views=not whole)
        if backend == "torch":
            return self._run_torch(phase, q_nope, q_pe, kv_cache, topk_indices, page_table, plan, k_scale)
        if backend == "fa3":
            return self._run_fa3(phase, q_nope, q_pe, kv_cache, topk_indices, page_table, plan)
        if flashmla:
            q_all = q if whole else torch.cat([q_nope, q_pe], dim=-1).to(torch.bfloat16)
            run = self._run_flashmla_sparse if kernel == "flashmla_sparse" else self._run_flashmla_kv
            return run(phase, q_all, kv_cache, topk_indices, page_table, plan)
        return self._run_trtllm_entry(phase, backend, q_nope, q_pe, kv_cache, topk_indices,
                                      page_table, plan, q_scale, k_scale)

    @staticmethod
    def _split_q(q, q_rope, num_tokens, views: bool = True):
        """(q_nope, q_pe) after the shape checks; with views=False and no q_rope, (q, None):
        checked only."""
        if q_rope is None:
            if q.dim() != 3 or q.shape[-1] != HEAD_DIM_QK:
                raise ValueError(f"q must be [T, H, {HEAD_DIM_QK}] (or latent [T, H, 512] with "
                                 f"q_rope), got shape {tuple(q.shape)}")
            q_nope, q_pe = (q[..., :KV_LORA_RANK], q[..., KV_LORA_RANK:]) if views else (q, None)
        else:
            if q.dim() != 3 or q.shape[-1] != KV_LORA_RANK or tuple(q_rope.shape) != (*q.shape[:2], 64):
                raise ValueError(f"with q_rope, q must be [T, H, 512] and q_rope [T, H, 64], got "
                                 f"{tuple(q.shape)} and {tuple(q_rope.shape)}")
            q_nope, q_pe = q, q_rope
        if q_nope.shape[0] != num_tokens:
            raise ValueError(f"q has {q_nope.shape[0]} tokens but topk_indices has {num_tokens} rows")
        return q_nope, q_pe

    def _kv_rows(self, kv_cache: torch.Tensor, allow_fp32: bool = False,
                 shape: tuple[int, ...] = (-1, HEAD_DIM_QK)) -> torch.Tensor:
        """The pool as [N, row] (576 elements, or 656 bytes for fp8-656), or for the 576-element
        layouts as `shape`: one view of a contiguous pool (a view per layer costs host time). fp32
        is accepted for a bf16-576 layout only by the torch reference."""
        if self.kv_cache_layout == "fp8-656-blockwise":
            if kv_cache.element_size() != 1 or kv_cache.shape[-1] != BYTES_656:
                raise ValueError(f"fp8-656-blockwise kv_cache must be bytes [..., {BYTES_656}], got "
                                 f"{kv_cache.dtype} {tuple(kv_cache.shape)}")
            return kv_cache.view(torch.uint8).reshape(-1, BYTES_656)
        if kv_cache.shape[-1] != HEAD_DIM_QK:
            raise ValueError(f"{self.kv_cache_layout} kv_cache must be [..., {HEAD_DIM_QK}], got "
                             f"{tuple(kv_cache.shape)}")
        want = torch.float8_e4m3fn if self.kv_cache_layout == "fp8-576-per-tensor" else torch.bfloat16
        if kv_cache.dtype != want and not (allow_fp32 and want == torch.bfloat16 and kv_cache.dtype == torch.float32):
            raise ValueError(f"{self.kv_cache_layout} kv_cache must be {want}, got {kv_cache.dtype}")
        return kv_cache.view(shape) if kv_cache.is_contiguous() else kv_cache.reshape(shape)

    def _slots(self, phase, topk_indices, page_table, plan, compact: bool,
               empty_row_slot: Optional[int] = None):
        if phase == "prefill":
            if compact:
                return transform_index_page_table_prefill_compact(
                    page_table, topk_indices, page_size=self.table_page_size,
                    cu_extend_lens=plan.cu_extend_lens, impl=self.transform_impl,
                    empty_row_slot=empty_row_slot)
            return transform_index_page_table_prefill(
                page_table, topk_indices, page_size=self.table_page_size,
                cu_extend_lens=plan.cu_extend_lens, impl=self.transform_impl)
        if compact:
            return transform_index_page_table_decode_compact(
                page_table, topk_indices, self.table_page_size, impl=self.transform_impl,
                empty_row_slot=empty_row_slot)
        return transform_index_page_table_decode(page_table, topk_indices, self.table_page_size,
                                                 impl=self.transform_impl)

    def _run_torch(self, phase, q_nope, q_pe, kv_cache, topk_indices, page_table, plan, k_scale):
        rows = self._kv_rows(kv_cache, allow_fp32=True)
        if self.kv_cache_layout == "fp8-656-blockwise":
            kv = dequantize_fp8_656(rows, torch.float32)
        elif self.kv_cache_layout == "fp8-576-per-tensor":
            kv = dequantize_fp8_per_tensor(rows, k_scale, torch.float32)
        else:
            kv = rows
        slots = self._slots(phase, topk_indices, page_table, plan, compact=False)
        q = torch.cat([q_nope, q_pe], dim=-1)
        out_dtype = q.dtype if q.dtype in (torch.bfloat16, torch.float16, torch.float32) else torch.bfloat16
        return sparse_mla_reference(q, kv, slots, plan.softmax_scale, out_dtype=out_dtype)

    def _run_fa3(self, phase, q_nope, q_pe, kv_cache, topk_indices, page_table, plan):
        if plan.wrapper is None or plan.generation != self._generation[phase]:
            raise ValueError(f"this {phase} plan is stale: a later plan_{phase} replaced it on the "
                             f"shared flashinfer wrapper; use the latest plan")
        if topk_indices.shape[0] != plan.num_tokens:
            raise ValueError(f"the plan is for {plan.num_tokens} tokens, topk_indices has "
                             f"{topk_indices.shape[0]} rows")
        if q_nope.shape[1] != plan.num_heads or q_nope.dtype != plan.q_dtype:
            raise ValueError(f"the plan is for {plan.num_heads} heads of {plan.q_dtype}, q has "
                             f"{q_nope.shape[1]} of {q_nope.dtype}")
        rows = self._kv_rows(kv_cache).view(-1, 1, HEAD_DIM_QK)
        # (one integer compare: an out-of-reach pool would give wrong rows, not an error)
        why = _flashinfer.fa3_pool_problem(rows.shape[0], self._fa3_max_pool_rows, self._flashinfer_version)
        if why:
            raise ValueError(why)
        transform_into_csr(page_table, topk_indices, plan.cu_extend_lens, self.table_page_size,
                           plan.kv_indptr, plan.kv_indices, pad_slot=0, impl=self.transform_impl)
        return plan.wrapper.run(q_nope=q_nope, q_pe=q_pe, ckv_cache=rows[..., :KV_LORA_RANK],
                                kpe_cache=rows[..., KV_LORA_RANK:])

    def _plan_buffers(self, plan, topk_indices):
        """[T, K] slots and [T] counts, allocated once per plan and rewritten by every layer."""
        shape = topk_indices.shape
        if plan.slots is None or plan.slots.shape != shape:
            plan.slots = torch.empty(shape, dtype=torch.int32, device=topk_indices.device)
            plan.counts = torch.empty(shape[0], dtype=torch.int32, device=topk_indices.device)
            plan.slots_3d = plan.slots.unsqueeze(1)
        return plan.slots, plan.counts

    def query_buffer(self, plan: ForwardPlan, num_heads: Optional[int] = None) -> torch.Tensor:
        """A bf16 [T, H, 576] tensor for this plan's q that the FlashMLA backends take without a
        copy: with fewer heads than a FlashMLA kernel serves (64 or 128), a view of the plan's
        zero-padded buffer, so the caller writes q there (e.g. `torch.cat([q_nope, q_rope], -1,
        out=buf)`, the concatenation sglang makes anyway) and the adapter skips its per-layer
        head-padding copy (4096 × 16 heads: 0.046 ms on the H200). Every other case: a new tensor.
        Its contents are the caller's; it stays valid while the plan is in use."""
        heads = num_heads or self.num_heads
        if not heads:
            raise ValueError("query_buffer needs the number of query heads (num_heads)")
        tokens = plan.num_tokens
        kernel = plan.kernel_backend or self._backend(plan.phase)
        if kernel in ("flashmla_sparse", "flashmla_kv") and heads not in _flashmla.HEAD_VARIANTS:
            target = _flashmla.padded_heads(heads)
            buf = plan.q_padded
            if buf is None or buf.shape != (tokens, target, HEAD_DIM_QK) or buf.device != self.device:
                buf = plan.q_padded = torch.zeros(tokens, target, HEAD_DIM_QK, dtype=torch.bfloat16,
                                                  device=self.device)
            return buf[:, :heads]
        return torch.empty(tokens, heads, HEAD_DIM_QK, dtype=torch.bfloat16, device=self.device)

    @staticmethod
    def _in_query_buffer(plan, q) -> bool:
        """Whether q is the view query_buffer() handed out (its real heads of the padded buffer)."""
        buf = plan.q_padded
        return (buf is not None and q.data_ptr() == buf.data_ptr() and q.dim() == 3
                and q.shape[0] == buf.shape[0] and q.shape[2] == HEAD_DIM_QK
                and q.stride() == buf.stride() and q.dtype == buf.dtype)

    def _padded_q(self, plan, q):
        """q with FlashMLA's head count (64 or 128): the zero heads live in a per-plan buffer,
        zeroed once, so each layer copies only its real heads (none when q was written into that
        buffer through query_buffer())."""
        heads = q.shape[1]
        if heads == 64 or heads == 128:  # a kernel variant already (_flashmla.HEAD_VARIANTS)
            return q
        target = _flashmla.padded_heads(heads)
        buf = plan.q_padded
        if buf is not None and buf.shape[1] == target and self._in_query_buffer(plan, q):
            return buf
        if buf is None or buf.shape != (q.shape[0], target, HEAD_DIM_QK) or buf.device != q.device:
            buf = plan.q_padded = q.new_zeros(q.shape[0], target, HEAD_DIM_QK)
        if q.element_size() == 2 and q.is_contiguous() and q.storage_offset() % 4 == 0:
            # moved as 8-byte words: torch's strided copy moves bf16 one element at a time
            # (0.093 ms for [4096, 16, 576] on the H200, runtime_h200_run7)
            buf.view(torch.int64)[:, :heads].copy_(q.view(torch.int64))
        else:
            buf[:, :heads].copy_(q)
        return buf

    def _run_flashmla_sparse(self, phase, q, kv_cache, topk_indices, page_table, plan):
        """FlashMLA sparse prefill (bf16 pool). The slots stay in place and each row's last valid
        position + 1 goes in as topk_length: the kernel skips the −1 tail of a short row and masks
        any −1 before it, so a row written valid-first (sglang's indexer) costs exactly its valid
        entries, without a packing scan in front of the kernel (runtime_h200_run9)."""
        heads = q.shape[1]
        out, counts = self._plan_buffers(plan, topk_indices)
        if phase == "prefill":
            transform_index_page_table_prefill_lengths(
                page_table, topk_indices, page_size=self.table_page_size, out=out, lengths=counts,
                cu_extend_lens=plan.cu_extend_lens, impl=self.transform_impl)
        else:
            transform_index_page_table_decode_lengths(page_table, topk_indices, self.table_page_size,
                                                      out, counts, impl=self.transform_impl)
        q = self._padded_q(plan, q)
        kwargs = _flashmla.sparse_prefill_call(
            q=q, kv=self._kv_rows(kv_cache, shape=(-1, 1, HEAD_DIM_QK)), indices=plan.slots_3d,
            sm_scale=plan.softmax_scale, topk_length=counts)
        out = self._kernels["flashmla"].flash_mla_sparse_fwd(**kwargs)[0]
        return out[:, :heads] if out.shape[1] != heads else out

    def _run_flashmla_kv(self, phase, q, kv_cache, topk_indices, page_table, plan):
        """FlashMLA sparse decode over the fp8-656 cache, each query token its own sequence.
        Rows keep their −1s (the kernel skips exactly −1); the scheduler metadata made by the
        plan is filled by the first layer and reused by the others."""
        num_tokens, heads = q.shape[:2]
        top_k = topk_indices.shape[1]
        if top_k != self.index_topk:
            raise ValueError(f"topk_indices has {top_k} columns, the decision's index_topk is "
                             f"{self.index_topk}")
        if plan.flashmla_meta is None:
            raise ValueError("flashmla_kv needs the plan made by plan_prefill / plan_decode")
        slots, _ = self._plan_buffers(plan, topk_indices)
        if phase == "prefill":
            transform_index_page_table_prefill(page_table, topk_indices, page_size=self.table_page_size,
                                               out=slots, cu_extend_lens=plan.cu_extend_lens,
                                               impl=self.transform_impl)
        else:
            transform_index_page_table_decode(page_table, topk_indices, self.table_page_size, slots,
                                              impl=self.transform_impl)
        q = self._padded_q(plan, q)
        rows = self._kv_rows(kv_cache)
        if rows.shape[0] % _flashmla.KV_PAGE_SIZE:
            raise ValueError(f"the fp8-656 pool must hold whole pages of {_flashmla.KV_PAGE_SIZE} "
                             f"tokens, got {rows.shape[0]} rows")
        kwargs = _flashmla.kv_decode_call(
            q=q.unsqueeze(1), k_cache=rows.view(-1, _flashmla.KV_PAGE_SIZE, 1, BYTES_656),
            indices=plan.slots_3d, sched_meta=plan.flashmla_meta,
            softmax_scale=plan.softmax_scale, block_table=self._empty_block_table(num_tokens))
        out = self._kernels["flashmla"].flash_mla_with_kvcache(**kwargs)[0][:, 0]
        return out[:, :heads] if out.shape[1] != heads else out

    def _empty_block_table(self, rows: int) -> torch.Tensor:
        # FlashMLA ignores block_table on the sparse path but its legacy op wants a tensor
        return torch.empty((rows, 0), dtype=torch.int32, device=self.device)

    def _run_trtllm_entry(self, phase, backend, q_nope, q_pe, kv_cache, topk_indices, page_table,
                          plan, q_scale, k_scale):
        num_tokens, heads = q_nope.shape[:2]
        top_k = topk_indices.shape[1]
        if top_k != self.index_topk:
            raise ValueError(f"topk_indices has {top_k} columns, the decision's index_topk is "
                             f"{self.index_topk}")
        # Valid slots first, per-row counts = the clipped causal lengths for a well-formed top-k.
        # trtllm-gen's native sparse kernel gives NaN for a row with no valid slot (CUDA-graph
        # padding rows): such a row attends to slot 0 with length 1, as sglang 0.5.23 does.
        trtllm_gen = backend == "trtllm"
        slots, counts = self._slots(phase, topk_indices, page_table, plan, compact=True,
                                    empty_row_slot=0 if trtllm_gen else None)
        q = torch.cat([q_nope, q_pe], dim=-1)
        if self.kv_cache_layout == "fp8-576-per-tensor":
            # trtllm-gen wants q and KV in one dtype; the scales are folded into bmm1/bmm2.
            # (clamped: a cast past ±448 would give NaN, e4m3fn has no infinity)
            query = (q.to(torch.float32) / q_scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
            bmm1, bmm2 = q_scale * k_scale * plan.softmax_scale, k_scale
        else:
            query = q.to(torch.bfloat16)
            bmm1, bmm2 = plan.softmax_scale, 1.0
        max_kv_len = plan.max_kv_len or page_table.shape[1] * self.table_page_size
        counter = None
        if trtllm_gen and self._counter_supported:
            need = _flashinfer.multi_cta_counter_bytes(num_tokens, heads, self._sm_count)
            if self._counter is None or self._counter.numel() < need:
                self._counter = torch.zeros(need, dtype=torch.uint8, device=self.device)
            counter = self._counter
        kwargs = _flashinfer.trtllm_sparse_call(
            query=query.view(num_tokens, 1, heads, HEAD_DIM_QK), kv_pool=self._kv_rows(kv_cache),
            workspace=self._workspace, block_tables=slots.unsqueeze(1), seq_lens=counts,
            top_k=top_k, page_size=self.page_size, bmm1_scale=bmm1, bmm2_scale=bmm2,
            kernel_backend="trtllm-gen" if trtllm_gen else "sparse", max_seq_len=max_kv_len,
            kv_scale_format=None if trtllm_gen else self.kv_scale_format, counter_buffer=counter)
        out = self._kernels[backend].trtllm_batch_decode_with_kv_cache_mla(**kwargs)
        return out.view(num_tokens, heads, KV_LORA_RANK)
