"""Reading vLLM's configuration: EngineArgs, an argparse Namespace or a mapping by vLLM's names
(attention_backend, kv_cache_dtype, block_size, tensor_parallel_size, decode_context_parallel_size, …;
rules/catalog/vllm/args.yaml), and its AttentionConfig."""
from __future__ import annotations

from typing import Any, Mapping

from nsa_policy.base.errors import InputError, closest
from nsa_policy.core.facts import ServingConfig
from nsa_policy.inputs import CONFIG_FIELDS, merge_value, validate_config


def config_from(obj: Any) -> ServingConfig:
    """vLLM's EngineArgs / argparse Namespace / mapping (attention_backend, kv_cache_dtype, block_size,
    tensor_parallel_size, decode_context_parallel_size, …) as a ServingConfig with engine vllm."""
    from nsa_policy.engines.vllm.catalog import load_vllm

    if isinstance(obj, ServingConfig):
        return obj if obj.engine == "vllm" else obj.model_copy(update={"engine": "vllm"})
    aliases = load_vllm().field_aliases()
    values: dict[str, Any] = {"engine": "vllm"}
    if obj is None:
        return validate_config(values)
    items = obj.items() if isinstance(obj, Mapping) else [
        (k, getattr(obj, k, None)) for k in (*CONFIG_FIELDS, *aliases, "attention_config")]
    for key, value in items:
        if key == "attention_config":  # vLLM's AttentionConfig (or a dict): backend, indexer_kv_dtype, …
            _attention_config(values, value)
            continue
        name = aliases.get(key, key)
        if key == "engine" or value is None:
            continue
        if name not in ServingConfig.model_fields:
            if isinstance(obj, Mapping):
                near = closest(key, CONFIG_FIELDS + tuple(aliases))
                raise InputError(f"config.{key}", value,
                                 hint="unknown vLLM argument" + (f"; did you mean {near!r}?" if near else ""))
            continue
        if hasattr(value, "name") and not isinstance(value, str):  # an AttentionBackendEnum member
            value = value.name
        merge_value(values, name, value, key)
    return validate_config(values)


def _attention_config(values: dict[str, Any], cfg: Any) -> None:
    if cfg is None:
        return
    get = cfg.get if isinstance(cfg, Mapping) else (lambda k: getattr(cfg, k, None))
    for key, name in (("backend", "attention_backend"), ("indexer_kv_dtype", "indexer_kv_dtype"),
                      ("sparse_mla_force_mqa", "sparse_mla_force_mqa")):
        value: Any = get(key)
        if value is not None and hasattr(value, "name") and not isinstance(value, str):
            value = value.name
        if value is not None and not (key == "sparse_mla_force_mqa" and value is False):
            merge_value(values, name, value, f"attention_config.{key}")


