"""Turn what callers pass (objects, mappings, names, paths, the environment) into facts."""
from __future__ import annotations

import importlib.metadata
import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Optional

from pydantic import ValidationError

from nsa_policy.base.errors import InputError, closest
from nsa_policy.catalog.store import Catalog
from nsa_policy.core.facts import DSA_ENV_VARS, THRESHOLD_ENV_VARS, DeviceFacts, Environment, ModelFacts, ServingConfig
from nsa_policy.engines.sglang.args import load_args

CONFIG_FIELDS = tuple(ServingConfig.model_fields)
# Every other name sglang (any release) or nsa-policy gives a ServingConfig field: the dsa_* spellings
# (NSA was renamed DSA in 0.5.13), the parser's tensor/data_parallel_size dests (up to 0.5.13),
# nsa-policy's own threshold attributes and --tp/--dp. Derived from rules/catalog/sglang/args.yaml.
FIELD_ALIASES: dict[str, str] = load_args().field_aliases()
# sglang 0.5.22+ spells DP attention as --attn-dp-size N (it turns the deprecated
# `--dp-size N --enable-dp-attention` into attn_dp_size=N, dp_size=1); the policy reads it as that pair.
ATTN_DP_NAMES: tuple[str, ...] = tuple(a.name for a in load_args().argument("attn_dp_size").attributes)
# A legacy CP mode attribute always holds its parser default: it counts only with its own switch on.
ALIAS_SWITCHES: dict[str, str] = load_args().alias_switches()
# Switch fields: another name's False is a switch left off (a legacy alias beside the canonical one), not a value.
BOOL_FIELDS = frozenset(n for n, f in ServingConfig.model_fields.items() if f.annotation is bool)
PACKAGES = ("flashinfer-python", "sgl-kernel", "tilelang", "flashinfer-cubin", "flashinfer-jit-cache", "sglang", "triton")


# field → {old value: the value it names now}: renamed choices the policy reads under their new name
# (cp_strategy's in-seq-split is zigzag); from the registry's choice_aliases.
VALUE_ALIASES: dict[str, dict[str, str]] = {
    a.field: {c.value: c.canonical for c in a.choice_aliases}
    for a in load_args().arguments.values() if a.field and a.choice_aliases}


def _validate_config(values: dict[str, Any]) -> ServingConfig:
    for name, aliases in VALUE_ALIASES.items():
        if isinstance(values.get(name), str) and values[name] in aliases:
            values[name] = aliases[values[name]]
    try:
        return ServingConfig(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise InputError(field, err.get("input"), hint=err["msg"]) from None


def _flag_key(key: Any) -> Optional[tuple[Any, Any]]:
    """(argument, spelling) of a mapping key written as sglang's flag: `--nsa-prefill-backend`, or
    `nsa-prefill-backend` as a --config file spells it. Underscored keys are attribute/field names."""
    if not isinstance(key, str) or not (key.startswith("--") or "-" in key):
        return None
    return load_args().lookup(key if key.startswith("--") else "--" + key)


def spellings_from(obj: Any) -> tuple[str, ...]:
    """The sglang flags a mapping's flag-form keys spell (nsa-policy's own spellings left out), in order."""
    if not isinstance(obj, Mapping):
        return ()
    out = []
    for key, value in obj.items():
        hit = _flag_key(key)
        if hit is not None and value is not None and value is not False and not hit[1].nsa_policy_only:
            out.append(hit[1].flag)
    return tuple(dict.fromkeys(out))


def config_from(obj: Any, engine: Optional[str] = None) -> ServingConfig:
    """A ServingConfig from a ServingConfig, a mapping, or any object with sglang's attribute names.

    A mapping's keys are field or attribute names (nsa_prefill_backend, dsa_prefill_backend), or sglang's
    flags as a --config file spells them (nsa-prefill-backend, --dsa-prefill-backend); the flags of
    arguments the policy does not read are accepted and not used. With engine="vllm": vLLM's names
    (rules/catalog/vllm/args.yaml)."""
    if engine == "vllm":
        return _vllm_config_from(obj)
    if obj is None:
        return ServingConfig()
    if isinstance(obj, ServingConfig):
        return obj
    values: dict[str, Any] = {}
    if isinstance(obj, Mapping):
        attn_dp = []
        for key, value in obj.items():
            hit = _flag_key(key)
            if key in ATTN_DP_NAMES or (hit is not None and hit[0].name == "attn_dp_size"):
                if value is not None:
                    attn_dp.append((key, value))
                continue
            if hit is not None:
                if hit[0].field is None:
                    continue  # an sglang argument the policy does not read (cp_strategy, attention_backend)
                name = hit[0].field
                if hit[0].type == "bool" and value is False:
                    continue  # a switch left off, as a --config file's `key: false` is
            else:
                name = FIELD_ALIASES.get(key, key)
                if key in ALIAS_SWITCHES and not obj.get(ALIAS_SWITCHES[key]):
                    continue  # a mode without its switch: sglang does not read it
                if value is False and name in BOOL_FIELDS and name != key:
                    continue  # a legacy switch left off beside the canonical one
            if name not in ServingConfig.model_fields:
                raise InputError(f"config.{key}", value, hint="unknown serving argument"
                                 + (f"; did you mean {closest(key, CONFIG_FIELDS)!r}?" if closest(key, CONFIG_FIELDS) else ""))
            if value is not None:
                _merge(values, name, value, key)
        for key, value in attn_dp:  # after dp_size: it sets the attention-DP width
            _attn_dp(values, value, key)
        reg = load_args()  # a legacy switch carries its mode's default (--enable-nsa-prefill-context-parallel)
        for arg, value in reg.implied(spellings_from(obj), {n for n in values}).items():
            field = reg.argument(arg).field
            if field is not None and field not in values:
                values[field] = value
        return _validate_config(values)
    for name in CONFIG_FIELDS:
        value = getattr(obj, name, None)
        if value is not None and not (value is False and name in BOOL_FIELDS):  # a switch left off: the default
            values[name] = value
    for alias, name in FIELD_ALIASES.items():
        value = getattr(obj, alias, None)
        if alias in ALIAS_SWITCHES and not getattr(obj, ALIAS_SWITCHES[alias], False):
            continue  # a mode without its switch: sglang does not read it
        if value is False and name in BOOL_FIELDS:
            continue
        if value is not None and len(alias) > 2:
            _merge(values, name, value, alias)
    for name in ATTN_DP_NAMES:
        value = getattr(obj, name, None)
        if value is not None:
            _attn_dp(values, value, name)
    return _validate_config(values)


def _vllm_config_from(obj: Any) -> ServingConfig:
    """vLLM's EngineArgs / argparse Namespace / mapping (attention_backend, kv_cache_dtype, block_size,
    tensor_parallel_size, decode_context_parallel_size, …) as a ServingConfig with engine vllm."""
    from nsa_policy.engines.vllm.catalog import load_vllm

    if isinstance(obj, ServingConfig):
        return obj if obj.engine == "vllm" else obj.model_copy(update={"engine": "vllm"})
    aliases = load_vllm().field_aliases()
    values: dict[str, Any] = {"engine": "vllm"}
    if obj is None:
        return _validate_config(values)
    items = obj.items() if isinstance(obj, Mapping) else [
        (k, getattr(obj, k, None)) for k in (*CONFIG_FIELDS, *aliases, "attention_config")]
    for key, value in items:
        if key == "attention_config":  # vLLM's AttentionConfig (or a dict): backend, indexer_kv_dtype, …
            _vllm_attention_config(values, value)
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
        _merge(values, name, value, key)
    return _validate_config(values)


def _vllm_attention_config(values: dict[str, Any], cfg: Any) -> None:
    if cfg is None:
        return
    get = cfg.get if isinstance(cfg, Mapping) else (lambda k: getattr(cfg, k, None))
    for key, name in (("backend", "attention_backend"), ("indexer_kv_dtype", "indexer_kv_dtype"),
                      ("sparse_mla_force_mqa", "sparse_mla_force_mqa")):
        value: Any = get(key)
        if value is not None and hasattr(value, "name") and not isinstance(value, str):
            value = value.name
        if value is not None and not (key == "sparse_mla_force_mqa" and value is False):
            _merge(values, name, value, f"attention_config.{key}")


def _merge(values: dict[str, Any], name: str, value: Any, key: str) -> None:
    if name in values and values[name] != value:
        raise InputError(key, value, hint=f"conflicts with {name}={values[name]!r}")
    values[name] = value


def _attn_dp(values: dict[str, Any], value: Any, key: str) -> None:
    """attn_dp_size N (sglang 0.5.22+) as the policy's (enable_dp_attention, dp_size): attention-DP width N."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(key, value, hint="the attention data-parallel size must be an integer >= 1")
    if value == 1:
        return  # no attention DP: sglang's default
    if values.get("enable_dp_attention") and values.get("dp_size", value) != value:
        raise InputError(key, value, hint=f"conflicts with dp_size={values['dp_size']} with DP attention")
    # From 0.5.22 a plain dp_size counts replicas, which the DSA policy does not read; the width is attn_dp_size.
    values["enable_dp_attention"] = True
    values["dp_size"] = value


def environment_from(env: Optional[Mapping[str, str]] = None, packages: Optional[Mapping[str, str]] = None,
                     release: Optional[str] = None) -> Environment:
    """The environment facts. With `release`, only the threshold variable that sglang release reads counts
    (the other name is ignored, as that release ignores it); without, either name (the NSA one first; the
    namespace has both values, for the policy to settle a conflict)."""
    env = os.environ if env is None else env
    found: list[tuple[str, int]] = []
    read = None if release is None else load_args().env_var_read("dense_attn_kv_len_threshold", release)
    names: tuple[str, ...] = THRESHOLD_ENV_VARS if read is None else (read,)
    for var in names:
        raw = env.get(var)
        if raw is None or str(raw).strip() == "":
            continue
        try:
            val = int(str(raw).strip())
        except ValueError:
            raise InputError(var, raw, hint="the environment variable must be a non-negative integer") from None
        if val < 0:
            raise InputError(var, raw, hint="the environment variable must be a non-negative integer")
        found.append((var, val))
    # Two names with different values are not an input error: each sglang release reads one of them
    # (its compat bundle says which); the default policy refuses the ambiguity (NSA004).
    first: tuple[Optional[str], Optional[int]] = found[0] if found else (None, None)
    variables = {name: str(env[name]) for name in DSA_ENV_VARS if env.get(name) is not None}
    return Environment(dense_attn_kv_len_threshold=first[1], threshold_env_var=first[0], packages=dict(packages or {}),
                       variables=variables)


@lru_cache(maxsize=1)
def installed_packages() -> dict[str, str]:
    """Versions from package metadata; the packages themselves are never imported."""
    out = {}
    for dist in PACKAGES:
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def device_from(device: Any, catalog: Catalog) -> DeviceFacts:
    if isinstance(device, DeviceFacts):
        return catalog.check_device(device)  # its class must be one of the loaded catalog's
    if isinstance(device, str):
        from nsa_policy.integration.discovery import auto_index, discover

        auto, index = auto_index(device)  # 'auto' (the rank's GPU) or 'auto:N' (CUDA device N)
        if auto:
            return discover(catalog, device_index=index)
        return catalog.device(device)
    raise InputError("device", device, catalog.device_choices + ["auto", "auto:N"],
                     hint="a name, a capability spec, 'auto', 'auto:N' or DeviceFacts")


def model_from(model: Any, config: ServingConfig, catalog: Catalog) -> ModelFacts:
    if model is None:
        if config.model_path is None:
            raise InputError("model", None, catalog.model_ids, hint="no model given and config.model_path is unset")
        model = config.model_path
    if isinstance(model, ModelFacts):
        return catalog.check_model(model)  # its family must be one of the loaded catalog's
    if isinstance(model, Path) or (isinstance(model, str) and _looks_like_path(model)):
        return catalog.model_from_path(Path(model))
    if isinstance(model, str):
        return catalog.model(model)
    if isinstance(model, Mapping):
        return catalog.model_from_config(model, source="mapping", model_id=model.get("_name_or_path"))
    if hasattr(model, "architectures"):  # an HF PretrainedConfig or similar object
        cfg = {k: getattr(model, k, None) for k in ("architectures", "index_topk", "num_attention_heads")}
        return catalog.model_from_config(cfg, source=type(model).__name__, model_id=getattr(model, "_name_or_path", None))
    raise InputError("model", model, catalog.model_ids, hint="a catalog id, a path, a config mapping or a config object")


def _looks_like_path(text: str) -> bool:
    return text.startswith((".", "/", "~")) or text.endswith(".json") or os.path.exists(text)
