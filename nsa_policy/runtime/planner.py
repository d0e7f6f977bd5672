"""Per-batch prefill planner: dense MHA one-shot or sparse MLA, and which sparse kernel.

Pure Python on purpose (no torch import): the serving loop calls it once per batch, before any
tensor work, so it must cost well under a microsecond. The rules are sglang's NSA backend
(`set_nsa_prefill_impl`, sglang 0.5.10):

* dense MHA one-shot only for a plain extend (no speculative verify / draft extend), on a device
  with the MHA one-shot kernels (sm90, sm100-sm109), when the longest KV length in the batch is
  at most `dense_attn_kv_len_threshold`, the KV cache dtype is bf16 or fp8_e4m3, the summed KV
  lengths fit in `mha_chunk_capacity` (131072), and neither prefill context parallelism nor
  HiSparse is on;
* otherwise sparse MLA. `flashmla_auto` resolves per batch: bf16 KV → flashmla_sparse; fp8 KV →
  flashmla_kv, except on Blackwell (major 10) for a plain `extend` batch whose total KV tokens are
  below `flashmla_auto_ratio` (512) × query tokens, where flashmla_sparse (+ dequantised KV) wins;
* speculative verify / draft extend run the *decode* backend (sglang dispatches them so).

The hot path, `BatchPlanner.plan(...)`, takes the batch aggregates an engine already keeps
(longest KV length, summed KV lengths, query tokens) and returns one of a few prebuilt
`PrefillRoute` values, so a call allocates nothing.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Sequence

from nsa_policy.core.decision import RuntimeThresholds

__all__ = [
    "BatchPlanner",
    "PrefillRoute",
    "FORWARD_MODES",
    "mha_one_shot_supported",
]

# Forward modes, in sglang's words. "mixed" is an extend batch that also carries decode tokens:
# it may go dense, but flashmla_auto's Blackwell heuristic only looks at plain "extend".
FORWARD_MODES = ("extend", "mixed", "decode", "target_verify", "draft_extend")
_SPECULATIVE_MODES = ("target_verify", "draft_extend")
_DENSE_KV_DTYPES = ("bfloat16", "fp8_e4m3")

# sglang's NSA backend constants: one owner, the Decision's RuntimeThresholds defaults
DEFAULT_MHA_CHUNK_CAPACITY: int = RuntimeThresholds.model_fields["mha_chunk_capacity"].default
DEFAULT_FLASHMLA_AUTO_RATIO: int = RuntimeThresholds.model_fields["flashmla_auto_ratio"].default


class PrefillRoute(NamedTuple):
    """What one batch runs: `dense_mha` True → the dense MHA one-shot kernel, else sparse MLA
    through `backend` (a concrete backend name, never `flashmla_auto`)."""

    dense_mha: bool
    backend: str


def _nvidia_capability(device_class: str) -> tuple[int, int] | None:
    """An NVIDIA class's compute capability, as the catalog reads it (catalog.capability_of); None otherwise."""
    from nsa_policy.catalog.store import load_catalog

    found = load_catalog().capability_of(device_class)
    return found[1] if found is not None and found[0] == "nvidia" else None  # gfx1250's (12, 5) is not sm125


def mha_one_shot_supported(device_class: str, sglang_release: str | None = None) -> bool:
    """sglang's device gate for MHA one-shot, as the catalog states it (devices.yaml `mha_one_shot`:
    sm90, or sm100 up to sm109; from sglang 0.5.18 also gfx95 when `sglang_release` says so). A class
    outside the catalog is read as its capability ('sm107' → 10.7)."""
    from nsa_policy.catalog.store import load_catalog  # lazy: only BatchPlanner construction asks

    catalog = load_catalog()
    found = catalog.capability_of(device_class)
    return found is not None and catalog.mha_one_shot(found[0], found[1], sglang_release)


def _is_blackwell(device_class: str) -> bool:
    """sglang's `is_blackwell()`: compute capability major == 10 (sm100, sm103; not sm12x)."""
    cc = _nvidia_capability(device_class)
    return cc is not None and cc[0] == 10


def _require_int(name: str, value: Any, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


class BatchPlanner:
    """Decides, per batch, dense MHA one-shot vs sparse prefill and resolves `flashmla_auto`.

    Build it once (`BatchPlanner.from_decision(decision)`), then call `plan(...)` per batch.
    """

    __slots__ = (
        "prefill_backend", "decode_backend", "device_class", "kv_cache_dtype",
        "dense_attn_kv_len_threshold", "mha_chunk_capacity", "flashmla_auto_ratio",
        "mha_one_shot", "_dense_allowed", "_auto", "_auto_fp8", "_auto_blackwell",
        "_dense", "_sparse_fixed", "_decode", "_flashmla_sparse", "_flashmla_kv",
    )

    def __init__(
        self,
        *,
        prefill_backend: str,
        decode_backend: str,
        device_class: str,
        kv_cache_dtype: str,
        dense_attn_kv_len_threshold: int,
        mha_chunk_capacity: int = DEFAULT_MHA_CHUNK_CAPACITY,
        flashmla_auto_ratio: int = DEFAULT_FLASHMLA_AUTO_RATIO,
        mha_one_shot: bool | None = None,
        prefill_context_parallel: bool = False,
        hisparse: bool = False,
    ) -> None:
        for name, value in (("prefill_backend", prefill_backend), ("decode_backend", decode_backend),
                            ("device_class", device_class), ("kv_cache_dtype", kv_cache_dtype)):
            if not isinstance(value, str) or not value:
                raise ValueError(f"{name} must be a non-empty string, got {value!r}")
        if decode_backend == "flashmla_auto":
            raise ValueError("decode_backend='flashmla_auto' is prefill-only (sglang asserts at the "
                             "first decode step); valid decode backends are concrete ones, e.g. "
                             "flashmla_sparse, flashmla_kv, fa3, trtllm")
        self.prefill_backend = prefill_backend
        self.decode_backend = decode_backend
        self.device_class = device_class
        self.kv_cache_dtype = kv_cache_dtype
        self.dense_attn_kv_len_threshold = _require_int(
            "dense_attn_kv_len_threshold", dense_attn_kv_len_threshold)
        self.mha_chunk_capacity = _require_int("mha_chunk_capacity", mha_chunk_capacity)
        self.flashmla_auto_ratio = _require_int("flashmla_auto_ratio", flashmla_auto_ratio)
        # The policy states the device gate; fall back to sglang's rule when it does not.
        self.mha_one_shot = (mha_one_shot_supported(device_class) if mha_one_shot is None
                             else bool(mha_one_shot))
        # Everything that does not depend on the batch is folded here, once.
        self._dense_allowed = (self.mha_one_shot and kv_cache_dtype in _DENSE_KV_DTYPES
                               and not prefill_context_parallel and not hisparse)
        self._auto = prefill_backend == "flashmla_auto"
        self._auto_fp8 = kv_cache_dtype == "fp8_e4m3"
        self._auto_blackwell = _is_blackwell(device_class)
        self._dense = PrefillRoute(True, "mha_one_shot")
        self._sparse_fixed = PrefillRoute(False, prefill_backend)
        self._decode = PrefillRoute(False, decode_backend)
        self._flashmla_sparse = PrefillRoute(False, "flashmla_sparse")
        self._flashmla_kv = PrefillRoute(False, "flashmla_kv")

    @classmethod
    def from_decision(cls, decision: Any, *, prefill_context_parallel: bool = False,
                      hisparse: bool = False) -> BatchPlanner:
        """Read the thresholds from a resolved decision (duck-typed: any object with the
        attributes of `nsa_policy.decision.Decision`)."""
        errors = getattr(decision, "errors", ())
        if errors:
            raise ValueError(f"the decision has errors and cannot be planned: {list(errors)!r}")
        if not getattr(decision, "applies", True):
            raise ValueError("the decision does not apply (the model is not a DSA model): "
                             "there is no sparse prefill to plan")
        runtime = getattr(decision, "runtime", None)
        # duck-typed, so unchecked here: __init__ validates it (after the backends, as always)
        threshold: Any = getattr(decision, "dense_attn_kv_len_threshold", None)
        if threshold is None:
            threshold = getattr(decision, "index_topk", None)
        return cls(
            prefill_backend=decision.prefill_backend,
            decode_backend=decision.decode_backend,
            device_class=decision.device_class,
            kv_cache_dtype=decision.kv_cache_dtype,
            dense_attn_kv_len_threshold=threshold,
            mha_chunk_capacity=getattr(runtime, "mha_chunk_capacity", DEFAULT_MHA_CHUNK_CAPACITY),
            flashmla_auto_ratio=getattr(runtime, "flashmla_auto_ratio", DEFAULT_FLASHMLA_AUTO_RATIO),
            mha_one_shot=getattr(runtime, "mha_one_shot", None),
            prefill_context_parallel=prefill_context_parallel,
            hisparse=hisparse,
        )

    def plan(self, max_kv_len: int, total_kv_len: int, total_q_tokens: int,
             forward_mode: str = "extend") -> PrefillRoute:
        """Route one batch. `max_kv_len`: the longest request's KV length (prefix + new tokens);
        `total_kv_len`: the sum of all requests' KV lengths; `total_q_tokens`: query tokens in
        the batch. No validation here: this is the per-batch hot path."""
        if forward_mode == "extend" or forward_mode == "mixed":
            if (self._dense_allowed and max_kv_len <= self.dense_attn_kv_len_threshold
                    and total_kv_len <= self.mha_chunk_capacity):
                return self._dense
        elif forward_mode == "decode" or forward_mode == "target_verify" \
                or forward_mode == "draft_extend":
            return self._decode
        else:
            raise ValueError(f"forward_mode must be one of {FORWARD_MODES}, got {forward_mode!r}")
        if not self._auto:
            return self._sparse_fixed
        if not self._auto_fp8:
            return self._flashmla_sparse
        if (self._auto_blackwell and forward_mode == "extend"
                and total_kv_len < total_q_tokens * self.flashmla_auto_ratio):
            return self._flashmla_sparse
        return self._flashmla_kv

    def plan_lengths(self, seq_lens: Sequence[int], extend_lens: Sequence[int],
                     forward_mode: str = "extend") -> PrefillRoute:
        """Convenience form: per-request KV lengths and new-token counts (host lists). O(batch)."""
        if len(seq_lens) != len(extend_lens):
            raise ValueError(f"seq_lens and extend_lens must have one entry per request, got "
                             f"{len(seq_lens)} and {len(extend_lens)}")
        if not seq_lens:
            return self.plan(0, 0, 0, forward_mode)
        return self.plan(max(seq_lens), sum(seq_lens), sum(extend_lens), forward_mode)
