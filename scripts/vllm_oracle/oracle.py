"""vLLM 0.33's own DSA start-up decisions on a CPU host (run with the side environment's python).

    /work/vllmenv/bin/python scripts/vllm_oracle/oracle.py OUT.jsonl                    # the fixed grid
    /work/vllmenv/bin/python scripts/vllm_oracle/oracle.py OUT.jsonl --sample N --seed S  # N inputs drawn from the domain

Calls vLLM's own functions: ParallelConfig's validation (config/parallel.py _validate_parallel_config, which
EngineArgs.create_engine_config reaches before any model code: tp % dcp, PCP x DCP) and
ModelConfig.verify_with_parallel_config (heads % tp), the model hook (MODELS_CONFIG_MAP[arch].verify_and_update_config), the
selector (v1/attention/selector.get_attn_backend → CudaPlatform.get_attn_backend_cls), the KV rewrite
(mla_attention._canonicalize_sparse_mla_kv_cache_dtype), the block-size choice
(Platform._preferred_block_size_for_backends with the DSA indexer backend) and the dense short-prefill
test (sparse_mla_attention._use_dense_mha_prefill). Patched: platform probes only (the device
capability, the GPU count, the platform object, FlashInfer/FA availability probes pinned present, compiled
extension modules stubbed, a CUDA allocation at import time of a dense backend turned into an
ImportError). ROCm: the model constructs ROCM_AITER_MLA_SPARSE directly (models/deepseek_v32/amd/rocm.py:48),
so the selector is not called; the block size is computed with vLLM's function on a ROCm platform.
Intel XPU and CPU: their platform's own get_attn_backend_cls. The sampled run draws every input from its whole
domain: every AttentionBackendEnum name and CacheDType vLLM registers, TP/DCP/PCP shapes valid or not, every
device class of the catalog (CUDA, ROCm, XPU, CPU) and every catalog model (rules/catalog/models.yaml, read as
config.json values; a model without index_topk builds no sparse layer: deepseek_v2.py `is_v32`).
No vLLM code is copied into this repository.
"""
from __future__ import annotations

import itertools
import json
import random
import sys
import time
import types
from pathlib import Path

for _m in ("vllm._C_stable_libtorch", "vllm._C", "vllm._flashmla_C", "vllm._flashmla_extension_C",
           "vllm.vllm_flash_attn._vllm_fa2_C", "vllm.vllm_flash_attn._vllm_fa3_C"):
    sys.modules[_m] = types.ModuleType(_m)  # compiled extensions need libcuda
for _m in ("vllm_xpu_kernels", "vllm_xpu_kernels._C", "vllm_xpu_kernels._moe_C", "vllm_xpu_kernels._xpu_C"):
    sys.modules[_m] = types.ModuleType(_m)  # Intel's compiled kernels, imported by platforms/xpu.py

import vllm._custom_ops as _ops  # noqa: E402
import vllm.platforms as P  # noqa: E402
from vllm.platforms import cuda  # noqa: E402
from vllm.platforms.interface import DeviceCapability  # noqa: E402

PLAT = cuda.NonNvmlCudaPlatform()
P._current_platform = PLAT
CAP = [DeviceCapability(9, 0)]
type(PLAT).get_device_capability = classmethod(lambda cls, device_id=0: CAP[0])
IS_ROCM = [False]
type(PLAT).is_rocm = classmethod(lambda cls: IS_ROCM[0])
# a host with as many GPUs as any sampled world size (ParallelConfig.__post_init__ counts them)
type(PLAT).device_count = classmethod(lambda cls: 1024)

import torch  # noqa: E402
import vllm.utils.flashinfer as fi  # noqa: E402
from transformers import PretrainedConfig  # noqa: E402
from vllm.config import AttentionConfig, VllmConfig, set_current_vllm_config  # noqa: E402
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
_ops.cutlass_scaled_mm_supports_block_fp8 = lambda capability: False  # a compiled-op probe, read at import time
HOST_IMPORT = []  # backends whose module does not import on this GPU-less host (see _backend_cls)
_orig_cls = cuda._get_attn_backend_class


def _backend_cls(b):  # cutlass_mla.py allocates a CUDA tensor at import: a GPU-less host raises there
    try:
        return _orig_cls(b)
    except ImportError:
        HOST_IMPORT.append(b.name)
        raise
    except (RuntimeError, AssertionError, AttributeError) as exc:
        # CUDA, a compiled op or Triton touched at import time; recorded so that the comparison can say so
        HOST_IMPORT.append(b.name)
        raise ImportError(f"CUDA at import: {exc}") from None


cuda._get_attn_backend_class = _backend_cls

DEVICES = {"sm80": (8, 0), "sm86": (8, 6), "sm89": (8, 9), "sm90": (9, 0), "sm100": (10, 0), "sm103": (10, 3),
           "sm120": (12, 0), "sm121": (12, 1), "gfx942": (9, 4), "gfx950": (9, 5)}
OTHER_DEVICES = ("xpu", "cpu")  # their platforms' own selectors (sampled run only)
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
KEYS = ("device", "model", "tensor_parallel_size", "decode_context_parallel_size", "kv_cache_dtype",
        "attention_backend", "block_size", "prefill_context_parallel_size")


def grid():
    for dev, model, tp, dcp, kv, forced, block in itertools.product(DEVICES, MODELS, TP, DCP, KV, FORCED, BLOCK):
        yield dict(zip(KEYS, (dev, model, tp, dcp, kv, forced, block, 1)))


def catalog_models() -> dict:
    """Every catalog model as its config.json values (rules/catalog/models.yaml: the model's fields, its
    family's MLA dimensions); a model without index_topk carries none, as its config.json does."""
    import yaml

    doc = yaml.safe_load((Path(__file__).resolve().parents[2] / "rules" / "catalog" / "models.yaml").read_text())
    arch_family = {a: f for f, spec in doc["families"].items() for a in spec.get("architectures", ())}
    out = {}
    for name, m in doc["models"].items():
        spec = dict(architectures=[m["architecture"]], num_attention_heads=m["num_attention_heads"],
                    **(doc["families"].get(arch_family.get(m["architecture"]), {}) or {}).get("mla", {}))
        if m.get("index_topk") is not None:
            spec["index_topk"] = m["index_topk"]
        out[name] = spec
    return out


def sampled(n: int, seed: int):
    """n inputs drawn (seeded) from the whole domain of each input, invalid values included."""
    from typing import get_args

    from vllm.config.cache import CacheDType

    rng = random.Random(seed)
    devices = list(DEVICES) + list(OTHER_DEVICES)
    models = catalog_models()
    MODELS.update(models)
    # half the draws from the names a DSA layer can run with, half from everything vLLM registers
    backends, dsa_backends = [None] + [b.name for b in E], [None, None] + FORCED[1:8]
    kvs, dsa_kvs = list(get_args(CacheDType)), KV[:8]
    # weighted toward shapes vLLM accepts, so that the later checks are reached as often as the parallel ones
    tps, dcps, pcps = [1, 2, 3, 4, 6, 8, 8, 16, 32], [1] * 6 + [2, 2, 3, 4, 8, 16], [1] * 8 + [2, 3, 4]
    blocks = [None] * 4 + [1, 16, 32, 48, 64, 128, 256]
    for _ in range(n):
        yield dict(zip(KEYS, (rng.choice(devices), rng.choice(list(models)), rng.choice(tps), rng.choice(dcps),
                              rng.choice(rng.choice((kvs, dsa_kvs))), rng.choice(rng.choice((backends, dsa_backends))),
                              rng.choice(blocks), rng.choice(pcps))))


def _value_error(exc: Exception) -> str:
    """vLLM's own message: pydantic wraps a validator's ValueError as 'Value error, <message> [type=…'."""
    text = str(exc)
    if "Value error, " in text:
        text = text.split("Value error, ", 1)[1].split(" [type=", 1)[0]
    return text


def one(point: dict) -> dict:
    from vllm.config import ModelConfig, ParallelConfig

    dev, model = point["device"], point["model"]
    tp, dcp, pcp = point["tensor_parallel_size"], point["decode_context_parallel_size"], point["prefill_context_parallel_size"]
    kv, forced, block = point["kv_cache_dtype"], point["attention_backend"], point["block_size"]
    spec = MODELS[model]
    rocm = dev.startswith("gfx")
    if dev in DEVICES:
        CAP[0] = DeviceCapability(*DEVICES[dev])
    IS_ROCM[0] = rocm
    # EngineArgs.create_engine_config builds ParallelConfig before anything reads the model
    try:
        pc = ParallelConfig(tensor_parallel_size=tp, decode_context_parallel_size=dcp,
                            prefill_context_parallel_size=pcp)
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        return {"attention_backend": None, "error": _value_error(exc)[:80], "stage": "ParallelConfig"}
    if "index_topk" not in spec:  # deepseek_v2.py: is_v32 = hasattr(config, "index_topk"); no sparse layer
        return {"sparse": False}
    # VllmConfig.__post_init__: the heads must split over TP (the DSA models are MLA: no GQA checks)
    model_cfg = types.SimpleNamespace(use_mla=True, multimodal_config=None, model_arch_config=types.SimpleNamespace(
        total_num_attention_heads=spec["num_attention_heads"]))
    try:
        ModelConfig.verify_with_parallel_config(model_cfg, pc)
    except ValueError as exc:
        return {"attention_backend": None, "error": str(exc)[:80], "stage": "ModelConfig"}
    heads = spec["num_attention_heads"] // tp
    cfg = VllmConfig()
    hf = PretrainedConfig(**spec)
    head_size = spec["kv_lora_rank"] + spec["qk_rope_head_dim"]
    mc = types.SimpleNamespace(hf_config=hf, hf_text_config=hf, rswa_window=None, dtype=torch.bfloat16, is_hybrid=False,
                               get_num_attention_heads=lambda pc: heads, get_head_size=lambda: head_size)
    object.__setattr__(cfg, "model_config", mc)
    object.__setattr__(cfg, "parallel_config", pc)
    cfg.cache_config.cache_dtype = kv
    if block is not None:
        cfg.cache_config.block_size = block
        cfg.cache_config.user_specified_block_size = True
    # through AttentionConfig's own parsing (validate_backend_before, __post_init__): CUTLASS_MSA and
    # TRITON_MSA are MiniMax decode-kernel aliases there, and leave the backend to automatic selection
    object.__setattr__(cfg, "attention_config", AttentionConfig(**({"backend": forced} if forced else {})))
    forced = cfg.attention_config.backend.name if cfg.attention_config.backend else None
    with set_current_vllm_config(cfg):
        # the model hook runs with the platform in place (GLM-5: CUDA SM10x only)
        type(PLAT).is_cuda = classmethod(lambda cls: not IS_ROCM[0] and dev in DEVICES)
        MODELS_CONFIG_MAP[spec["architectures"][0]].verify_and_update_config(cfg)
        sel_kv = cfg.cache_config.cache_dtype
        selector._cached_get_attn_backend.cache_clear()
        cuda._get_backend_priorities.cache_clear()
        if dev in OTHER_DEVICES:
            return _other_platform(dev, cfg, forced, sel_kv, block, head_size, heads)
        if rocm:
            from vllm.v1.attention.backends.mla.rocm_aiter_mla_sparse import ROCMAiterMLASparseBackend as backend
        else:
            try:
                backend = get_attn_backend(head_size, torch.bfloat16, sel_kv, use_mla=True, use_sparse=True,
                                           num_heads=heads)
            except ValueError as exc:
                # the message's first 80 characters name the refused backend (or say none was found);
                # vLLM's reasons follow later in the text (every recorded message is longer than that)
                return {"attention_backend": None, "error": str(exc)[:80], "stage": "selector"}
        final = _canonicalize_sparse_mla_kv_cache_dtype(backend, sel_kv)
        size = block if block is not None else PLAT._preferred_block_size_for_backends(
            [backend, DeepseekV32IndexerBackend], 16, cfg)
        dense_impl = getattr(backend.get_impl_cls(), "supports_dense_mha_prefill", True)
        # the metadata builder adds `and not (self.use_pcp and self.dcp_world_size > 1)` (sparse_mla_attention.py,
        # "Dense MHA cannot be used under PCP+DCP"); it reads both from process groups a GPU-less host has not
        # got, so they come from the ParallelConfig built above
        dense = (dense_impl and sparse_mla_attention._use_dense_mha_prefill(cfg, spec["index_topk"], spec["index_topk"])
                 and not (pc.prefill_context_parallel_size > 1 and pc.decode_context_parallel_size > 1))
        return {"attention_backend": backend.get_name(), "requested_kv_cache_dtype": sel_kv, "kv_cache_dtype": final,
                "page_size": size, "dense_attn_kv_len_threshold": spec["index_topk"] if dense else None}


def _other_platform(dev, cfg, forced, sel_kv, block, head_size, heads) -> dict:
    """Intel XPU and CPU: their platform class's own get_attn_backend_cls for the sparse layer."""
    from vllm.platforms.cpu import CpuPlatform
    from vllm.platforms.xpu import XPUPlatform
    from vllm.v1.attention.selector import AttentionSelectorConfig

    plat = XPUPlatform if dev == "xpu" else CpuPlatform
    sel = AttentionSelectorConfig(head_size=head_size, dtype=torch.bfloat16, kv_cache_dtype=sel_kv, block_size=block,
                                  use_mla=True, use_sparse=True)
    try:
        path = plat.get_attn_backend_cls(E[forced] if forced else None, sel, num_heads=heads)
    except (ValueError, NotImplementedError) as exc:
        return {"attention_backend": None, "error": f"{type(exc).__name__}: {exc}"[:80], "stage": "selector"}
    name = next((b.name for b in E if b.value == path), path)
    return {"attention_backend": name, "requested_kv_cache_dtype": sel_kv, "platform": dev}


def main(out: str, n: int = 0, seed: int = 0) -> None:
    t0 = time.perf_counter()
    count = 0
    with open(out, "w") as fh:
        for point in (sampled(n, seed) if n else grid()):
            HOST_IMPORT.clear()
            try:
                res = one(point)
            except Exception as exc:  # noqa: BLE001 - any other exception vLLM raises is its answer too
                res = {"attention_backend": None, "error": f"{type(exc).__name__}: {exc}"[:80], "stage": "other"}
            if HOST_IMPORT:
                res["host_import"] = HOST_IMPORT[0]
            fh.write(json.dumps({**point, "vllm": res}) + "\n")
            count += 1
    print(json.dumps({"inputs": count, "seed": seed if n else None, "seconds": round(time.perf_counter() - t0, 1)}))


if __name__ == "__main__":
    argv = sys.argv[1:]
    main(argv[0], int(argv[argv.index("--sample") + 1]) if "--sample" in argv else 0,
         int(argv[argv.index("--seed") + 1]) if "--seed" in argv else 0)
