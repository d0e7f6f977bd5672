"""vLLM's own start-up with the nsa-policy plugin installed beside it (runs INSIDE the vLLM side env).

    PYTHONPATH=<nsa-policy wheel target> <vllmenv>/bin/python scripts/plugin_harness/vllm_run.py MODES \
        < configs.jsonl > runs.jsonl

Per configuration and mode (off|audit|fill|enforce): vLLM's own `EngineArgs(...)` (whose
`__post_init__` calls the real `load_general_plugins()`, which finds the plugin through its entry
point; VLLM_PLUGINS as the caller sets it) and `EngineArgs.create_engine_config()`. The device is
emulated as scripts/vllm_oracle/oracle.py does it: a CUDA platform object with the input's capability,
compiled extension modules stubbed, and vLLM's compiled-kernel support probes answered (they call
torch.ops at import, which a CPU host lacks). The model is a config.json (model inspection and
ModelConfig are vLLM's own). Output: the VllmConfig's attention, cache and parallel configs (repr),
the EngineArgs fields the plugin may write, the refusal if any, and the plugin's decision-log line.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import tempfile
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
type(PLAT).device_count = classmethod(lambda cls: 8)  # an 8-GPU node

import vllm._custom_ops as ops  # noqa: E402

for _n in ("cutlass_scaled_mm_supports_block_fp8", "cutlass_scaled_mm_supports_fp8", "cutlass_scaled_mm_supports_fp4",
           "cutlass_group_gemm_supported"):
    setattr(ops, _n, lambda *a, **k: True)  # kernel-support probes: a complete CUDA build

DEVICES = {"sm90": ((9, 0), "h200"), "sm100": ((10, 0), "b200"), "sm103": ((10, 3), "b300"),
           "sm120": ((12, 0), "rtx-pro-6000")}
MODELS = {
    "ds32": dict(architectures=["DeepseekV32ForCausalLM"], model_type="deepseek_v32", num_attention_heads=128,
                 num_key_value_heads=128, kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128,
                 index_topk=2048, index_head_dim=128, index_n_heads=64, hidden_size=7168, num_hidden_layers=61,
                 vocab_size=129280, intermediate_size=18432, moe_intermediate_size=2048, n_routed_experts=256,
                 num_experts_per_tok=8, q_lora_rank=1536, max_position_embeddings=163840, torch_dtype="bfloat16"),
    "glm5": dict(architectures=["GlmMoeDsaForCausalLM"], model_type="glm_moe_dsa", num_attention_heads=64,
                 num_key_value_heads=64, kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=192, v_head_dim=256,
                 index_topk=2048, torch_dtype="bfloat16", max_position_embeddings=202752),
}
ARG_FIELDS = ("attention_backend", "kv_cache_dtype", "block_size", "tensor_parallel_size", "attention_config")


def model_dir(root: str, name: str) -> str:
    d = os.path.join(root, name)
    if not os.path.isdir(d):
        os.makedirs(d)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(MODELS[name], f)
    return d


def dump(obj) -> dict:
    if dataclasses.is_dataclass(obj):
        return {f.name: repr(getattr(obj, f.name, None)) for f in dataclasses.fields(obj)}
    return {"repr": repr(obj)}


def run(root, logdir, item, mode, n) -> dict:
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.attention.backends.registry import AttentionBackendEnum as E

    cap, name = DEVICES[item["device"]]
    CAP[0] = DeviceCapability(*cap)
    log = os.path.join(logdir, f"{n}.jsonl")
    os.environ.update(NSA_POLICY=mode, NSA_POLICY_DEVICE=name, NSA_POLICY_LOG=log)
    for key in ("NSA_POLICY_DECISION_ID", "NSA_POLICY_DECISION_VIEW", "NSA_POLICY_BUNDLE"):
        os.environ.pop(key, None)  # nothing of the previous run's plugin settings leaks into this one
    os.environ.update(item.get("plugin_env") or {})  # a fault injected into the plugin's own settings
    kwargs = dict(model=model_dir(root, item["model"]), skip_tokenizer_init=True,
                  tensor_parallel_size=item.get("tp", 1), kv_cache_dtype=item.get("kv", "auto"))
    if item.get("backend"):
        kwargs["attention_backend"] = E[item["backend"]]
    if item.get("block"):
        kwargs["block_size"] = item["block"]
    out = {"id": item["id"], "mode": mode}
    t0 = time.perf_counter()
    stage = "EngineArgs"
    try:
        ea = EngineArgs(**kwargs)
        stage = "create_engine_config"
        cfg = ea.create_engine_config()
        out.update(ok=True, stage="done", error=None,
                   config={k: dump(getattr(cfg, k)) for k in ("attention_config", "cache_config", "parallel_config")},
                   args={k: repr(getattr(ea, k, None)) for k in ARG_FIELDS},
                   resolved={"attention_backend": getattr(cfg.attention_config.backend, "name", None),
                             "kv_cache_dtype": cfg.cache_config.cache_dtype, "block_size": cfg.cache_config.block_size})
    except BaseException as exc:
        out.update(ok=False, stage=stage, config=None, args=None, resolved=None,
                   error={"type": type(exc).__name__, "message": " ".join(str(exc).split())[:600]})
    if mode == "fill":  # for the CI replay (tests/plugins)
        out["model_config"] = MODELS[item["model"]]
    out["ms"] = round((time.perf_counter() - t0) * 1000, 2)
    try:
        with open(log) as fh:
            out["log"] = [json.loads(line) for line in fh if line.strip()]
        os.unlink(log)
    except FileNotFoundError:
        out["log"] = []
    return out


def main() -> None:
    modes = sys.argv[1].split(",")
    logging.disable(logging.CRITICAL)
    root = tempfile.mkdtemp(prefix="vllm-plugin-models-")
    logdir = tempfile.mkdtemp(prefix="vllm-plugin-logs-")
    os.environ["NSA_POLICY"] = "audit"  # so that load_general_plugins() finds the plugin switched on
    from vllm.engine.arg_utils import EngineArgs
    from vllm.plugins import load_general_plugins

    load_general_plugins()
    wrapped = getattr(EngineArgs.create_engine_config, "__nsa_policy_wrapped__", False)
    sys.stderr.write(f"create_engine_config wrapped: {wrapped}\n")
    n = 0
    for line in sys.stdin:
        if not line.strip():
            continue
        item = json.loads(line)
        for mode in modes:
            n += 1
            sys.stdout.write(json.dumps(run(root, logdir, item, mode, n), sort_keys=True) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
