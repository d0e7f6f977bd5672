"""vLLM 0.33's own DSA start-up decisions on a CPU host (run with the side environment's python).

    /work/vllmenv/bin/python scripts/vllm_oracle/oracle.py OUT.jsonl

Calls vLLM's own functions: the model hook (MODELS_CONFIG_MAP[arch].verify_and_update_config), the
selector (v1/attention/selector.get_attn_backend → CudaPlatform.get_attn_backend_cls), the KV rewrite
(mla_attention._canonicalize_sparse_mla_kv_cache_dtype), the block-size choice
(Platform._preferred_block_size_for_backends with the DSA indexer backend) and the dense short-prefill
test (sparse_mla_attention._use_dense_mha_prefill). Patched: platform probes only (the device
capability, the platform object, FlashInfer/FA availability probes pinned present, compiled
extension modules stubbed, a CUDA allocation at import time of a dense backend turned into an
ImportError). ROCm: the model constructs ROCM_AITER_MLA_SPARSE directly (models/deepseek_v32/amd/rocm.py:48),
so the selector is not called; the block size is computed with vLLM's function on a ROCm platform.
No vLLM code is copied into this repository.
"""
from __future__ import annotations

import itertools
import json
import sys
import time
import types

for _m in ("vllm._C_stable_libtorch", "vllm._C", "vllm._flashmla_C", "vllm._flashmla_extension_C",
           "vllm.vllm_flash_attn._vllm_fa2_C", "vllm.vllm_flash_attn._vllm_fa3_C"):
    sys.modules[_m] = types.ModuleType(_m)  # compiled extensions need libcuda

import vllm.platforms as P  # noqa: E402
from vllm.platforms import cuda  # noqa: E402
from vllm.platforms.interface import DeviceCapability  # noqa: E402

PLAT = cuda.NonNvmlCudaPlatform()
P._current_platform = PLAT
CAP = [DeviceCapability(9, 0)]
type(PLAT).get_device_capability = classmethod(lambda cls, device_id=0: CAP[0])
IS_ROCM = [False]
type(PLAT).is_rocm = classmethod(lambda cls: IS_ROCM[0])

import torch  # noqa: E402
import vllm.utils.flashinfer as fi  # noqa: E402
from transformers import PretrainedConfig  # noqa: E402
from vllm.config import VllmConfig, set_current_vllm_config  # noqa: E402
from vllm.model_executor.layers.attention import sparse_mla_attention  # noqa: E402
from vllm.model_executor.layers.attention.mla_attention import _canonicalize_sparse_mla_kv_cache_dtype  # noqa: E402
from vllm.model_executor.models.config import MODELS_CONFIG_MAP  # noqa: E402
from vllm.v1.attention import selector  # noqa: E402
from vllm.v1.attention.backends import fa_utils  # noqa: E402
from vllm.v1.attention.backends.mla import flashattn_mla_sparse as fams  # noqa: E402
from vllm.v1.attention.backends.mla.indexer import DeepseekV32IndexerBackend  # noqa: E402
from vllm.v1.attention.backends.registry import AttentionBackendEnum as E  # noqa: E402
from vllm.v1.attention.selector import get_attn_backend  # noqa: E402

for _n in ("has_flashinfer", "has_flashinfer_sm90_nope_mla", "has_flashinfer_sparse_mla_sm120"):
    setattr(fi, _n, lambda: True)  # availability probes: a complete install
fa_utils.flash_attn_supports_mla = lambda: True
fams.flash_attn_supports_mla = lambda: True
fams._fa4_cute_mla_available = lambda: None
_orig_cls = cuda._get_attn_backend_class


def _backend_cls(b):  # cutlass_mla.py allocates a CUDA tensor at import: a GPU-less host raises there
    try:
        return _orig_cls(b)
    except (RuntimeError, AssertionError) as exc:
        raise ImportError(f"CUDA at import: {exc}") from None


cuda._get_attn_backend_class = _backend_cls

DEVICES = {"sm80": (8, 0), "sm86": (8, 6), "sm89": (8, 9), "sm90": (9, 0), "sm100": (10, 0), "sm103": (10, 3),
           "sm120": (12, 0), "sm121": (12, 1), "gfx942": (9, 4), "gfx950": (9, 5)}
MODELS = {  # config.json values (rules/catalog/models.yaml)
    "deepseek-ai/DeepSeek-V3.2": dict(architectures=["DeepseekV32ForCausalLM"], num_attention_heads=128,
                                      kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128,
                                      index_topk=2048, model_type="deepseek_v32"),
    "zai-org/GLM-5": dict(architectures=["GlmMoeDsaForCausalLM"], num_attention_heads=64, kv_lora_rank=512,
                          qk_rope_head_dim=64, qk_nope_head_dim=192, v_head_dim=256, index_topk=2048,
                          model_type="glm_moe_dsa"),
}
KV = ["auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla", "nvfp4_ds_mla", "nvfp4"]
FORCED = [None, "FLASHMLA_SPARSE", "FLASH_ATTN_MLA_SPARSE", "FLASH_ATTN_MLA_SPARSE_FA4", "FLASHINFER_MLA_SPARSE",
          "FLASHINFER_MLA_SPARSE_SM120", "FLASHINFER_MLA_SPARSE_SM90", "ROCM_AITER_MLA_SPARSE", "FLASHMLA", "TRITON_MLA"]
TP = [1, 2, 4, 8, 16]
DCP = [1, 2]
BLOCK = [None, 32, 64]


def grid():
    return itertools.product(DEVICES, MODELS, TP, DCP, KV, FORCED, BLOCK)


def one(dev, model, tp, dcp, kv, forced, block):
    rocm = dev.startswith("gfx")
    CAP[0] = DeviceCapability(*DEVICES[dev])
    IS_ROCM[0] = rocm
    spec = MODELS[model]
    heads = spec["num_attention_heads"] // tp
    cfg = VllmConfig()
    hf = PretrainedConfig(**spec)
    mc = types.SimpleNamespace(hf_config=hf, hf_text_config=hf, rswa_window=None, dtype=torch.bfloat16, is_hybrid=False,
                               get_num_attention_heads=lambda pc: heads)
    object.__setattr__(cfg, "model_config", mc)
    cfg.parallel_config.tensor_parallel_size = tp
    cfg.parallel_config.decode_context_parallel_size = dcp
    cfg.cache_config.cache_dtype = kv
    if block is not None:
        cfg.cache_config.block_size = block
        cfg.cache_config.user_specified_block_size = True
    cfg.attention_config.backend = E[forced] if forced else None
    with set_current_vllm_config(cfg):
        # the model hook runs with the platform in place (GLM-5: CUDA SM10x only)
        type(PLAT).is_cuda = classmethod(lambda cls: not IS_ROCM[0])
        MODELS_CONFIG_MAP[spec["architectures"][0]].verify_and_update_config(cfg)
        sel_kv = cfg.cache_config.cache_dtype
        selector._cached_get_attn_backend.cache_clear()
        cuda._get_backend_priorities.cache_clear()
        if rocm:
            from vllm.v1.attention.backends.mla.rocm_aiter_mla_sparse import ROCMAiterMLASparseBackend as backend
        else:
            try:
                backend = get_attn_backend(576, torch.bfloat16, sel_kv, use_mla=True, use_sparse=True, num_heads=heads)
            except ValueError as exc:
                # the message's first 80 characters name the refused backend (or say none was found);
                # vLLM's reasons follow later in the text (every recorded message is longer than that)
                return {"attention_backend": None, "error": str(exc)[:80]}
        final = _canonicalize_sparse_mla_kv_cache_dtype(backend, sel_kv)
        size = block if block is not None else PLAT._preferred_block_size_for_backends(
            [backend, DeepseekV32IndexerBackend], 16, cfg)
        dense_impl = getattr(backend.get_impl_cls(), "supports_dense_mha_prefill", True)
        dense = dense_impl and sparse_mla_attention._use_dense_mha_prefill(cfg, spec["index_topk"], spec["index_topk"])
        return {"attention_backend": backend.get_name(), "requested_kv_cache_dtype": sel_kv, "kv_cache_dtype": final,
                "page_size": size, "dense_attn_kv_len_threshold": spec["index_topk"] if dense else None}


def main(out: str) -> None:
    t0 = time.perf_counter()
    n = 0
    with open(out, "w") as fh:
        for point in grid():
            dev, model, tp, dcp, kv, forced, block = point
            res = one(*point)
            fh.write(json.dumps({"device": dev, "model": model, "tensor_parallel_size": tp,
                                 "decode_context_parallel_size": dcp, "kv_cache_dtype": kv, "attention_backend": forced,
                                 "block_size": block, "vllm": res}) + "\n")
            n += 1
    print(json.dumps({"inputs": n, "seconds": round(time.perf_counter() - t0, 1)}))


if __name__ == "__main__":
    main(sys.argv[1])
