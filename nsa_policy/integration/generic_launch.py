"""`nsa-policy launch` for an engine that brings no launch module of its own (an out-of-tree engine):
the command's arguments read through the engine's argument registry (`Engine.arguments`), decided with
its bundle, and each decided output the command leaves unset appended as the engine's own flag. An
explicit value is never replaced; a rejected decision starts nothing."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Optional

from nsa_policy.base.errors import InputError, PolicyError
from nsa_policy.core.facts import ServingConfig

if TYPE_CHECKING:  # pragma: no cover
    from nsa_policy.core.decision import Decision
    from nsa_policy.engines.base import Engine

MODEL_FLAGS = ("--model", "--model-path")


@dataclass(frozen=True)
class GenericPlan:
    argv: tuple[str, ...]
    decision: Decision
    added_flags: tuple[str, ...] = ()
    kept: dict[str, Any] = field(default_factory=dict)  # output → the explicit value the command keeps


def _typed(name: str, value: str) -> Any:
    annotation = str(ServingConfig.model_fields[name].annotation)
    if "int" in annotation:
        try:
            return int(value)
        except ValueError:
            raise InputError(name, value, hint="an integer") from None
    return value


def plan_generic(engine: Engine, argv: list[str], *, policy: str = "default", device: Any = "auto",
                 model: Optional[str] = None, env: Optional[Mapping[str, str]] = None) -> GenericPlan:
    from nsa_policy.api import build_facts, decide

    start = engine.launch_start(argv)
    if start is None:
        raise InputError("command", " ".join(argv[:2]), hint=f"not a {engine.title} server command")
    config: dict[str, Any] = {}
    given_model = model
    words = argv[start + 1:]
    k = 0
    while k < len(words):
        word = words[k]
        if not word.startswith("--"):
            k += 1
            continue
        name, eq, value = word.partition("=")
        if not eq:
            value = words[k + 1] if k + 1 < len(words) else ""
            k += 1
        k += 1
        if name in MODEL_FLAGS:
            given_model = given_model or value
            continue
        target = engine.arguments.get(name[2:])
        if target is not None:
            config[target] = _typed(target, value)
    if given_model is None:
        raise InputError("--model", None, hint=f"the {engine.title} command names no model; add --model")
    facts = build_facts({**config, "engine": engine.name}, device=device, model=given_model, env=env or {},
                        engine=engine.name, spellings=())
    decision = decide(facts, engine.bundle_for(policy), trace=False)
    if decision.errors:
        raise PolicyError(decision)
    flag_of: dict[str, str] = {}  # field → its first flag, in the registry's order
    for name, target in engine.arguments.items():
        flag_of.setdefault(target, name)
    added: list[str] = []
    kept: dict[str, Any] = {}
    for out, flag in flag_of.items():
        decided = getattr(decision, out, None) if out in type(decision).model_fields else None
        if decided is None:
            continue
        if out in config:
            if config[out] != decided:
                kept[out] = config[out]
            continue
        added += [f"--{flag}", str(decided)]
    return GenericPlan(argv=tuple(argv) + tuple(added), decision=decision, added_flags=tuple(added), kept=kept)


def launch_cli(engine: Engine, argv: list[str], *, policy: str, device: str, model: Optional[str],
               dry_run: bool, as_json: bool, log_decisions: Optional[str] = None) -> None:
    """`nsa-policy launch -- <engine's command>`: print the plan (dry run) or exec the command."""
    import json
    import os
    import shlex
    import sys

    import typer

    from nsa_policy.base.errors import NsaPolicyError
    from nsa_policy.commands._common import EXIT_OK, exec_or_fail, fail_usage, log_quietly, rejected_exit
    from nsa_policy.integration.decision_log import append_decision, check_log_path

    try:
        if log_decisions:  # before any work: a log that can never be appended to is bad input
            check_log_path(log_decisions)
        plan = plan_generic(engine, argv, policy=policy, device=device, model=model, env=os.environ)
    except PolicyError as exc:
        if log_decisions:
            log_quietly(log_decisions, exc.decision, origin="cli.launch")
        raise rejected_exit(exc, as_json) from None
    except (InputError, ValueError) as exc:
        raise fail_usage(InputError("command", " ".join(argv[:2]), hint=str(exc)), as_json) from None
    except NsaPolicyError as exc:
        raise fail_usage(exc, as_json) from None
    if log_decisions:
        try:
            append_decision(log_decisions, plan.decision, origin="cli.launch")
        except NsaPolicyError as exc:
            raise fail_usage(exc, as_json) from None
    print(f"nsa-policy launch: target {engine.title} ({plan.decision.policy})", file=sys.stderr)
    print("nsa-policy launch: " + (("adding " + " ".join(plan.added_flags)) if plan.added_flags else "no flag to add"),
          file=sys.stderr)
    for out, value in plan.kept.items():
        print(f"nsa-policy launch: note: kept the explicit {out}={value} (the policy decides "
              f"{getattr(plan.decision, out)})", file=sys.stderr)
    if dry_run:
        if as_json:
            print(json.dumps({"argv": list(plan.argv), "added_flags": list(plan.added_flags), "engine": engine.name,
                              "decision": plan.decision.model_dump(mode="json")}))
        else:
            print(shlex.join(plan.argv))
        raise typer.Exit(EXIT_OK)
    exec_or_fail(plan.argv[0], lambda: os.execvp(plan.argv[0], list(plan.argv)))
