"""Records the flashinfer calls sglang's own DSA backend makes (issue 12, item 5).

Runs INSIDE a sglang side environment (scripts/sglang_oracle/README.md): sglang is imported from
the installed wheel, never vendored. Usage:

    <side python> tests/runtime/sglang_call_recorder.py RELEASE OUT.json [real | real-cpu]

With `real` (the H200 tier, on a CUDA device; sglang 0.5.10 with flashinfer 0.6.7.post2, sglang 0.5.23
with flashinfer 0.7.4): the real flashinfer replaces the recorder module below, its Python runs on
CUDA tensors, and the launch one level below its entry point is recorded instead, per path
(flashinfer_low_level.py: trtllm-gen told compute capability 10.0, sm12x 12.0). `real-cpu` (0.5.23
only): the same on CPU tensors, flashinfer's SM-count query answering 0 (the rehearsal of that tier
on a machine without a GPU; flashinfer 0.7.4 on the side environment's PYTHONPATH).

What is replaced, exactly (everything else is the wheel's code, run as it is):
- `flashinfer` (absent from the side env): a recorder module whose
  `trtllm_batch_decode_with_kv_cache_mla` (reached as `flashinfer.decode.…` by `_forward_trtllm`
  and `flashinfer.mla.…` by `flashinfer_sparse_mla_forward`) records its keyword arguments and
  returns zeros of the output shape; `flashinfer.utils.get_device_sm_count` /
  `get_trtllm_gen_multi_ctas_kv_counter_bytes` (called by sglang's counter-buffer sizing) return
  132 and 4096: the counter buffer is scratch, its size is not compared.
- `transform_index_page_table_decode` / `_prefill` in `dsa_backend`'s namespace (Triton, GPU-only
  in 0.5.23): sglang's own pure-torch references, `sglang/test/kernels/dsa_transform_index.py` of
  the same wheel (the prefill one without `cu_seqlens_q`, which the reference does not take). 0.5.10's
  transforms are torch references already and run unchanged.
- sglang 0.5.10 (`nsa_backend.NativeSparseAttnBackend`): `sgl_kernel` (a CUDA-only wheel its import
  chain needs) becomes a stand-in whose every name raises if called (with `real`, on a CUDA device:
  except `concat_mla_absorb_q`, which becomes torch.cat, and sglang's import-time fake-kernel
  registrations for sgl_kernel's operators are skipped); SGLANG_NSA_FUSE_TOPK=0 (the
  unfused branch: the transform runs in `_forward_trtllm`, from its own torch references); bf16
  only, since its fp8 path always calls flashinfer.rope's CUDA kernel (`mla_quantize_and_rope_for_fp8`)
  and 0.5.10 has no sm12x path.
- sglang 0.5.23 with `real` on a CUDA device: where sglang sees CUDA its import chain imports
  `sgl_kernel` (quantisation schemes), the same stand-in as 0.5.10's (and the same skipped fake-kernel
  registrations); `concat_mla_absorb_q` (its JIT CUDA concatenation of the absorbed q) becomes
  torch.cat. The transforms stay the torch references above (the block tables are compared).
- Both releases: the unfused top-k branch (0.5.23: `use_fused_topk=False`).
- The backend object: `object.__new__(<the release's DSA backend class>)` with the attributes the
  method reads set by hand (dtype, page size, dims, workspace, metadata) — `__init__` needs a
  model runner. `concat_mla_absorb_q_general` takes sglang's own CPU branch (`torch.cat`), and
  `mla_quantize_for_fp8_no_rope` (fp8) is plain torch.
"""
from __future__ import annotations

import json
import os
import sys
import types
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sglang_diff_cases as C  # noqa: E402

CALLS: list[dict] = []


def _recorder(**kwargs):
    CALLS.append(kwargs)
    q = kwargs["query"]
    return torch.zeros(q.shape[0], q.shape[1], q.shape[2], 512, dtype=torch.bfloat16)


def _install_flashinfer_recorder():
    fi = types.ModuleType("flashinfer")
    fi.__path__ = []  # a package, so `import flashinfer.decode` resolves the submodules below
    for sub in ("decode", "mla"):
        mod = types.ModuleType(f"flashinfer.{sub}")
        mod.trtllm_batch_decode_with_kv_cache_mla = _recorder
        setattr(fi, sub, mod)
        sys.modules[f"flashinfer.{sub}"] = mod
    utils = types.ModuleType("flashinfer.utils")
    utils.get_device_sm_count = lambda device: 132
    utils.get_trtllm_gen_multi_ctas_kv_counter_bytes = lambda *a, **k: 4096
    fi.utils = utils
    sys.modules["flashinfer.utils"] = utils
    sys.modules["flashinfer"] = fi
    return fi


def _stub_sgl_kernel(overrides=None):
    """sglang 0.5.10 imports `sgl_kernel` (a CUDA-only wheel) at module level along its import chain,
    in code this test never calls (quantisation, KV-cache I/O): every `sgl_kernel…` name becomes a
    stand-in that raises if called."""
    import importlib.abc
    import importlib.machinery

    class Unavailable:
        def __init__(self, name):
            self._name = name

        def __getattr__(self, attr):
            if attr.startswith("__"):
                raise AttributeError(attr)
            return Unavailable(f"{self._name}.{attr}")

        def __call__(self, *a, **k):
            raise RuntimeError(f"{self._name}: sgl_kernel stand-in, not available on a CPU side env")

        def __iter__(self):
            return iter(())

    class Module(types.ModuleType):
        def __getattr__(self, attr):
            if attr.startswith("__"):
                raise AttributeError(attr)
            if self.__name__ == "sgl_kernel" and attr in (overrides or {}):
                return overrides[attr]
            return Unavailable(f"{self.__name__}.{attr}")

    class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name, path, target=None):
            if name == "sgl_kernel" or name.startswith("sgl_kernel."):
                return importlib.machinery.ModuleSpec(name, self, is_package=True)
            return None

        def create_module(self, spec):
            module = Module(spec.name)
            module.__path__ = []
            return module

        def exec_module(self, module):
            pass

    sys.meta_path.insert(0, Finder())


def _tolerate_sgl_kernel_ops():
    """On a CUDA machine sglang registers fake (meta) kernels for sgl_kernel's operators at import
    time (`torch.library.register_fake("sgl_kernel::…")`, under `if _is_cuda`); with the stand-in
    above those operators do not exist, so such a registration is skipped (the decorated function
    is returned unchanged). Nothing this test calls uses them."""
    original = torch.library.register_fake

    def register_fake(op, func=None, /, *args, **kwargs):
        if isinstance(op, str) and op.startswith("sgl_kernel::"):
            try:
                torch._C._dispatch_has_kernel_for_dispatch_key(op, "Meta")
            except RuntimeError:  # no such operator
                return func if func is not None else (lambda fn: fn)
        return original(op, func, *args, **kwargs)

    torch.library.register_fake = register_fake


def _torch_concat(q_nope, q_rope):
    return torch.cat([q_nope, q_rope], dim=-1)


def main(release: str, out_path: str, real: bool = False, device: str = "cuda") -> None:
    warnings.filterwarnings("ignore")
    new = tuple(int(x) for x in release.split(".")[:3]) >= (0, 5, 23)
    dev = device if real else "cpu"
    trt_mod = None
    if new:
        if real and torch.cuda.is_available():
            # where sglang sees CUDA its import chain imports sgl_kernel (quantisation schemes, …),
            # a stand-in here as for 0.5.10 below; it concatenates the absorbed q with its own JIT
            # kernel (`concat_mla_absorb_q_general` → sglang.kernels.ops.attention.concat_mla,
            # elsewhere torch.cat): the same concatenation in torch (the query bytes are compared)
            _stub_sgl_kernel()
            _tolerate_sgl_kernel_ops()
            import sglang.kernels.ops.attention.utils as attn_utils
            attn_utils.concat_mla_absorb_q = _torch_concat
        import sglang.srt.layers.attention.dsa_backend as backend_mod
        import sglang.srt.layers.attention.trtllm_mla_backend as trt_mod
        from sglang.srt.layers.attention.dsa.utils import compute_dsa_seqlens
        from sglang.test.kernels import dsa_transform_index as ref
        cls = backend_mod.DeepseekSparseAttnBackend

        def prefill_ref(*, cu_seqlens_q=None, **kw):
            return ref.transform_index_page_table_prefill_ref(**kw)
        backend_mod.transform_index_page_table_decode = ref.transform_index_page_table_decode_ref
        backend_mod.transform_index_page_table_prefill = prefill_ref
        transform_prefill, transform_decode = prefill_ref, ref.transform_index_page_table_decode_ref
    else:
        if real and dev != "cuda":
            raise SystemExit("sglang 0.5.10's real-flashinfer tier runs on a CUDA device only")
        # the unfused branch, as 0.5.23's use_fused_topk=False below: with SGLANG_NSA_FUSE_TOPK on
        # (0.5.10's default) the indexer's own kernel writes the slots and _forward_trtllm passes
        # them through, so the transform under test would not run
        os.environ["SGLANG_NSA_FUSE_TOPK"] = "0"
        # on a CUDA device sglang concatenates the absorbed q with sgl_kernel's concat_mla_absorb_q
        # (`concat_mla_absorb_q_general`, elsewhere torch.cat): the same concatenation in torch (the
        # query bytes are compared)
        _stub_sgl_kernel({"concat_mla_absorb_q": _torch_concat} if real else None)
        if real:
            _tolerate_sgl_kernel_ops()
        import sglang.srt.layers.attention.nsa_backend as backend_mod
        cls = backend_mod.NativeSparseAttnBackend
        transform_prefill = transform_decode = None  # its transforms are torch references already

        def compute_dsa_seqlens(lens, top_k):  # 0.5.10 clamps the same way (nsa/utils.py)
            return backend_mod.compute_nsa_seqlens(lens, top_k)
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    if real:
        # the real flashinfer: its Python runs, the launch one level below is recorded (installed
        # per case below: the trtllm and sm12x paths are told different devices)
        import flashinfer
        import flashinfer_low_level as low
        if trt_mod is not None:
            trt_mod.flashinfer = flashinfer  # imported there only where sglang sees CUDA
        calls = low.CALLS
        extra = low.cpu_rehearsal_patches() if dev != "cuda" else None
    else:
        fi = _install_flashinfer_recorder()
        if trt_mod is not None:
            trt_mod.flashinfer = fi  # its module-level name (imported only where flashinfer exists)
        calls = CALLS

    records = []
    for case in C.cases():
        if case.table_page_size != 1:
            continue  # sglang always works on the token table; the adapter's table varies
        if not new and (case.backend != "trtllm" or case.kv != "bf16"):
            continue  # 0.5.10: no sm12x path; its fp8 trtllm path always runs flashinfer.rope's CUDA kernel
        b = {k: v.to(dev) if isinstance(v, torch.Tensor) else v for k, v in C.batch(case.phase).items()}
        t = len(b["causal"])
        x = {k: v.to(dev) for k, v in C.tensors(case, t).items()}
        pool = x["pool"]
        fp8 = case.kv == "fp8"
        self = object.__new__(cls)
        attrs = dict(
            kv_cache_dtype=torch.float8_e4m3fn if fp8 else torch.bfloat16,
            qk_rope_head_dim=64, qk_nope_head_dim=128, kv_lora_rank=512,
            physical_page_size=case.page_size, real_page_size=case.page_size,
            page_size=case.page_size,
            kv_cache_dim=656 if case.backend == "flashinfer_sparse_mla" else 576,
            use_fused_topk=False, dcp_size=1, dcp_rank=0, num_dcp_q_heads=C.HEADS,
            workspace_buffer=torch.zeros(16, dtype=torch.uint8, device=dev), device=dev,
            _multi_ctas_kv_counter_buffer=torch.zeros(4096, dtype=torch.uint8, device=dev),
            token_to_kv_pool=types.SimpleNamespace(get_key_buffer=lambda layer_id, p=pool: p),
            nsa_kv_cache_store_fp8=fp8,
            hisparse_coordinator=None, dsa_index_topk=C.TOP_K, nsa_index_topk=C.TOP_K,
        )
        for k, v in attrs.items():
            object.__setattr__(self, k, v)
        layer = types.SimpleNamespace(layer_id=0, tp_q_head_num=C.HEADS, v_head_dim=512, head_dim=576,
                                      scaling=C.SCALE, k_scale_float=None, is_cross_attention=False)
        seq = torch.tensor(b["seq_lens"], dtype=torch.int32, device=dev)
        causal = torch.tensor(b["causal"], dtype=torch.int32, device=dev)
        ext = b["extend_lens"]
        cu = torch.tensor([0] + list(torch.cumsum(torch.tensor(ext), 0).tolist()), dtype=torch.int32, device=dev)
        if case.phase == "decode":
            dsa_seq = compute_dsa_seqlens(seq, C.TOP_K)
        else:
            dsa_seq = compute_dsa_seqlens(causal, C.TOP_K)
        metadata = types.SimpleNamespace(
            cache_seqlens_int32=seq, page_table_1=b["token_table"], max_seq_len_k=int(seq.max()),
            nsa_extend_seq_lens_list=ext, dsa_extend_seq_lens_list=ext, cu_seqlens_q=cu,
            dsa_cache_seqlens_int32=dsa_seq.to(torch.int32), nsa_cache_seqlens_int32=dsa_seq.to(torch.int32),
            page_size=case.page_size)
        object.__setattr__(self, "forward_metadata", metadata)
        forward_batch = types.SimpleNamespace(
            forward_mode=ForwardMode.DECODE if case.phase == "decode" else ForwardMode.EXTEND,
            positions=None, out_cache_loc=None, token_to_kv_pool=attrs["token_to_kv_pool"])
        calls.clear()
        path = low.PATH_OF_BACKEND[case.backend] if real else None
        restore = low.install(flashinfer, path, extra=extra) if real else (lambda: None)
        topk = b["topk"].clone()
        if case.backend == "trtllm":
            k = torch.zeros(t, 1, 512, dtype=torch.bfloat16, device=dev)
            k_rope = torch.zeros(t, 1, 64, dtype=torch.bfloat16, device=dev)
            prefill = case.phase == "prefill"
            seq_arg = metadata.dsa_cache_seqlens_int32 if prefill else metadata.cache_seqlens_int32
            if not new:  # 0.5.10's prefill call site passes nsa_cache_seqlens_int32 (same clamp)
                seq_arg = metadata.nsa_cache_seqlens_int32 if prefill else metadata.cache_seqlens_int32
            cls._forward_trtllm(self, x["q_nope"], k, None, layer, forward_batch, seq_arg,
                                save_kv_cache=False, q_rope=x["q_rope"], k_rope=k_rope,
                                topk_indices=topk, is_prefill=prefill)
        else:
            if case.phase == "decode":
                table = transform_decode(page_table=b["token_table"], topk_indices=topk, page_size=1)
            else:
                table = transform_prefill(page_table=b["token_table"], topk_indices=topk,
                                          extend_lens_cpu=ext, page_size=1, output_num_tokens=t,
                                          page_table_is_expanded=False, cu_seqlens_q=cu)
            q_all = backend_mod.concat_mla_absorb_q_general(x["q_nope"], x["q_rope"])
            cls._forward_flashinfer_sparse_mla(self, q_all, pool, table, metadata.dsa_cache_seqlens_int32,
                                               layer.scaling, None)
        restore()
        assert len(calls) == 1, f"{case.name}: {len(calls)} flashinfer calls"
        call = calls[0]
        if real:
            kv = call[low.launch_of(flashinfer.__version__, path).kv]
            kwargs = low.describe_call(call, C.describe, flashinfer.__version__, path)
        else:
            kv = call["kv_cache"]
            kwargs = {k: C.describe(v) for k, v in call.items()}
        records.append(dict(
            case=case.name,
            kwargs=dict(sorted(kwargs.items())),
            kv_cache_is_view_of_pool=bool(kv.untyped_storage().data_ptr() == pool.untyped_storage().data_ptr()),
        ))
    import importlib.metadata as md
    with open(out_path, "w") as f:
        meta = dict(release=release, sglang=md.version("sglang"), torch=torch.__version__, records=records)
        if real:
            meta.update(flashinfer=flashinfer.__version__, device=dev)
        json.dump(meta, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    mode = sys.argv[3:]
    if mode not in ([], ["real"], ["real-cpu"]):
        raise SystemExit(f"usage: {sys.argv[0]} RELEASE OUT.json [real | real-cpu]")
    main(sys.argv[1], sys.argv[2], real=bool(mode), device="cpu" if mode == ["real-cpu"] else "cuda")
