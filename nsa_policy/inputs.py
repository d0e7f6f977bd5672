"""Turn what callers pass (objects, mappings, names, paths, the environment) into facts."""
from __future__ import annotations

import importlib.metadata
import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Optional

from pydantic import ValidationError

from nsa_policy.catalog.store import Catalog
from nsa_policy.errors import InputError, closest
from nsa_policy.engine.facts import DSA_ENV_VARS, THRESHOLD_ENV_VARS, DeviceFacts, Environment, ModelFacts, ServingConfig

CONFIG_FIELDS = tuple(ServingConfig.model_fields)
# Later sglang spellings (NSA was renamed DSA in 2026-05) map onto the fields we use.
FIELD_ALIASES = {
    "dsa_prefill_backend": "nsa_prefill_backend",
    "dsa_decode_backend": "nsa_decode_backend",
    "nsa_prefill_dense_attn_kv_len_threshold": "dense_attn_kv_len_threshold",
    "dsa_prefill_dense_attn_kv_len_threshold": "dense_attn_kv_len_threshold",
    "tp": "tp_size",
    "dp": "dp_size",
    # sglang's parser stores --tp-size/--dp-size here; ServerArgs.from_cli_args copies them later.
    "tensor_parallel_size": "tp_size",
    "data_parallel_size": "dp_size",
}
PACKAGES = ("flashinfer-python", "sgl-kernel", "tilelang", "flashinfer-cubin", "flashinfer-jit-cache", "sglang")


def _validate_config(values: dict) -> ServingConfig:
    try:
        return ServingConfig(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise InputError(field, err.get("input"), hint=err["msg"]) from None


def config_from(obj: Any) -> ServingConfig:
    """A ServingConfig from a ServingConfig, a mapping, or any object with sglang's attribute names."""
    if obj is None:
        return ServingConfig()
    if isinstance(obj, ServingConfig):
        return obj
    values: dict[str, Any] = {}
    if isinstance(obj, Mapping):
        for key, value in obj.items():
            name = FIELD_ALIASES.get(key, key)
            if name not in ServingConfig.model_fields:
                raise InputError(f"config.{key}", value, hint=f"unknown serving argument"
                                 + (f"; did you mean {closest(key, CONFIG_FIELDS)!r}?" if closest(key, CONFIG_FIELDS) else ""))
            if value is not None:
                _merge(values, name, value, key)
        return _validate_config(values)
    for name in CONFIG_FIELDS:
        value = getattr(obj, name, None)
        if value is not None:
            values[name] = value
    for alias, name in FIELD_ALIASES.items():
        value = getattr(obj, alias, None)
        if value is not None and len(alias) > 2:
            _merge(values, name, value, alias)
    return _validate_config(values)


def _merge(values: dict, name: str, value: Any, key: str) -> None:
    if name in values and values[name] != value:
        raise InputError(key, value, hint=f"conflicts with {name}={values[name]!r}")
    values[name] = value


def environment_from(env: Optional[Mapping[str, str]] = None, packages: Optional[Mapping[str, str]] = None) -> Environment:
    env = os.environ if env is None else env
    found: list[tuple[str, int]] = []
    for var in THRESHOLD_ENV_VARS:
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
    if len(found) == 2 and found[0][1] != found[1][1]:
        raise InputError(found[1][0], found[1][1], hint=f"conflicts with {found[0][0]}={found[0][1]}")
    var, val = found[0] if found else (None, None)
    variables = {name: str(env[name]) for name in DSA_ENV_VARS if env.get(name) is not None}
    return Environment(dense_attn_kv_len_threshold=val, threshold_env_var=var, packages=dict(packages or {}),
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
        if device.strip().lower() == "auto":
            from nsa_policy.integration.discovery import discover

            return discover(catalog)
        return catalog.device(device)
    raise InputError("device", device, catalog.device_choices + ["auto"], hint="a name, a capability spec, 'auto' or DeviceFacts")


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
