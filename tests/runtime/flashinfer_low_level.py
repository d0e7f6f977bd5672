"""One level below flashinfer's trtllm MLA entry point: the H200 tier of the differential test
(issue 12, item 5).

flashinfer's `trtllm_batch_decode_with_kv_cache_mla` runs its own Python on both sides' calls; only
the launch one level below is replaced by a recorder (no kernel runs) and the device is made to look
like the one the path is for. Per release and path (LAUNCHES):

flashinfer 0.6.7.post2 (flashinfer/mla.py), "trtllm": the backend choice, `_check_trtllm_gen_mla_shape`
(query rank, the DeepSeek head dims, block-table shape [B, q_len, sparse_mla_top_k], block size 32 /
64), the pool's 3-D → 4-D view, the output allocation, the query flattening, PDL and SM-count lookups
on the real device; then `get_trtllm_gen_fmha_module().trtllm_paged_attention_decode`, 27 positional
arguments. Compute capability 10.0 for flashinfer.mla, since its `backend="auto"` picks the
trtllm-gen kernel on sm100 only (the H200 is 9.0).

flashinfer 0.7.4 (flashinfer/mla/_core.py), "trtllm": `_mla_with_kv_cache_impl`'s argument checks,
`_validate_mla_dcp_args`, the backend choice (cute-dsl refused for sparse top-k), the ragged /
uniform split, `_check_mla_functional_shape`, the output allocation, the multi-CTA counter check,
the autotuner's runner choice (the tuner itself for `backend="auto"`), then
`_BatchMLAPagedAttentionTrtllmGenBackend.from_functional` binds
`get_trtllm_gen_fmha_module().trtllm_paged_attention_decode` (mla/_batch_mla/_backends/
trtllm_gen_backend.py) and `forward` / `_execute` launch it with 36 positional arguments (names:
the C++ launcher's, data/csrc/trtllm_fmha_kernel_launcher.cu, as 0.6.7.post2's names where the two
agree). Compute capability 10.0 for mla._core and that backend module.

flashinfer 0.7.4, "sm12x": the same entry point with the sm12x sparse route
(`_trtllm_batch_decode_sparse_mla_v32_sm120`: bf16 query, 656-byte packed rows, block-table shape,
bmm2 = 1, per-row lengths; `_trtllm_batch_decode_sparse_mla_sm120`: segments, query flattening,
output allocation), then `_sparse_mla_sm120._prepared.functional_run`, the first function whose
work reaches the compiled module (`resolve_model_type` asks it for the scale format's model type),
recorded by its parameter names. Compute capability 12.0 for mla._core (`backend="auto"` takes the
sparse route on sm12x, and `is_sm12x_supported` gates it).

Used by sglang_call_recorder.py (sglang's side, in its own process) and by
test_sglang_differential.py (the adapter's side).
"""
from __future__ import annotations

import importlib
import inspect
import types
from dataclasses import dataclass
from typing import Any, Callable, Optional

# trtllm_paged_attention_decode's positional arguments as flashinfer 0.6.7.post2's mla.py passes them
ARGS_067 = ("out", "out_scale_factor", "query", "key_cache", "value_cache", "workspace_buffer", "block_tables",
            "seq_lens", "max_q_len", "max_seq_len", "bmm1_scale", "bmm2_scale", "o_sf_scale", "o_sf_vec_size",
            "o_sf_start_index", "batch_size", "window_left", "sparse_mla_top_k", "sm_count", "enable_pdl",
            "workspace_bytes", "sinks", "cum_seq_lens_q", "key_block_scales", "value_block_scales",
            "skip_softmax_threshold_scale_factor", "uses_shared_paged_kv_idx")
# ... and as 0.7.4's trtllm_gen_backend._execute passes them (the C++ launcher's order; its names
# where 0.6.7.post2 had none: max_kv_len → max_seq_len, workspace_size → workspace_bytes and
# attention_sinks → sinks keep 0.6.7.post2's names)
ARGS_074 = ("out", "out_scale_factor", "query", "key_cache", "value_cache", "workspace_buffer",
            "multi_ctas_kv_counter_buffer", "block_tables", "seq_lens", "max_q_len", "max_seq_len",
            "bmm1_scale", "bmm2_scale", "o_sf_scale", "o_sf_vec_size", "o_sf_start_index", "batch_size",
            "window_left", "sparse_mla_top_k", "sm_count", "enable_pdl", "workspace_bytes", "sinks",
            "cum_seq_lens_q", "key_block_scales", "value_block_scales", "skip_softmax_threshold_scale_factor",
            "uses_shared_paged_kv_idx", "lse", "lse_scale", "lse_stride_tokens", "lse_stride_heads",
            "enable_block_sparse_attention", "sparse_mla_top_k_lens", "bf16q_fp8kv_transform_mode",
            "use_fp16_softmax")


@dataclass(frozen=True)
class Launch:
    """Where the launch sits in one flashinfer release, for one path."""
    module: str                       # the module whose name is replaced
    name: str                         # a module getter (`method` is its op's method) or a function
    method: Optional[str]             # the op's launch method, or None: `name` is the launch itself
    args: Optional[tuple]             # positional argument names; None: the real function's parameters
    scratch: tuple                    # each side allocates its own: only their presence is compared
    capability: tuple                 # the compute capability flashinfer is told
    capability_modules: tuple         # modules whose get_compute_capability is replaced
    kv: str                           # the argument that holds the KV cache view
    extra_patches: tuple = ()         # (module, name) pairs answered True (device gates)


LAUNCHES = {
    ("0.6.7.post2", "trtllm"): Launch(
        module="flashinfer.mla", name="get_trtllm_gen_fmha_module", method="trtllm_paged_attention_decode",
        args=ARGS_067, scratch=("workspace_buffer", "workspace_bytes"), capability=(10, 0),
        capability_modules=("flashinfer.mla",), kv="key_cache"),
    ("0.7.4", "trtllm"): Launch(
        module="flashinfer.mla._batch_mla._backends.trtllm_gen_backend", name="get_trtllm_gen_fmha_module",
        method="trtllm_paged_attention_decode", args=ARGS_074,
        scratch=("workspace_buffer", "workspace_bytes", "multi_ctas_kv_counter_buffer"), capability=(10, 0),
        capability_modules=("flashinfer.mla._core", "flashinfer.mla._batch_mla._backends.trtllm_gen_backend"),
        kv="key_cache"),
    ("0.7.4", "sm12x"): Launch(
        module="flashinfer.mla._sparse_mla_sm120._prepared", name="functional_run", method=None, args=None,
        scratch=("workspace",), capability=(12, 0), capability_modules=("flashinfer.mla._core",),
        kv="cache", extra_patches=(("flashinfer.mla._core", "is_sm12x_supported"),)),
}
PATH_OF_BACKEND = {"trtllm": "trtllm", "flashinfer_sparse_mla": "sm12x"}

# the 0.6.7.post2 tier's names, kept for its callers
VERSION = "0.6.7.post2"
ARGS = ARGS_067
SCRATCH = LAUNCHES[(VERSION, "trtllm")].scratch

CALLS: list[dict] = []


def launch_of(version: str, path: str) -> Launch:
    try:
        return LAUNCHES[(version, path)]
    except KeyError:
        known = sorted({v for v, _ in LAUNCHES})
        raise RuntimeError(f"the launch below flashinfer's entry point is described for {known} "
                           f"(paths: {sorted({p for v, p in LAUNCHES if v == version})}), "
                           f"not for flashinfer {version} path {path!r}") from None


def install(flashinfer, path: str = "trtllm", extra: Optional[dict[tuple[str, str], Any]] = None) -> Callable:
    """Record the launch below the real entry point of this (real) flashinfer on `path`; returns a
    function that puts flashinfer back as it was. `extra`: further {(module, name): value}
    replacements (the CPU rehearsal's device queries), undone by the same function."""
    launch = launch_of(flashinfer.__version__, path)
    saved: list[tuple[Any, str, Any]] = []

    def patch(module_name: str, name: str, value) -> None:
        module = importlib.import_module(module_name)
        if not hasattr(module, name):
            raise RuntimeError(f"{module_name}.{name} not found in flashinfer {flashinfer.__version__}")
        saved.append((module, name, getattr(module, name)))
        setattr(module, name, value)

    def restore() -> None:
        while saved:
            module, name, value = saved.pop()
            setattr(module, name, value)

    try:
        target = importlib.import_module(launch.module)
        if launch.method is not None:
            args = launch.args or ()

            def record(*a):
                if len(a) != len(args):
                    raise TypeError(f"{launch.method} got {len(a)} arguments, {len(args)} expected")
                CALLS.append(dict(zip(args, a)))
            patch(launch.module, launch.name, lambda: types.SimpleNamespace(**{launch.method: record}))
        else:
            sig = inspect.signature(getattr(target, launch.name))

            def record_named(*a, **k):
                bound = sig.bind(*a, **k)   # a name this release lacks fails here
                bound.apply_defaults()
                CALLS.append(dict(bound.arguments))
            patch(launch.module, launch.name, record_named)
        for module_name in launch.capability_modules:
            patch(module_name, "get_compute_capability", lambda device, cc=launch.capability: cc)
        for module_name, name in launch.extra_patches:
            patch(module_name, name, lambda *a, **k: True)
        for (module_name, name), value in (extra or {}).items():
            patch(module_name, name, value)
    except Exception:
        restore()
        raise
    return restore


def cpu_rehearsal_patches(sm_count: int = 0) -> dict[tuple[str, str], Any]:
    """For running the real flashinfer 0.7.4 Python on CPU tensors (no device): its SM-count query
    answers `sm_count`, 0 by default, the figure the adapter uses off CUDA for its multi-CTA
    counter (sglang's counter sizing asks flashinfer.utils, flashinfer's own dispatch asks
    mla._core). Everything else these paths ask of the device already answers for a CPU tensor
    (`device_support_pdl` says False there)."""
    def count(device):
        return sm_count
    return {("flashinfer.utils", "get_device_sm_count"): count,
            ("flashinfer.mla._core", "get_device_sm_count"): count}


def describe_call(call: dict, describe, version: str = VERSION, path: str = "trtllm") -> dict:
    scratch = launch_of(version, path).scratch
    return {k: ({"kind": "scratch", "present": v is not None} if k in scratch else describe(v))
            for k, v in call.items()}
