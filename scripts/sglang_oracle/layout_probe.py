"""sglang's own DSA KV-pool row width per (platform, prefill backend, decode backend, KV dtype).

Runs INSIDE a release's side environment: 0.5.16+ call mem_cache/kv_cache_configurator's
calculate_mla_kv_cache_dim, 0.5.10-0.5.14 ModelRunnerKVCacheMixin.calculate_mla_kv_cache_dim (with a
stand-in `self` holding server_args, model_config and kv_cache_dtype):

    python scripts/sglang_oracle/run.py ... or SideEnvs.run_script(release, "layout_probe.py", stdin)

Input lines: {"id", "hip": bool, "prefill": name, "decode": name, "kv": "fp8_e4m3"|"bfloat16"}.
Output lines: {"id", "dim": int} — 576 is the raw MLA row (bf16, or fp8 with one per-tensor scale),
656 the fp8 row with per-128 scales and a bf16 rope (512 + 4·4 + 64·2 bytes).
Patched: the module's `_is_hip`, and (0.5.16+) its `get_exec`/`get_disagg` (the resolved backends, no PD role);
the model is DeepSeek-V3.2's shape (kv_lora_rank 512, rope 64, index_topk 2048).
"""
from __future__ import annotations

import inspect
import json
import os
import sys
from types import SimpleNamespace as NS

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _inrelease import quiet_imports  # noqa: E402


def main() -> None:
    quiet_imports()
    import torch

    try:  # 0.5.16+: a function of the KV-cache configurator reading the resolved runtime context
        import sglang.srt.mem_cache.kv_cache_configurator as kc
        method = None
    except ImportError:  # 0.5.10-0.5.14: a ModelRunner method reading self.server_args
        import sglang.srt.model_executor.model_runner_kv_cache_mixin as kc
        method = kc.ModelRunnerKVCacheMixin.calculate_mla_kv_cache_dim
    if method is None and not hasattr(kc, "calculate_mla_kv_cache_dim"):
        import sglang.srt.model_executor.model_runner_kv_cache_mixin as kc
        method = kc.ModelRunnerKVCacheMixin.calculate_mla_kv_cache_dim

    hf = NS(architectures=["DeepseekV32ForCausalLM"], index_topk=2048, model_type="deepseek_v32",
            index_head_dim=128, index_n_heads=64)
    model_config = NS(hf_config=hf, hf_text_config=hf, kv_lora_rank=512, qk_rope_head_dim=64)
    dtypes = {"fp8_e4m3": torch.float8_e4m3fn, "bfloat16": torch.bfloat16}
    for line in sys.stdin:
        if not line.strip():
            continue
        item = json.loads(line)
        kc._is_hip = bool(item["hip"])
        if method is not None:
            args = NS(**{f"{p}_{phase}_backend": item[phase] for p in ("nsa", "dsa") for phase in ("prefill", "decode")},
                      disaggregation_mode="null")
            me = NS(model_config=model_config, kv_cache_dtype=dtypes[item["kv"]], server_args=args)
            dim = method(me)
        else:
            kernel = NS(dsa_prefill_backend=item["prefill"], dsa_decode_backend=item["decode"])
            kc.get_exec = lambda kernel=kernel: NS(kernel=kernel)
            kc.get_disagg = lambda: NS(disaggregation_mode="null")
            kwargs = dict(model_config=model_config, kv_cache_dtype=dtypes[item["kv"]])
            if "server_args" in inspect.signature(kc.calculate_mla_kv_cache_dim).parameters:  # 0.5.16-0.5.19
                kwargs["server_args"] = NS(dsa_prefill_backend=item["prefill"], dsa_decode_backend=item["decode"],
                                           disaggregation_mode="null")
            dim = kc.calculate_mla_kv_cache_dim(**kwargs)
        print(json.dumps({"id": item["id"], "dim": int(dim)}), flush=True)


if __name__ == "__main__":
    main()
