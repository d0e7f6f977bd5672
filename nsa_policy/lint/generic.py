"""lint for an engine that brings no lint module of its own (an out-of-tree engine): its launch's
arguments read through the engine's argument registry (`Engine.arguments`), decided with the engine's
bundle on each device the file names, and each finding placed at the argument it is about."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from nsa_policy.core.facts import ServingConfig

if TYPE_CHECKING:  # pragma: no cover
    from nsa_policy.engines.base import Engine
    from nsa_policy.lint.launch_checks import Checker
    from nsa_policy.lint.report import Diagnostic, Launch

MODEL_ARGUMENTS = ("model", "model-path", "model_path")


def _typed(field: str, value: Any) -> Any:
    """A command line's text as the field's type (ServingConfig is strict); ValueError names the field."""
    annotation = str(ServingConfig.model_fields[field].annotation)
    if "bool" in annotation:
        return value is True or str(value).lower() in ("1", "true", "yes")
    if "int" in annotation and not isinstance(value, int):
        try:
            return int(str(value))
        except ValueError:
            raise ValueError(f"{field} {value!r} is not an integer") from None
    return value


def lint_generic(engine: Engine, checker: Checker, launch: Launch) -> list[Diagnostic]:
    from nsa_policy.api import build_facts, decide

    out: list[Diagnostic] = []
    policy = checker.policy(launch, out)
    bundle = engine.bundle_for(policy)
    config: dict[str, Any] = {}
    where: dict[str, Any] = {}
    model_given: Optional[tuple[str, Any, str]] = None
    for arg in launch.args:
        name = arg.spelling.lstrip("-")
        if name in MODEL_ARGUMENTS:
            model_given = (str(arg.value), arg.loc, "argument")
            continue
        field = engine.arguments.get(name) or engine.arguments.get(name.replace("_", "-"))
        if field is None or arg.unresolved is not None:
            continue  # an argument the policy does not read, or a value only known at deploy time
        config[field] = _typed(field, arg.value)
        where[field] = arg.loc
    model = checker.model(launch, model_given, out, bundle)
    devices = checker.devices(launch, out)
    if not devices:
        out.append(checker.no_device(bundle, launch.loc))
        return out
    if model is None:
        return out
    for device, _hint in devices:
        facts = build_facts({**config, "engine": engine.name}, device=device, model=model, env={}, packages={},
                            engine=engine.name, spellings=())
        decision = decide(facts, bundle, trace=False)
        for finding in (*decision.errors, *decision.warnings):
            loc = next((where[f] for f in finding.fields if f in where), launch.loc)
            out.append(checker.diag(finding.code, f"{finding.message} (on {device.name}, policy {decision.policy})",
                                    loc, alternatives=finding.alternatives, rule=finding.rule))
    return out
