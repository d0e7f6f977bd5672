"""vLLM's start-up hook: apply_vllm(engine_args) before EngineArgs.create_engine_config()."""
from __future__ import annotations

import logging
import sys
from typing import Any, Mapping, Optional

from nsa_policy.base.errors import InputError
from nsa_policy.core.decision import Decision
from nsa_policy.engines.sglang.startup import (
    LOGGER_NAME,
    Applied,
    ArgsView,
    StartupRejected,
    explain_rejection,
    kept_and_warnings,
    startup_record,
    write_all,
)

ENGINE_NAME = "vllm"

# decision output → vLLM argument it is written to (rules/catalog/vllm/args.yaml). The KV dtype written
# is the one vLLM's selector should see (requested_kv_cache_dtype), as `launch` passes --kv-cache-dtype:
# vLLM rewrites it after selection itself (fp8 → fp8_ds_mla on FLASHMLA_SPARSE).
VLLM_TARGETS = (("attention_backend", "attention_backend"), ("requested_kv_cache_dtype", "kv_cache_dtype"),
                ("page_size", "block_size"))
# vllm-base's kv rules: they pass an explicit dtype through vLLM's model hook
KV_HOOK_RULES = "vllm.kv."


def _vllm_backend_value(name: str, current: Any) -> Any:
    """The value to store for a backend name: vLLM's AttentionBackendEnum member when vLLM is already
    imported in this process (EngineArgs.attention_backend is typed with it), else the enum name."""

    registry = sys.modules.get("vllm.v1.attention.backends.registry")
    enum = getattr(registry, "AttentionBackendEnum", None) if registry is not None else None
    if enum is not None and not isinstance(current, str):
        return enum[name]
    return name


def _vllm_explicit(args: ArgsView, argument: str) -> Optional[tuple[str, Any]]:
    """(attribute, value) of the user's explicit setting of a vLLM argument, or None when it is unset."""
    from nsa_policy.engines.vllm.catalog import load_vllm

    spec = load_vllm().argument(argument)
    unset = (None, *spec.unset_values) + (("auto",) if argument == "kv_cache_dtype" else ())
    for attr in spec.attributes:
        if args.has(attr):
            value = args.get(attr)
            shown = value.name if hasattr(value, "name") and not isinstance(value, str) else value
            if shown not in unset:
                return attr, shown
    cfg = args.get("attention_config")  # -ac '{"backend": …}' sets the same choice another way
    if spec.attention_config_key and cfg is not None:
        chosen = cfg.get(spec.attention_config_key) if isinstance(cfg, Mapping) else getattr(
            cfg, spec.attention_config_key, None)
        shown = getattr(chosen, "name", chosen) if not isinstance(chosen, str) else chosen
        if shown not in unset:
            return f"attention_config.{spec.attention_config_key}", shown
    return None


def plan_vllm(args: ArgsView, decision: Decision) -> Applied:
    """What apply_vllm would write, without writing it: each decided output into the first attribute of
    its vLLM argument the object has, only where the user left that argument unset."""
    from nsa_policy.engines.vllm.catalog import load_vllm

    written: dict[str, Any] = {}
    previous: dict[str, Any] = {}
    kept: dict[str, dict[str, Any]] = {}
    if not decision.applies or decision.errors:
        return Applied(decision=decision)
    for output, argument in VLLM_TARGETS:
        decided = getattr(decision, output)
        if decided is None:
            continue
        explicit = _vllm_explicit(args, argument)
        if explicit is not None:
            attr, value = explicit
            prov = decision.provenance.get(output)
            # vllm-base's kv rules pass the explicit dtype through vLLM's model hook (bfloat16 -> auto on
            # DeepSeek-V3.2): that is the same choice, not a different opinion
            hooked = prov is not None and (prov.rule or "").startswith(KV_HOOK_RULES)
            if str(value) != str(decided) and not hooked:
                kept[attr] = {"explicit": value, "decided": decided}
            continue
        if argument == "kv_cache_dtype" and decided == "auto":
            continue  # the engine's own default: nothing to write
        target = next((a for a in load_vllm().argument(argument).attributes if args.has(a)), None)
        if target is None:
            continue  # the object does not carry this argument (a partial Namespace)
        attr = target
        previous[attr] = args.get(attr)
        written[attr] = _vllm_backend_value(decided, previous[attr]) if argument == "attention_backend" else decided
    return Applied(decision=decision, written=written, previous=previous, kept=kept)


def apply_vllm(engine_args: Any, *, policy: str = "default", device: Any = "auto", model: Any = None,
               logger: Optional[logging.Logger] = None, device_index: Optional[int] = None) -> Applied:
    """vLLM's start-up hook: resolve from vLLM's EngineArgs (or an argparse Namespace / mutable mapping with
    vLLM's names) with a vLLM bundle and write the attention backend, KV-cache dtype and block size into
    the fields the user left unset (attention_backend None/auto and no attention_config.backend;
    kv_cache_dtype auto; block_size None). Explicit values are never replaced, only logged when the
    policy differs. Call it before EngineArgs.create_engine_config().

    policy: "default" (= vllm-default) or a vllm-* bundle. device/device_index/model/logger as in apply().
    Raises InputError for arguments that cannot be read or a policy that is not vLLM's, StartupRejected
    (a PolicyError) when rejected; nothing is written then.
    """
    from nsa_policy.api import engine_for, resolve

    args = ArgsView(engine_args)
    if policy != "default" and engine_for(policy, None, None) != ENGINE_NAME:
        raise InputError("policy", policy, valid=["default", "vllm-default", "vllm-0.33"],
                         hint="apply_vllm resolves with a vLLM bundle")
    if device_index is not None:
        if isinstance(device_index, bool) or not isinstance(device_index, int) or device_index < 0:
            raise InputError("device_index", device_index, hint="a CUDA device index, an int >= 0")
        device = f"auto:{device_index}"
    logger = logger or logging.getLogger(LOGGER_NAME)
    source = engine_args if args.is_mapping else _vllm_fields(args)
    decision = resolve(source, device=device, model=model, policy=policy, engine=ENGINE_NAME, raise_on_error=False)
    applied = plan_vllm(args, decision)
    status = "rejected" if decision.errors else ("applied" if decision.applies else "not_applicable")
    if status == "applied":
        write_all(args, applied, {})
    level = logging.ERROR if status == "rejected" else (
        logging.WARNING if decision.warnings or applied.kept else logging.INFO)
    record = startup_record(applied, status)
    record["decision"] = {f: getattr(decision, f) for f in (
        "attention_backend", "requested_kv_cache_dtype", "kv_cache_dtype", "page_size", "kv_cache_layout",
        "dense_attn_kv_len_threshold", "indexer_cache_dtype", "heads_per_rank")}
    logger.log(level, _vllm_message(applied, status), extra={
        "nsa_policy": record, "nsa_decision": decision,
        "nsa_context": {"status": status, "engine": ENGINE_NAME, "written": {k: str(v) for k, v in applied.written.items()},
                        "previous": dict(applied.previous), "kept": dict(applied.kept)}})
    if status == "rejected":
        raise StartupRejected(decision)
    return applied


def _vllm_fields(args: ArgsView) -> dict[str, Any]:
    """The vLLM arguments an attribute object carries, by their names (EngineArgs has many more)."""
    from nsa_policy.engines.vllm.catalog import load_vllm

    names = [a for arg in load_vllm().args_doc.arguments for a in arg.attributes] + ["attention_config"]
    return {n: args.get(n) for n in names if args.has(n) and args.get(n) is not None}


def _vllm_message(applied: Applied, status: str) -> str:
    d = applied.decision
    if status == "rejected":
        return explain_rejection(d)
    head = f"nsa-policy {d.policy} ({d.policy_digest}) on {d.device} ({d.device_class}), model {d.model or d.architecture}"
    if status == "not_applicable":
        return head + ": not a DSA model, nothing to set"
    text = head + ": " + ", ".join(f"{f}={getattr(d, f)}" for f in (
        "attention_backend", "requested_kv_cache_dtype", "kv_cache_dtype", "page_size"))
    if applied.written:
        text += "; wrote " + ", ".join(f"{k}={getattr(v, 'name', v)}" for k, v in applied.written.items())
    return text + kept_and_warnings(applied, d)
