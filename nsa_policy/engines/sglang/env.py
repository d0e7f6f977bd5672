"""The environment variables sglang's DSA start-up reads, and the `env.*` facts parsed as sglang parses them.

The threshold variables' names (and per-release readers) are the argument registry's
(rules/catalog/sglang/args.yaml, argument dense_attn_kv_len_threshold). The other variables are the
ROCm page-size switches: aiter's preshuffle paged-MQA path (layers/attention/{nsa,dsa}/utils.py
aiter_can_use_preshuffle_paged_mqa, sglang 0.5.12+).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any, Optional, Union

ROCM_SWITCHES = (
    "SGLANG_USE_AITER",
    "SGLANG_NSA_HIP_DISABLE_PRESHUFFLE",
    "SGLANG_DSA_HIP_DISABLE_PRESHUFFLE",
    "AITER_ENABLE_AOT_GLUON_PA_MQA_LOGITS",
)
FACT_PATHS = tuple(f"env.{k}" for k in (
    "use_aiter", "aiter_aot_gluon_pa_mqa_logits", "nsa_hip_disable_preshuffle", "dsa_hip_disable_preshuffle",
    "nsa_threshold_set", "dsa_threshold_set", "dsa_threshold", "threshold_conflict"))


@lru_cache(maxsize=1)
def threshold_env_vars() -> tuple[str, ...]:
    """The dense-attention threshold's variables, old (NSA) name first, as the registry declares them."""
    from nsa_policy.engines.sglang.args import load_args

    return tuple(e.name for e in load_args().argument("dense_attn_kv_len_threshold").env)


def variables() -> tuple[str, ...]:
    """Every variable an environment's facts keep as given (a release reads one of the two threshold names)."""
    return ROCM_SWITCHES + threshold_env_vars()


def _get_bool_env_var(value: Optional[str]) -> bool:
    """sglang's utils.common.get_bool_env_var: "true"/"1" (any case) hold; anything else is false."""
    return value is not None and value.lower() in ("true", "1")


def _int_env(raw: Optional[str]) -> Optional[int]:
    """A threshold variable's value (environment_from has validated it); None when unset or blank."""
    return None if raw is None or not raw.strip() else int(raw.strip())


def env_facts(env: Any) -> dict[str, Optional[Union[bool, int]]]:
    """The ROCm preshuffle switches, parsed as sglang's readers parse them. dsa_hip_disable_preshuffle is
    None when the variable is unset (0.5.13-0.5.20 then fall back to the NSA name; 0.5.21+ do not)."""
    v = env.variables
    dsa = v.get("SGLANG_DSA_HIP_DISABLE_PRESHUFFLE")
    nsa_name, dsa_name = threshold_env_vars()
    nsa, dsa_thr = _int_env(v.get(nsa_name)), _int_env(v.get(dsa_name))
    return {
        "env.use_aiter": _get_bool_env_var(v.get("SGLANG_USE_AITER")),
        "env.aiter_aot_gluon_pa_mqa_logits": _get_bool_env_var(v.get("AITER_ENABLE_AOT_GLUON_PA_MQA_LOGITS")),
        "env.nsa_hip_disable_preshuffle": _get_bool_env_var(v.get("SGLANG_NSA_HIP_DISABLE_PRESHUFFLE")),
        # environ.EnvBool: true/1/yes/y hold (false/0/no/n do not; sglang raises on anything else)
        "env.dsa_hip_disable_preshuffle": None if dsa is None else dsa.lower() in ("true", "1", "yes", "y"),
        # which threshold names are set (with a value): sglang up to 0.5.12 reads only the NSA one, later only the DSA one
        "env.nsa_threshold_set": nsa is not None,
        "env.dsa_threshold_set": dsa_thr is not None,
        # the DSA name's own value (env.dense_attn_kv_len_threshold is the NSA name's when both are set)
        "env.dsa_threshold": dsa_thr,
        "env.threshold_conflict": nsa is not None and dsa_thr is not None and nsa != dsa_thr,
    }
