"""Records the flashinfer calls sglang's own DSA backend makes (issue 12, item 5).

Runs INSIDE a sglang side environment (scripts/sglang_oracle/README.md): sglang is imported from
the installed wheel, never vendored. Usage:

    <side python> tests/runtime/sglang_call_recorder.py RELEASE OUT.json

What is replaced, exactly (everything else is the wheel's code, run as it is):
- `flashinfer` (absent from the side env): a recorder module whose
  `trtllm_batch_decode_with_kv_cache_mla` (reached as `flashinfer.decode.…` by `_forward_trtllm`
  and `flashinfer.mla.…` by `flashinfer_sparse_mla_forward`) records its keyword arguments and
  returns zeros of the output shape; `flashinfer.utils.get_device_sm_count` /
  `get_trtllm_gen_multi_ctas_kv_counter_bytes` (called by sglang's counter-buffer sizing) return
  132 and 4096: the counter buffer is scratch, its size is not compared.
- `transform_index_page_table_decode` / `_prefill` in `dsa_backend`'s namespace (Triton, GPU-only
  in 0.5.23): sglang's own pure-torch references, `sglang/test/kernels/dsa_transform_index.py` of
  the same wheel (the prefill one without `cu_seqlens_q`, which the reference does not take). sglang 0.5.10 is
  not run: its backend module imports `sgl_kernel` (CUDA-only) through its import chain.
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


def main(release: str, out_path: str) -> None:
    warnings.filterwarnings("ignore")
    if tuple(int(x) for x in release.split(".")[:3]) < (0, 5, 23):
        # 0.5.10's nsa_backend imports sgl_kernel (a CUDA-only wheel) through its module chain;
        # a stand-in for it cascades (scalar_types, kvcacheio, ...), so it is not run here.
        sys.exit(f"release {release}: only sglang >= 0.5.23's dsa_backend imports on a CPU side env")
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
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    fi = _install_flashinfer_recorder()
    trt_mod.flashinfer = fi  # its module-level name (imported only where flashinfer exists)

    records = []
    for case in C.cases():
        if case.table_page_size != 1:
            continue  # sglang always works on the token table; the adapter's table varies
        b = C.batch(case.phase)
        t = len(b["causal"])
        x = C.tensors(case, t)
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
            workspace_buffer=torch.zeros(16, dtype=torch.uint8), device="cpu",
            _multi_ctas_kv_counter_buffer=torch.zeros(4096, dtype=torch.uint8),
            token_to_kv_pool=types.SimpleNamespace(get_key_buffer=lambda layer_id, p=pool: p),
            hisparse_coordinator=None, dsa_index_topk=C.TOP_K, nsa_index_topk=C.TOP_K,
        )
        for k, v in attrs.items():
            object.__setattr__(self, k, v)
        layer = types.SimpleNamespace(layer_id=0, tp_q_head_num=C.HEADS, v_head_dim=512, head_dim=576,
                                      scaling=C.SCALE, k_scale_float=None, is_cross_attention=False)
        seq = torch.tensor(b["seq_lens"], dtype=torch.int32)
        causal = torch.tensor(b["causal"], dtype=torch.int32)
        ext = b["extend_lens"]
        cu = torch.tensor([0] + list(torch.cumsum(torch.tensor(ext), 0).tolist()), dtype=torch.int32)
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
            positions=None, out_cache_loc=None)
        CALLS.clear()
        topk = b["topk"].clone()
        if case.backend == "trtllm":
            k = torch.zeros(t, 1, 512, dtype=torch.bfloat16)
            k_rope = torch.zeros(t, 1, 64, dtype=torch.bfloat16)
            prefill = case.phase == "prefill"
            seq_arg = metadata.dsa_cache_seqlens_int32 if prefill else metadata.cache_seqlens_int32
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
        assert len(CALLS) == 1, f"{case.name}: {len(CALLS)} flashinfer calls"
        call = CALLS[0]
        kv = call["kv_cache"]
        records.append(dict(
            case=case.name,
            kwargs={k: C.describe(v) for k, v in sorted(call.items())},
            kv_cache_is_view_of_pool=bool(kv.untyped_storage().data_ptr() == pool.untyped_storage().data_ptr()),
        ))
    import importlib.metadata as md
    with open(out_path, "w") as f:
        json.dump(dict(release=release, sglang=md.version("sglang"), torch=torch.__version__,
                       records=records), f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
