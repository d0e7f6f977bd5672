"""`nsa-policy launch -- vllm serve MODEL …`: resolve the command's vLLM arguments with a vLLM bundle
(vllm-default for `default`, or vllm-0.33) and add the flags vLLM reads for what the user left unset:
`--attention-backend`, `--kv-cache-dtype`, `--block-size`, each in the spelling vLLM 0.33.0 accepts
(rules/catalog/vllm-args.yaml). Flags the user gave are never changed. A rejected decision runs nothing."""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from nsa_policy.api import build_facts, decide
from nsa_policy.catalog.vllm import load_vllm
from nsa_policy.engine.decision import Decision
from nsa_policy.errors import InputError, PolicyError
from nsa_policy.lint.report import Arg, Location
from nsa_policy.lint.shell import vllm_launch_start
from nsa_policy.lint.vllm import parse_vllm_cli, vllm_config

# The release launch writes flags for: the one release a vLLM bundle reproduces.
VLLM_RELEASE = "0.33.0"
# decision output -> (vLLM argument, ServingConfig field the user may already have set)
_ADDED = (("attention_backend", "attention_backend", "attention_backend"),
          ("requested_kv_cache_dtype", "kv_cache_dtype", "kv_cache_dtype"),
          ("page_size", "block_size", "page_size"))


@dataclass
class VllmPlan:
    argv: list[str]
    decision: Decision
    added_flags: list[str] = field(default_factory=list)

    def shell_line(self) -> str:
        return shlex.join(self.argv)


def is_vllm_command(command: Sequence[str]) -> bool:
    return vllm_launch_start(list(command)) is not None


def plan_vllm_launch(command: Sequence[str], *, policy: str = "default", device: Any = "auto", model: Any = None,
                     env: Optional[Mapping[str, str]] = None) -> VllmPlan:
    """Raises InputError for a bad argument or a policy that is not for vLLM, PolicyError when rejected."""
    argv = list(command)
    start = vllm_launch_start(argv)
    if start is None:
        raise InputError("command", " ".join(argv[:3]), hint="not a `vllm serve` command")
    if policy != "default" and not policy.startswith("vllm-"):
        raise InputError("--policy", policy, valid=["default", "vllm-default", "vllm-0.33"],
                         hint="a vllm serve command is resolved with a vLLM bundle")
    args = parse_vllm_cli((w, Location("argv", 1, i), None) for i, w in enumerate(argv) if i >= start)

    def bad(message: str, arg: Arg) -> None:
        raise InputError(arg.spelling, arg.value, hint=message)

    config, by_field, model_arg = vllm_config(args, bad)
    if model is None and model_arg is not None:
        model = model_arg.value
    facts = build_facts(config, device=device, model=model, env=dict(env or {}), engine="vllm")
    decision = decide(facts, policy)
    if decision.errors:
        raise PolicyError(decision)
    vc = load_vllm()
    added: list[str] = []
    extra: list[str] = []
    for output, name, fld in _ADDED:
        value = getattr(decision, output, None)
        if fld in by_field or value is None or value in vc.argument(name).unset_values or value == "auto":
            continue
        flag = vc.flag_for(name, VLLM_RELEASE)
        if flag is None:
            continue
        extra += [flag, str(value)]
        added.append(f"{flag} {value}")
    return VllmPlan(argv + extra, decision, added)
