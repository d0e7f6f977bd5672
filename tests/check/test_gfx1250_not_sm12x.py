"""ROCm gfx1250 reports compute capability (12, 5): no rule of any shipped bundle may read that as an sm12x GPU
(sglang 0.5.23 gates its CUDA-only paths on _is_cuda for this reason, layers/attention/dsa_backend.py).

Method: every decision on gfx1250 must equal the decision on the same device with its capability moved to
(13, 5), a major no class has. A rule that keys on major 12 (or 12 among others) without naming the vendor
answers differently; ranges such as `ge: 10` that hold for both stay equal. The same comparison on NVIDIA
sm120 does find rules keyed on major 12, so the method can see such a rule.
"""
from __future__ import annotations

import itertools
from typing import Any

from nsa_policy.api import build_facts, decide
from nsa_policy.catalog.store import load_catalog
from nsa_policy.core.bundle import get_bundle, list_bundles
from nsa_policy.core.facts import DeviceFacts

MODELS = ("deepseek-ai/DeepSeek-V3.2", "zai-org/GLM-5")
KVS = (None, "bfloat16", "fp8_e4m3")


def _bundles() -> list[str]:
    out = []
    for b in list_bundles():
        try:
            get_bundle(b)
        except Exception:  # abstract bases (base, vllm-base) are not evaluated on their own
            continue
        out.append(b)
    return out


def _signature(device: DeviceFacts, policy: str, model: str, kv: Any, backend: Any) -> tuple:
    engine = get_bundle(policy).engine
    config: dict[str, Any] = {"tp_size": 8}
    if kv is not None:
        config["kv_cache_dtype"] = kv
    if backend is not None:
        config["prefill_backend"] = backend
    facts = build_facts(config, device=device, model=model, env={}, packages={}, engine=engine)
    d = decide(facts, policy, trace=True)
    fired = tuple(sorted({t.rule for t in d.trace if t.outcome in ("fired", "emitted")}))
    return (d.kv_cache_dtype, d.prefill_backend, d.decode_backend, d.page_size, d.kv_cache_layout,
            d.dense_attn_kv_len_threshold, tuple(f.code for f in d.findings), fired)


def _moved(device: DeviceFacts, major: int) -> DeviceFacts:
    assert device.compute_capability is not None
    return device.model_copy(update={"compute_capability": (major, device.compute_capability[1])})


def _differences(cls: str) -> list[str]:
    catalog = load_catalog()
    dev = catalog.device(cls)
    other = _moved(dev, 13)
    backends = [None] + list(catalog.backend_names)
    found = []
    for policy, model, kv, backend in itertools.product(_bundles(), MODELS, KVS, backends):
        if backend is not None and get_bundle(policy).engine != "sglang":
            continue  # the vLLM bundles are asked without a forced backend
        a = _signature(dev, policy, model, kv, backend)
        b = _signature(other, policy, model, kv, backend)
        if a != b:
            found.append(f"{policy} {model} kv={kv} prefill={backend}: {a} vs {b}")
    return found


def test_the_catalog_reads_gfx1250_as_amd() -> None:
    cat = load_catalog()
    assert cat.capability_of("gfx1250") == ("amd", (12, 5))
    assert cat.class_for_capability(12, 5) is None  # NVML (NVIDIA) never maps 12.5 to a class
    assert cat.class_for_capability(12, 5, "amd") == "gfx1250"
    assert cat.class_for_capability(11, 0) == "sm110"
    assert cat.vendor_class("gfx1250", "amd") == "gfx1250" and cat.vendor_class("gfx1250", "nvidia") is None


def test_no_rule_takes_gfx1250_for_sm12x() -> None:
    diffs = _differences("gfx1250")
    assert not diffs, "rules keyed on the capability major answer differently on gfx1250:\n" + "\n".join(diffs[:10])


def test_the_comparison_sees_rules_keyed_on_major_12() -> None:
    """The control: on NVIDIA sm120 the same comparison differs (rules name `device.major: 12` with the vendor)."""
    assert _differences("sm120")
