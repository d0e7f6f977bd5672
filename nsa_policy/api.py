"""The library call a server makes at start-up: resolve(config, device=…, model=…, policy=…)."""
from __future__ import annotations

from typing import Any, Mapping, Optional

from .bundle import get_bundle
from .catalog import load_catalog
from .decision import Decision
from .errors import PolicyError
from .evaluator import evaluate
from .facts import Facts, derive
from .inputs import config_from, device_from, environment_from, installed_packages, model_from


def build_facts(config: Any = None, *, device: Any = "auto", model: Any = None,
                env: Optional[Mapping[str, str]] = None, packages: Optional[Mapping[str, str]] = None) -> Facts:
    catalog = load_catalog()
    cfg = config_from(config)
    dev = device_from(device, catalog)
    mdl = model_from(model, cfg, catalog)
    if packages is None and isinstance(device, str) and device.strip().lower() == "auto":
        packages = installed_packages()  # local machine only: another machine's packages are unknown
    return Facts(device=dev, model=mdl, config=cfg, env=environment_from(env, packages), derived=derive(mdl, cfg))


def decide(facts: Facts, policy: str = "default", *, trace: bool = True) -> Decision:
    """Evaluate facts under a bundle; never raises on rejection (errors are in the decision)."""
    return evaluate(get_bundle(policy), facts, load_catalog(), trace=trace)


def resolve(config: Any = None, *, device: Any = "auto", model: Any = None, policy: str = "default",
            env: Optional[Mapping[str, str]] = None, packages: Optional[Mapping[str, str]] = None,
            trace: bool = True, raise_on_error: bool = True) -> Decision:
    """Resolve the DSA serving decision.

    config: a ServingConfig, a mapping, or any object with sglang's attribute names (unset = None).
    device: a catalog name, a capability spec, "auto" (NVML) or DeviceFacts.
    model: a catalog id, a path, an HF config mapping/object, ModelFacts; None = config.model_path.
    env: where the threshold variables are read (default os.environ).
    Raises InputError for input that cannot be evaluated, PolicyError (with .decision) when rejected.
    """
    decision = decide(build_facts(config, device=device, model=model, env=env, packages=packages), policy, trace=trace)
    if raise_on_error and decision.errors:
        raise PolicyError(decision)
    return decision
