"""One level below flashinfer's trtllm MLA entry point: the H200 tier of the differential test
(issue 12, item 5).

flashinfer 0.6.7.post2's `trtllm_batch_decode_with_kv_cache_mla` (flashinfer/mla.py) runs its own
Python on both sides' calls: the backend choice, `_check_trtllm_gen_mla_shape` (query rank, the
DeepSeek head dims, block-table shape [B, q_len, sparse_mla_top_k], block size 32 / 64), the pool's
3-D → 4-D view, the output allocation, the query flattening, PDL and SM-count lookups on the real
device. Then it launches `get_trtllm_gen_fmha_module().trtllm_paged_attention_decode` with 27
positional arguments. `install()` replaces that module getter with one whose launch records the
arguments by name (no kernel runs), and tells flashinfer.mla the device is compute capability
10.0, since its `backend="auto"` picks the trtllm-gen kernel on sm100 only (the H200 is 9.0).

Used by sglang_call_recorder.py (sglang's side, in its own process) and by
test_sglang_differential.py (the adapter's side).
"""
from __future__ import annotations

import importlib
import types

VERSION = "0.6.7.post2"
# trtllm_paged_attention_decode's positional arguments as flashinfer 0.6.7.post2's mla.py passes them
ARGS = ("out", "out_scale_factor", "query", "key_cache", "value_cache", "workspace_buffer", "block_tables",
        "seq_lens", "max_q_len", "max_seq_len", "bmm1_scale", "bmm2_scale", "o_sf_scale", "o_sf_vec_size",
        "o_sf_start_index", "batch_size", "window_left", "sparse_mla_top_k", "sm_count", "enable_pdl",
        "workspace_bytes", "sinks", "cum_seq_lens_q", "key_block_scales", "value_block_scales",
        "skip_softmax_threshold_scale_factor", "uses_shared_paged_kv_idx")
# scratch: each side allocates its own; only their presence is compared
SCRATCH = ("workspace_buffer", "workspace_bytes")

CALLS: list[dict] = []


def install(flashinfer):
    """Record the launch below the real entry point of this (real) flashinfer; returns a function
    that puts flashinfer.mla back as it was."""
    if flashinfer.__version__ != VERSION:
        raise RuntimeError(f"the launch's arguments are known for flashinfer {VERSION}, found "
                           f"{flashinfer.__version__}")
    mla = importlib.import_module("flashinfer.mla")
    saved = {name: getattr(mla, name) for name in ("get_trtllm_gen_fmha_module", "get_compute_capability")}

    def launch(*args):
        if len(args) != len(ARGS):
            raise TypeError(f"trtllm_paged_attention_decode got {len(args)} arguments, {len(ARGS)} expected")
        CALLS.append(dict(zip(ARGS, args)))

    mla.get_trtllm_gen_fmha_module = lambda: types.SimpleNamespace(trtllm_paged_attention_decode=launch)
    mla.get_compute_capability = lambda device: (10, 0)

    def restore():
        for name, value in saved.items():
            setattr(mla, name, value)
    return restore


def describe_call(call: dict, describe) -> dict:
    return {k: ({"kind": "scratch", "present": v is not None} if k in SCRATCH else describe(v))
            for k, v in call.items()}
