"""`nsa-policy launch -- vllm serve MODEL …`: resolve the command's vLLM arguments (with those of a
`--config FILE`, which the command line overrides) with a vLLM bundle (vllm-default for `default`, or
vllm-0.33) and add the flags vLLM reads for what the user left unset: `--attention-backend`,
`--kv-cache-dtype`, `--block-size`, each in the spelling the target release accepts
(rules/catalog/vllm/args.yaml). The release: --vllm-version, else the vllm installed here, else the
newest release nsa-policy knows. Flags the user gave are never changed. A rejected decision runs nothing."""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from nsa_policy.api import build_facts, decide
from nsa_policy.base.errors import InputError, PolicyError
from nsa_policy.core.decision import Decision
from nsa_policy.engines.vllm.catalog import load_vllm
from nsa_policy.engines.vllm.lint import launch_start as vllm_launch_start
from nsa_policy.engines.vllm.lint import parse_vllm_cli, vllm_config, vllm_release, with_config_files
from nsa_policy.lint.report import Arg, Location

# The release launch writes flags for when neither --vllm-version nor an installed vllm says: the one
# release a vLLM bundle reproduces.
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
    release: str = VLLM_RELEASE
    release_why: str = f"vLLM {VLLM_RELEASE}"
    notes: list[str] = field(default_factory=list)  # decided values the target release has no flag for

    def shell_line(self) -> str:
        return shlex.join(self.argv)


def is_vllm_command(command: Sequence[str]) -> bool:
    return vllm_launch_start(list(command)) is not None


def target_release(vllm_version: Optional[str], command: Sequence[str] = ()) -> tuple[str, str]:
    """(the vLLM release the command starts, how it is known): --vllm-version, else the vllm installed for the
    command's own interpreter (`vllm`'s entry point, or its python), asked isolated, else the newest release
    nsa-policy knows. InputError for a release nsa-policy does not know."""
    from nsa_policy.integration.discovery import command_python, probe_installed

    if vllm_version is not None:
        release = vllm_release(vllm_version, "--vllm-version")
        return release, f"vLLM {release} (--vllm-version)"
    python = command_python(list(command), "vllm")
    installed, how = probe_installed(python, "vllm") if python is not None else (None, "no interpreter found for "
                                                                                      f"{command[0] if command else ''!r}")
    if installed is not None:
        release = vllm_release(installed, f"vllm (installed for {python})")
        return release, f"vLLM {release} ({how})"
    return VLLM_RELEASE, f"vLLM {VLLM_RELEASE} ({how}; pass --vllm-version to choose)"


def plan_vllm_launch(command: Sequence[str], *, policy: str = "default", device: Any = "auto", model: Any = None,
                     env: Optional[Mapping[str, str]] = None, vllm_version: Optional[str] = None,
                     cwd: Optional[str] = None) -> VllmPlan:
    """Raises InputError for a bad argument, a `--config` file that cannot be read, an unknown release or a
    policy that is not for vLLM; PolicyError when rejected. `cwd`: where a relative `--config` path is read
    (default: the current directory, where vLLM reads it)."""
    import os

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

    release, why = target_release(vllm_version, argv)
    args = with_config_files(args, cwd or os.getcwd())
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
    notes: list[str] = []
    for output, name, fld in _ADDED:
        value = getattr(decision, output, None)
        if fld in by_field or value is None or value in vc.argument(name).unset_values or value == "auto":
            continue
        flag = vc.flag_for(name, release)
        if flag is None:  # the registry knows no spelling of it in that release: say so, never guess one
            notes.append(f"not added: {name} {value} (nsa-policy knows no flag for it in vLLM {release}; "
                         "vLLM chooses it itself)")
            continue
        extra += [flag, str(value)]
        added.append(f"{flag} {value}")
    return VllmPlan(argv + extra, decision, added, release, why, notes)
