"""startup.apply_vllm: vLLM's EngineArgs / Namespace get the attention backend, KV dtype and block size
only where the user left them unset. CI uses argparse.Namespace and a dataclass stand-in with EngineArgs'
field names and defaults; the opt-in test drives vLLM's real EngineArgs (NSA_POLICY_VLLM_PYTHON = a python
with vLLM installed, e.g. /work/vllmenv/bin/python)."""
from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pytest

from nsa_policy.base.errors import InputError
from nsa_policy.engines.sglang.startup import StartupRejected
from nsa_policy.engines.vllm.startup import apply_vllm

ROOT = Path(__file__).resolve().parents[2]
DSV32 = "deepseek-ai/DeepSeek-V3.2"


@dataclass
class EngineArgsStandIn:
    """The EngineArgs fields apply_vllm reads and writes, with vLLM 0.33's defaults (engine/arg_utils.py)."""

    model: str = DSV32
    attention_backend: Any = None
    kv_cache_dtype: str = "auto"
    block_size: Optional[int] = None
    tensor_parallel_size: int = 1
    decode_context_parallel_size: int = 1
    prefill_context_parallel_size: int = 1
    attention_config: dict = field(default_factory=dict)


def _ns(**kw) -> argparse.Namespace:
    base = dict(model=DSV32, attention_backend=None, kv_cache_dtype="auto", block_size=None, tensor_parallel_size=8,
                decode_context_parallel_size=1)
    return argparse.Namespace(**{**base, **kw})


def test_fills_every_unset_field():
    args = _ns()
    applied = apply_vllm(args, device="b200")
    assert (args.attention_backend, args.kv_cache_dtype, args.block_size) == ("FLASHINFER_MLA_SPARSE", "fp8_e4m3", 64)
    assert applied.previous == {"attention_backend": None, "kv_cache_dtype": "auto", "block_size": None}


def test_explicit_values_are_never_replaced():
    args = _ns(attention_backend="FLASHMLA_SPARSE", block_size=64)
    applied = apply_vllm(args, device="b200")
    assert args.attention_backend == "FLASHMLA_SPARSE"  # kept; the KV dtype FlashMLA takes is filled
    assert args.kv_cache_dtype == "fp8_ds_mla" and applied.written == {"kv_cache_dtype": "fp8_ds_mla"}
    again = apply_vllm(args, device="b200")
    assert again.written == {} and again.kept == {}  # applying twice changes nothing


def test_attention_config_backend_counts_as_set():
    args = EngineArgsStandIn(attention_config={"backend": "FLASHMLA_SPARSE"})
    applied = apply_vllm(args, device="b200")
    assert args.attention_backend is None and "attention_backend" not in applied.written


def test_dataclass_stand_in_on_h200_leaves_auto_kv():
    args = EngineArgsStandIn()
    applied = apply_vllm(args, device="h200")
    assert (args.attention_backend, args.kv_cache_dtype, args.block_size) == ("FLASH_ATTN_MLA_SPARSE", "auto", 64)
    assert "kv_cache_dtype" not in applied.written


def test_a_model_hook_is_not_a_kept_difference():
    args = _ns(kv_cache_dtype="bfloat16")
    applied = apply_vllm(args, device="b200")
    assert args.kv_cache_dtype == "bfloat16" and applied.kept == {}


def test_rejected_writes_nothing_and_logs(caplog):
    args = _ns(tensor_parallel_size=2, decode_context_parallel_size=2)
    with caplog.at_level(logging.ERROR, logger="nsa_policy.startup"), pytest.raises(StartupRejected, match="NSA153"):
        apply_vllm(args, device="h200")
    assert args.attention_backend is None and args.block_size is None
    assert caplog.records[-1].nsa_policy["status"] == "rejected"


def test_mapping_and_bad_input():
    cfg = {"model": DSV32, "tensor_parallel_size": 8}
    apply_vllm(cfg, device="rtx-pro-6000")
    assert "block_size" not in cfg  # a mapping without the key does not carry the argument
    with pytest.raises(InputError, match="policy"):
        apply_vllm(_ns(), device="b200", policy="sglang-0.5.10")
    with pytest.raises(StartupRejected, match="NSA050: kv_cache_dtype fp9"):
        apply_vllm(_ns(kv_cache_dtype="fp9"), device="b200")
    with pytest.raises(InputError, match="tensor_parallel_size|tp_size"):
        apply_vllm(_ns(tensor_parallel_size="eight"), device="b200")


VLLM_PYTHON = os.environ.get("NSA_POLICY_VLLM_PYTHON")
_REAL = r"""
import json, sys, types
for m in ("vllm._C_stable_libtorch", "vllm._C", "vllm._flashmla_C", "vllm._flashmla_extension_C",
          "vllm.vllm_flash_attn._vllm_fa2_C", "vllm.vllm_flash_attn._vllm_fa3_C"):
    sys.modules[m] = types.ModuleType(m)  # compiled extensions need libcuda; EngineArgs does not
from transformers import PretrainedConfig  # noqa: F401  (import order: avoids a circular import)
from vllm.config import AttentionConfig
from vllm.engine.arg_utils import EngineArgs
import vllm.v1.attention.backends.registry as registry
from nsa_policy.engines.sglang.startup import apply_vllm

out = {}
e = EngineArgs(model="deepseek-ai/DeepSeek-V3.2", tensor_parallel_size=8)
apply_vllm(e, device="b200")
out["auto"] = [type(e.attention_backend).__name__, e.attention_backend.name, e.kv_cache_dtype, e.block_size]
e = EngineArgs(model="deepseek-ai/DeepSeek-V3.2", attention_config=AttentionConfig(backend="FLASHMLA_SPARSE"))
a = apply_vllm(e, device="b200")
out["ac"] = [e.attention_backend, e.kv_cache_dtype, e.block_size, sorted(a.written)]
e = EngineArgs(model="deepseek-ai/DeepSeek-V3.2", kv_cache_dtype="fp8", block_size=64,
               attention_backend=registry.AttentionBackendEnum.FLASHMLA_SPARSE)
out["explicit"] = sorted(apply_vllm(e, device="h200").written)
print(json.dumps(out))
"""


@pytest.mark.skipif(not VLLM_PYTHON, reason="opt-in: NSA_POLICY_VLLM_PYTHON names a python with vLLM installed")
def test_real_vllm_engine_args():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([VLLM_PYTHON, "-c", _REAL], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["auto"] == ["AttentionBackendEnum", "FLASHINFER_MLA_SPARSE", "fp8_e4m3", 64]
    assert out["ac"] == [None, "fp8_ds_mla", 64, ["block_size", "kv_cache_dtype"]]
    assert out["explicit"] == []
