"""Turn what callers pass (objects, mappings, names, paths, the environment) into facts."""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Optional

from pydantic import ValidationError

from nsa_policy.base.auto_device import is_auto
from nsa_policy.base.errors import InputError
from nsa_policy.catalog.store import Catalog
from nsa_policy.core.facts import DeviceFacts, Environment, ModelFacts, ServingConfig
from nsa_policy.engines.sglang.args import load_args

CONFIG_FIELDS = tuple(ServingConfig.model_fields)
PACKAGES = ("flashinfer-python", "sgl-kernel", "tilelang", "flashinfer-cubin", "flashinfer-jit-cache", "sglang", "triton")


def config_from(obj: Any, engine: Optional[str] = None) -> ServingConfig:
    """A ServingConfig from what a caller passes (a ServingConfig, a mapping, an engine's own arguments
    object), read with `engine`'s names (the registered engine; default: the first)."""
    from nsa_policy import engines

    return engines.get(engine or engines.DEFAULT).config_from(obj)


def spellings_from(obj: Any, engine: Optional[str] = None) -> tuple[str, ...]:
    """The engine's flags a mapping's flag-form keys spell, in order."""
    from nsa_policy import engines

    return engines.get(engine or engines.DEFAULT).spellings_from(obj)


def validate_config(values: dict[str, Any]) -> ServingConfig:
    """A ServingConfig from field values; a pydantic error as one InputError naming the field."""
    try:
        return ServingConfig(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise InputError(field, err.get("input"), hint=err["msg"]) from None


def merge_value(values: dict[str, Any], name: str, value: Any, key: str) -> None:
    """Set a field once: two spellings of one field with different values are an input error."""
    if name in values and values[name] != value:
        raise InputError(key, value, hint=f"conflicts with {name}={values[name]!r}")
    values[name] = value


def environment_from(env: Optional[Mapping[str, str]] = None, packages: Optional[Mapping[str, str]] = None,
                     release: Optional[str] = None) -> Environment:
    """The environment facts. With `release`, only the threshold variable that sglang release reads counts
    (the other name is ignored, as that release ignores it); without, either name (the NSA one first; the
    namespace has both values, for the policy to settle a conflict)."""
    env = os.environ if env is None else env
    found: list[tuple[str, int]] = []
    read = None if release is None else load_args().env_var_read("dense_attn_kv_len_threshold", release)
    from nsa_policy.engines.sglang.env import threshold_env_vars

    names: tuple[str, ...] = threshold_env_vars() if read is None else (read,)
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
    from nsa_policy import engines

    variables = {name: str(env[name]) for e in engines.every() for name in e.env_variables()
                 if env.get(name) is not None}
    return Environment(dense_attn_kv_len_threshold=first[1], threshold_env_var=first[0], packages=dict(packages or {}),
                       variables=variables)


@lru_cache(maxsize=1)
def installed_packages() -> dict[str, str]:
    """Versions from package metadata; the packages themselves are never imported."""
    import importlib.metadata  # lazy: it imports email and csv, ~15 ms of a cold start that never asks
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
        if not is_auto(device):  # a named device: the NVML reader is not imported
            return catalog.device(device)
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
