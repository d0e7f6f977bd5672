"""The library call a server makes at start-up: resolve(config, device=…, model=…, policy=…)."""
from __future__ import annotations

import os
from collections import OrderedDict
from functools import lru_cache
from typing import Any, Mapping, Optional

from nsa_policy.base.auto_device import is_auto
from nsa_policy.base.errors import PolicyError
from nsa_policy.catalog.store import load_catalog
from nsa_policy.core.bundle import bundle_for_engine, get_bundle
from nsa_policy.core.decision import Decision, Finding
from nsa_policy.core.evaluator import evaluate
from nsa_policy.core.facts import DeviceFacts, Facts, ModelFacts, ServingConfig, derive
from nsa_policy.inputs import config_from, device_from, environment_from, installed_packages, model_from, spellings_from


def build_facts(config: Any = None, *, device: Any = "auto", model: Any = None,
                env: Optional[Mapping[str, str]] = None, packages: Optional[Mapping[str, str]] = None,
                spellings: Optional[tuple[str, ...]] = None, engine: Optional[str] = None,
                release: Optional[str] = None) -> Facts:
    """spellings: the sglang flags the configuration was given with (default: a mapping's flag-form keys).
    engine: "vllm" reads the config with vLLM's argument names (rules/catalog/vllm/args.yaml).
    release: the engine release targeted; findings then offer only what it accepts."""
    catalog = load_catalog()
    cfg = config_from(config, engine=engine)
    dev = device_from(device, catalog)
    mdl = model_from(model, cfg, catalog)
    if packages is None and is_auto(device):
        packages = installed_packages()  # local machine only: another machine's packages are unknown
    spelt = spellings_from(config, engine=engine) if spellings is None else tuple(spellings)
    return Facts(device=dev, model=mdl, config=cfg, env=environment_from(env, packages), derived=derive(mdl, cfg),
                 spellings=spelt, release=release)


# The note on a release no bundle or registry knows; not a rule's finding, so it names this pseudo-rule.
RELEASE_UNKNOWN = "NSA209"
RELEASE_UNKNOWN_RULE = "policy.release-unknown"


def decide(facts: Facts, policy: str = "default", *, trace: bool = True) -> Decision:
    """Evaluate facts under a bundle; never raises on rejection (errors are in the decision).
    `default` with vLLM facts is the vllm-default bundle. A release name answered by an older bundle
    (`sglang-0.5.23` → sglang-0.5.22) is kept in `answers_for`; a release-named policy is also the
    release targeted (facts.release, when not set): findings offer only what it accepts."""
    from nsa_policy import engines  # lazy: the registry loads the engines' packages

    owner = engines.get(facts.config.engine)
    if facts.release is None:
        named = owner.release_of_bundle_name(policy)
        if named is not None:
            facts = facts.model_copy(update={"release": named})
    # what the release's own start-up does to the arguments before it resolves them (renamed values)
    config = owner.config_at_release(facts.config, facts.release)
    if config is not facts.config:
        facts = facts.model_copy(update={"config": config, "derived": derive(facts.model, config)})
    decision = evaluate(get_bundle(bundle_for_engine(policy, facts.config.engine)), facts, load_catalog(), trace=trace)
    if policy != decision.policy:
        from nsa_policy import engines  # lazy: the registry loads the engines' packages

        engine = engines.get(decision.engine)
        if engine.release_bundle(policy) == decision.policy:
            update: dict[str, Any] = {"answers_for": policy}
            note = engine.unknown_release_note(policy, decision.policy)
            if note is not None:  # an unknown release is answered, never silently
                update["notes"] = decision.notes + (Finding(code=RELEASE_UNKNOWN, level="info", message=note,
                                                            rule=RELEASE_UNKNOWN_RULE),)
            decision = decision.model_copy(update=update)
    return decision


def engine_for(policy: str, engine: Optional[str] = None, config: Any = None) -> str:
    """The engine of a call: given, else the config's own (a ServingConfig or mapping with `engine`),
    else the policy's (vllm-0.33 describes vLLM), else the registry's default engine."""
    from nsa_policy import engines

    own = config.engine if isinstance(config, ServingConfig) else (
        config.get("engine") if isinstance(config, Mapping) else None)
    if engine is not None:
        return engines.get(engine).name
    if own is not None:
        return engines.get(own, "config.engine").name
    if policy == "default":
        return engines.DEFAULT
    return get_bundle(policy).engine


_MEMO: OrderedDict[tuple, Decision] = OrderedDict()
_MEMO_SIZE = 1024


def _freeze(value: Any) -> Any:
    """A hashable image of plain inputs; TypeError for anything else (then no memo)."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, Mapping):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, (ServingConfig, DeviceFacts, ModelFacts)):
        return value
    raise TypeError(type(value).__name__)


@lru_cache(maxsize=1)
def _env_names() -> tuple[str, ...]:
    """Every variable an engine's start-up reads: a decision depends on all of them (not only the threshold)."""
    from nsa_policy import engines

    return tuple(dict.fromkeys(name for e in engines.every() for name in e.env_variables()))


def _memo_key(config: Any, device: Any, model: Any, policy: str, env: Optional[Mapping[str, str]],
              packages: Any, trace: bool, spellings: Optional[tuple[str, ...]] = None) -> Optional[tuple]:
    """Decisions are a pure function of the inputs; plain inputs (no paths, no live objects) are memoised."""
    if isinstance(model, str) and model not in load_catalog().model_doc.models:
        return None  # a path: its config.json may change between calls
    if is_auto(device):
        return None  # discovery reads the machine each time
    source = os.environ if env is None else env
    try:
        return (policy, trace, _freeze(config), _freeze(device), _freeze(model), _freeze(packages),
                tuple(source.get(var) for var in _env_names()), _freeze(spellings))
    except TypeError:
        return None


def resolve(config: Any = None, *, device: Any = "auto", model: Any = None, policy: str = "default",
            env: Optional[Mapping[str, str]] = None, packages: Optional[Mapping[str, str]] = None,
            trace: bool = True, raise_on_error: bool = True, spellings: Optional[tuple[str, ...]] = None,
            engine: Optional[str] = None) -> Decision:
    """Resolve the DSA serving decision.

    config: a ServingConfig, a mapping, or any object with sglang's attribute names (unset = None);
        for vLLM (engine="vllm", or a vllm-* policy) vLLM's names: attention_backend, kv_cache_dtype,
        block_size, tensor_parallel_size, decode_context_parallel_size (an EngineArgs or Namespace works).
    device: a catalog name, a capability spec, "auto" (NVML) or DeviceFacts.
    model: a catalog id, a path, an HF config mapping/object, ModelFacts; None = config.model_path.
    env: where the threshold variables are read (default os.environ).
    engine: sglang or vllm (default: the config's own, else the policy's: vllm-0.33 is vLLM).
    spellings: the sglang flags the configuration was written with (default: a mapping's flag-form keys,
    e.g. "nsa-prefill-backend"); a release bundle refuses or warns about them as that release's parser does.
    Raises InputError for input that cannot be evaluated, PolicyError (with .decision) when rejected.
    """
    eng = engine_for(policy, engine, config)
    key = _memo_key(config, device, model, policy, env, packages, trace, spellings)
    key = None if key is None else key + (eng,)
    decision = _MEMO.get(key) if key is not None else None
    if decision is None:
        facts = build_facts(config, device=device, model=model, env=env, packages=packages, spellings=spellings,
                            engine=eng)
        decision = decide(facts, policy, trace=trace)
        if key is not None:
            _MEMO[key] = decision
            if len(_MEMO) > _MEMO_SIZE:
                _MEMO.popitem(last=False)
    if raise_on_error and decision.errors:
        raise PolicyError(decision)
    return decision
