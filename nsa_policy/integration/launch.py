"""`nsa-policy launch -- python -m sglang.launch_server ARGS…`: the policy without changing the engine's code.

The serving flags the policy reads are picked out of the command (both `--flag value` and
`--flag=value`; the last occurrence wins, as in argparse; every other token passes through
untouched). They go through `startup.apply` on a namespace that mirrors the command, so the
launcher and the library hook fill exactly the same fields. What apply writes becomes flags
appended to the command (an explicit `--kv-cache-dtype auto` is rewritten in place), and the
threshold variable, when the engine reads it from the environment, becomes an environment addition.
"""
from __future__ import annotations

import logging
import os
import shlex
import typing
from types import SimpleNamespace
from typing import Any, Mapping, Optional, Sequence

from pydantic import Field

from nsa_policy.engine.decision import Decision
from nsa_policy.errors import InputError
from nsa_policy.engine.facts import Frozen, ServingConfig
from nsa_policy.inputs import FIELD_ALIASES

# sglang's own extra spellings of the flags the policy reads.
SGLANG_FLAG_ALIASES = {"--model": "model_path", "--tensor-parallel-size": "tp_size", "--data-parallel-size": "dp_size",
                       "--tp": "tp_size", "--dp": "dp_size"}
SPELLINGS = ("auto", "nsa", "dsa")


def _kind(field: str) -> type:
    annotation = ServingConfig.model_fields[field].annotation
    args = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
    return args[0]


def flag_table() -> dict[str, tuple[str, str, type]]:
    """flag → (attribute as the command spells it, ServingConfig field, value type)."""
    table: dict[str, tuple[str, str, type]] = {}
    for field in ServingConfig.model_fields:
        table["--" + field.replace("_", "-")] = (field, field, _kind(field))
    for alias, field in FIELD_ALIASES.items():
        if len(alias) > 2:
            table["--" + alias.replace("_", "-")] = (alias, field, _kind(field))
    for flag, field in SGLANG_FLAG_ALIASES.items():
        table[flag] = (field, field, _kind(field))
    return table


class Occurrence(Frozen):
    index: int = Field(description="position of the flag token in the command")
    flag: str
    attr: str
    value: Any = None
    inline: bool = Field(default=False, description="--flag=value form")


class ParsedCommand(Frozen):
    argv: tuple[str, ...]
    occurrences: tuple[Occurrence, ...]
    values: dict[str, Any] = Field(description="attribute → value, last occurrence wins")
    has_config_file: bool = False

    def uses_dsa_flags(self) -> bool:
        return any(o.flag.startswith("--dsa-") for o in self.occurrences)


def parse_command(argv: Sequence[str]) -> ParsedCommand:
    """Pick the serving flags the policy reads out of a launch command."""
    if not argv:
        raise InputError("command", "", hint="give the server command after '--', e.g. "
                                             "nsa-policy launch -- python -m sglang.launch_server --model-path …")
    table = flag_table()
    occurrences: list[Occurrence] = []
    values: dict[str, Any] = {}
    has_config = False
    i = 0
    while i < len(argv):
        token = argv[i]
        flag, eq, inline_value = token.partition("=")
        has_config = has_config or flag == "--config"
        if flag not in table:
            i += 1
            continue
        attr, field, kind = table[flag]
        if kind is bool:
            if eq:
                raise InputError(flag, token, hint="a switch: give it without a value")
            value: Any = True
            step = 1
        else:
            if eq:
                raw, step = inline_value, 1
            elif i + 1 < len(argv):
                raw, step = argv[i + 1], 2
            else:
                raise InputError(flag, None, hint="needs a value")
            value = raw
            if kind is int:
                try:
                    value = int(raw)
                except ValueError:
                    raise InputError(flag, raw, hint="must be an integer") from None
        occurrences.append(Occurrence(index=i, flag=flag, attr=attr, value=value, inline=bool(eq)))
        values[attr] = value
        i += step
    return ParsedCommand(argv=tuple(argv), occurrences=tuple(occurrences), values=values, has_config_file=has_config)


class LaunchPlan(Frozen):
    """The final command: what runs, what was added, and the decision behind it."""

    argv: tuple[str, ...]
    env_additions: dict[str, str]
    added_flags: tuple[str, ...] = Field(description="flags appended or rewritten, in command order")
    decision: Decision
    notes: tuple[str, ...] = ()

    def shell_line(self) -> str:
        """The exact final command, shell-quoted, with the environment additions in front."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env_additions.items())
        return (env + " " if env else "") + shlex.join(self.argv)


def _namespace(parsed: ParsedCommand, spelling: str) -> SimpleNamespace:
    """A namespace shaped like sglang's parsed args for this command: what the command left out is unset."""
    if spelling not in SPELLINGS:
        raise InputError("--spelling", spelling, list(SPELLINGS))
    if spelling == "auto":
        spelling = "dsa" if parsed.uses_dsa_flags() else "nsa"
    ns = SimpleNamespace(**parsed.values)
    ns.kv_cache_dtype = parsed.values.get("kv_cache_dtype", "auto")  # sglang's default
    ns.page_size = parsed.values.get("page_size")
    for side in ("prefill", "decode"):
        if not any(f"{p}_{side}_backend" in parsed.values for p in ("nsa", "dsa")):
            setattr(ns, f"{spelling}_{side}_backend", None)
    if spelling == "dsa" and not hasattr(ns, "dsa_prefill_backend"):
        ns.dsa_prefill_backend = None  # marks the newer engine: threshold goes to SGLANG_DSA_…
    return ns


def plan_launch(command: Sequence[str], *, policy: str = "default", device: Any = "auto", model: Any = None,
                env: Optional[Mapping[str, str]] = None, spelling: str = "auto",
                logger: Optional[logging.Logger] = None) -> LaunchPlan:
    """Resolve from the command's flags and build the final command. Raises StartupRejected when rejected."""
    from nsa_policy.integration.startup import apply

    parsed = parse_command(command)
    ns = _namespace(parsed, spelling)
    env_view = dict(os.environ if env is None else env)
    applied = apply(ns, policy=policy, device=device, model=model, env=env_view, logger=logger)
    argv = list(parsed.argv)
    added: list[str] = []
    for attr, value in applied.written.items():
        flag = "--" + attr.replace("_", "-")
        auto = [o for o in parsed.occurrences if o.attr == attr and o.value == "auto"]
        if auto:  # rewrite the explicit 'auto' (sglang's "engine decides") in place
            o = auto[-1]
            if o.inline:
                argv[o.index] = f"{o.flag}={value}"
            else:
                argv[o.index + 1] = str(value)
            added.append(f"{o.flag} {value} (was auto)")
        else:
            argv += [flag, str(value)]
            added.append(f"{flag} {value}")
    notes = []
    if parsed.has_config_file:
        notes.append("the command has --config: flags inside that file were not read; "
                     "an added flag overrides the file's value")
    return LaunchPlan(argv=tuple(argv), env_additions=dict(applied.env_set), added_flags=tuple(added),
                      decision=applied.decision, notes=tuple(notes))


def exec_plan(plan: LaunchPlan) -> None:  # pragma: no cover - replaces the process
    env = dict(os.environ)
    env.update(plan.env_additions)
    os.execvpe(plan.argv[0], list(plan.argv), env)
