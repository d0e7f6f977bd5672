"""SparseMLAAdapter: feeds one resolved decision's sparse-MLA kernels (RUNTIME.md §3).

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

from nsa_policy.runtime import _flashinfer
from nsa_policy.runtime.device import DeviceLike, as_device, detect_device_class
from nsa_policy.runtime.errors import AdapterConfigError
from nsa_policy.runtime.quant import BYTES_656, FP8_MAX, dequantize_fp8_656, dequantize_fp8_per_tensor
from nsa_policy.runtime.reference import HEAD_DIM_QK, KV_LORA_RANK, sparse_mla_reference
from nsa_policy.runtime.transforms import (
    cumulative_extend_lens, transform_index_page_table_decode,
    transform_index_page_table_decode_compact, transform_index_page_table_prefill,
    transform_index_page_table_prefill_compact, transform_into_csr,
)

PHASES = ("prefill", "decode")
IMPLEMENTED = ("trtllm", "flashinfer_sparse_mla", "fa3", "torch")
RUNS_ON = {
    "trtllm": ("sm100", "sm103"),
    "flashinfer_sparse_mla": ("sm120", "sm121"),
    "fa3": ("sm90",),
    "torch": None,  # anywhere
}
LAYOUTS = ("bf16-576", "fp8-576-per-tensor", "fp8-656-blockwise")
BACKEND_LAYOUTS = {
    "trtllm": ("bf16-576", "fp8-576-per-tensor"),
    "flashinfer_sparse_mla": ("fp8-656-blockwise",),
    "fa3": ("bf16-576",),
    "torch": LAYOUTS,
}
# Backends the policy may choose that live in other kernel packages.
OTHER_PACKAGES = {
    "flashmla_sparse": "FlashMLA (sgl-kernel)",
    "flashmla_kv": "FlashMLA (sgl-kernel)",
    "flashmla_auto": "FlashMLA (sgl-kernel)",
    "flashmla_sparse_q8": "FlashMLA (sgl-kernel)",
    "tilelang": "tilelang",
    "aiter": "aiter (ROCm)",
}
TRTLLM_PAGE_SIZES = (32, 64)  # flashinfer's trtllm-gen MLA accepts these block sizes
DEFAULT_WORKSPACE_BYTES = 128 << 20


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
    """Runs absorbed sparse MLA for the decision's prefill and decode backends."""

    def __init__(self, *, backends: dict[str, str], device: torch.device, device_class: str,
                 kv_cache_layout: str, page_size: int, index_topk: int,
                 num_heads: Optional[int], softmax_scale: Optional[float], table_page_size: int,
                 transform_impl: str, workspace_bytes: int, kernels: dict[str, Any]) -> None:
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
        self._kernels = kernels
        self._generation = {phase: 0 for phase in PHASES}
        self._workspace = None
        self._fa3_wrappers: dict[str, Any] = {}
        used = set(self.backends.values())
        if used & {"trtllm", "flashinfer_sparse_mla"}:
            # trtllm-gen keeps semaphores here: zeroed once, before the first use.
            self._workspace = torch.zeros(workspace_bytes, dtype=torch.uint8, device=device)
        for phase, backend in self.backends.items():
            if backend == "fa3":
                float_ws = torch.empty(workspace_bytes, dtype=torch.int8, device=device)
                self._fa3_wrappers[phase] = kernels["fa3"].BatchMLAPagedAttentionWrapper(
                    float_ws, backend="fa3")

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_decision(
        cls, decision: Any, *, device: DeviceLike = None, device_class: Optional[str] = None,
        num_heads: Optional[int] = None, softmax_scale: Optional[float] = None,
        phases: Sequence[str] = PHASES, prefill_backend: Optional[str] = None,
        decode_backend: Optional[str] = None, table_page_size: int = 1,
        transform_impl: str = "auto", workspace_bytes: int = DEFAULT_WORKSPACE_BYTES,
        flashinfer: Any = None,
    ) -> "SparseMLAAdapter":
        """Check the decision against this device and flashinfer, and build the adapter.

        `device_class` overrides detection (a device torch cannot query, or tests);
        `prefill_backend` / `decode_backend` override the decision's choice explicitly (e.g. 'fa3'
        for prefill on sm90, 'torch' for the reference); `phases` limits the adapter to one phase
        (an sm90 bf16 decision prefills with flashmla_sparse, which lives in another package);
        `table_page_size` is the page size of the page table the engine passes (1: token slots);
        `flashinfer` replaces the flashinfer module (tests: a recording stand-in with the same
        entry points and a `__version__`)."""
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
        dev = as_device(device)
        dev_class = device_class or detect_device_class(dev)
        layout = getattr(decision, "kv_cache_layout", None)
        if layout not in LAYOUTS:
            raise AdapterConfigError(f"kv_cache_layout must be one of {LAYOUTS}, got {layout!r}")
        page_size = getattr(decision, "page_size", None)
        top_k = getattr(decision, "index_topk", None)
        for name, value in (("page_size", page_size), ("index_topk", top_k),
                            ("table_page_size", table_page_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise AdapterConfigError(f"{name} must be an int >= 1, got {value!r}")
        if num_heads is None:
            num_heads = getattr(decision, "heads_per_rank", None)
        if softmax_scale is not None and not (isinstance(softmax_scale, (int, float)) and softmax_scale > 0):
            raise ValueError(f"softmax_scale must be a positive float, got {softmax_scale!r}")

        chosen = {"prefill": prefill_backend or getattr(decision, "prefill_backend", None),
                  "decode": decode_backend or getattr(decision, "decode_backend", None)}
        backends = {p: chosen[p] for p in phases}
        problems: list[str] = []
        for phase, backend in backends.items():
            problems += cls._backend_problems(phase, backend, dev, dev_class, layout, page_size, top_k,
                                              real_kernels=flashinfer is None)
        if problems:
            raise AdapterConfigError("; ".join(problems))

        kernels: dict[str, Any] = {}
        version = getattr(flashinfer, "__version__", None) if flashinfer is not None \
            else _flashinfer.installed_version()
        for backend in sorted(set(backends.values()) - {"torch"}):
            _flashinfer.check_version(backend, version, dev_class)
            kernels[backend] = cls._entry_points(backend, flashinfer)
        return cls(backends=backends, device=dev, device_class=dev_class, kv_cache_layout=layout,
                   page_size=page_size, index_topk=top_k, num_heads=num_heads,
                   softmax_scale=softmax_scale, table_page_size=table_page_size,
                   transform_impl=transform_impl, workspace_bytes=workspace_bytes, kernels=kernels)

    @staticmethod
    def _backend_problems(phase, backend, dev, dev_class, layout, page_size, top_k,
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
        # (a stand-in flashinfer runs wherever its caller says)
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
        num_tokens = sum(extend_lens)
        cu = cumulative_extend_lens(extend_lens, len(extend_lens), num_tokens, self.device)
        plan = ForwardPlan("prefill", num_tokens, self._scale(softmax_scale), cu_extend_lens=cu)
        if backend == "fa3":
            lengths = _causal_lengths(extend_lens, extend_lens if seq_lens is None else seq_lens)
            self._plan_fa3(plan, lengths, num_heads, q_dtype)
        return plan

    def plan_decode(self, seq_lens: Sequence[int], *, softmax_scale: Optional[float] = None,
                    num_heads: Optional[int] = None, q_dtype: torch.dtype = torch.bfloat16) -> ForwardPlan:
        """Once per decode forward pass. seq_lens: KV length of each row, current token included."""
        backend = self._backend("decode")
        seq_lens = list(seq_lens)
        plan = ForwardPlan("decode", len(seq_lens), self._scale(softmax_scale))
        if backend == "fa3":
            lengths = torch.as_tensor(seq_lens, dtype=torch.int64)
            if bool((lengths < 1).any()):
                raise ValueError("seq_lens must be >= 1 (the decoded token is in the cache)")
            self._plan_fa3(plan, lengths, num_heads, q_dtype)
        return plan

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
        q_nope, q_pe = self._split_q(q, q_rope, topk_indices.shape[0])
        if backend == "torch":
            return self._run_torch(phase, q_nope, q_pe, kv_cache, topk_indices, page_table, plan, k_scale)
        if backend == "fa3":
            return self._run_fa3(phase, q_nope, q_pe, kv_cache, topk_indices, page_table, plan)
        return self._run_trtllm_entry(phase, backend, q_nope, q_pe, kv_cache, topk_indices,
                                      page_table, plan, q_scale, k_scale)

    @staticmethod
    def _split_q(q, q_rope, num_tokens):
        if q_rope is None:
            if q.dim() != 3 or q.shape[-1] != HEAD_DIM_QK:
                raise ValueError(f"q must be [T, H, {HEAD_DIM_QK}] (or latent [T, H, 512] with "
                                 f"q_rope), got shape {tuple(q.shape)}")
            q_nope, q_pe = q[..., :KV_LORA_RANK], q[..., KV_LORA_RANK:]
        else:
            if q.dim() != 3 or q.shape[-1] != KV_LORA_RANK or tuple(q_rope.shape) != (*q.shape[:2], 64):
                raise ValueError(f"with q_rope, q must be [T, H, 512] and q_rope [T, H, 64], got "
                                 f"{tuple(q.shape)} and {tuple(q_rope.shape)}")
            q_nope, q_pe = q, q_rope
        if q_nope.shape[0] != num_tokens:
            raise ValueError(f"q has {q_nope.shape[0]} tokens but topk_indices has {num_tokens} rows")
        return q_nope, q_pe

    def _kv_rows(self, kv_cache: torch.Tensor, allow_fp32: bool = False) -> torch.Tensor:
        """The pool as [N, row] (576 elements, or 656 bytes for fp8-656). fp32 is accepted for
        a bf16-576 layout only by the torch reference."""
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
        return kv_cache.reshape(-1, HEAD_DIM_QK)

    def _slots(self, phase, topk_indices, page_table, plan, compact: bool):
        if phase == "prefill":
            if compact:
                return transform_index_page_table_prefill_compact(
                    page_table, topk_indices, page_size=self.table_page_size,
                    cu_extend_lens=plan.cu_extend_lens, impl=self.transform_impl)
            return transform_index_page_table_prefill(
                page_table, topk_indices, page_size=self.table_page_size,
                cu_extend_lens=plan.cu_extend_lens, impl=self.transform_impl)
        if compact:
            return transform_index_page_table_decode_compact(
                page_table, topk_indices, self.table_page_size, impl=self.transform_impl)
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
        transform_into_csr(page_table, topk_indices, plan.cu_extend_lens, self.table_page_size,
                           plan.kv_indptr, plan.kv_indices, pad_slot=0, impl=self.transform_impl)
        rows = self._kv_rows(kv_cache).view(-1, 1, HEAD_DIM_QK)
        return plan.wrapper.run(q_nope=q_nope, q_pe=q_pe, ckv_cache=rows[..., :KV_LORA_RANK],
                                kpe_cache=rows[..., KV_LORA_RANK:])

    def _run_trtllm_entry(self, phase, backend, q_nope, q_pe, kv_cache, topk_indices, page_table,
                          plan, q_scale, k_scale):
        num_tokens, heads = q_nope.shape[:2]
        top_k = topk_indices.shape[1]
        if top_k != self.index_topk:
            raise ValueError(f"topk_indices has {top_k} columns, the decision's index_topk is "
                             f"{self.index_topk}")
        # Valid slots first, per-row counts = the clipped causal lengths for a well-formed top-k.
        slots, counts = self._slots(phase, topk_indices, page_table, plan, compact=True)
        q = torch.cat([q_nope, q_pe], dim=-1)
        if self.kv_cache_layout == "fp8-576-per-tensor":
            # trtllm-gen wants q and KV in one dtype; the scales are folded into bmm1/bmm2.
            # (clamped: a cast past ±448 would give NaN, e4m3fn has no infinity)
            query = (q.to(torch.float32) / q_scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
            bmm1, bmm2 = q_scale * k_scale * plan.softmax_scale, k_scale
        else:
            query = q.to(torch.bfloat16)
            bmm1, bmm2 = plan.softmax_scale, 1.0
        kwargs = _flashinfer.trtllm_sparse_call(
            query=query.view(num_tokens, 1, heads, HEAD_DIM_QK), kv_pool=self._kv_rows(kv_cache),
            workspace=self._workspace, block_tables=slots.unsqueeze(1), seq_lens=counts,
            top_k=top_k, page_size=self.page_size, bmm1_scale=bmm1, bmm2_scale=bmm2,
            kernel_backend="trtllm-gen" if backend == "trtllm" else "sparse")
        out = self._kernels[backend].trtllm_batch_decode_with_kv_cache_mla(**kwargs)
        return out.view(num_tokens, heads, KV_LORA_RANK)
