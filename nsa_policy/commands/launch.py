"""`nsa-policy launch [--policy …] [--device …] [--dry-run] -- SERVER COMMAND…`: the engine whose command it is
(engines.every(): each engine's launch_start) plans, prints and execs it (Engine.launch_cli)."""
from __future__ import annotations

from typing import Optional

import typer

from nsa_policy.commands._common import fail_usage


def register(app: typer.Typer) -> None:
    # Options stop at the first word of the server command (or at `--`): everything from there on is
    # the command, and an unknown option before it is an error, never part of the command.
    app.command("launch", context_settings={"allow_interspersed_args": False})(launch)


def launch(
    command: Optional[list[str]] = typer.Argument(None, help="The server command (after `--`)."),
    policy: str = typer.Option("default", "--policy", help="Bundle name or rule folder."),
    device: str = typer.Option("auto", "--device",
                               help="auto (the local GPU through NVML), a catalog name or a capability spec."),
    model: Optional[str] = typer.Option(None, "--model", help="Model for the policy (catalog id or config.json) "
                                                              "when --model-path is not in the catalog."),
    sglang_version: Optional[str] = typer.Option(
        None, "--sglang-version", help="The sglang release the command starts (default: ask the command's own interpreter; "
                                       "unknown: the newest release nsa-policy knows)."),
    vllm_version: Optional[str] = typer.Option(
        None, "--vllm-version", help="The vLLM release a `vllm serve` command starts (default: the vllm installed "
                                     "here; none: the newest release nsa-policy knows)."),
    dry_run: bool = typer.Option(False, "--dry-run",
                                 help="Print the final command (shell-quoted, env additions in front) and what the "
                                      "release decides on its own, instead of running it."),
    as_json: bool = typer.Option(False, "--json",
                                 help="With --dry-run: print one JSON object (argv, env, release, the decisions)."),
    log_decisions: Optional[str] = typer.Option(None, "--log-decisions",
                                                help="Append the decision as one JSON line to this file."),
) -> None:
    """Resolve from a server command's flags, its sglang release and the local GPU; respell and add flags; exec it.

    Everything after `--` is the server command. Exit 1 (and nothing runs) when the policy rejects it.
    """
    from nsa_policy import engines
    from nsa_policy.base.errors import InputError

    argv = list(command or [])
    # the engine whose server command this is (its package owns the launch); none: the default engine's,
    # which explains what it expected
    owner = next((e for e in engines.every() if e.launch_start(argv) is not None), engines.get(engines.DEFAULT))
    given = {"--sglang-version": sglang_version, "--vllm-version": vllm_version}
    for flag, value in given.items():
        if value is not None and flag != owner.launch_version_flag:
            raise fail_usage(InputError(flag, value, hint=f"the command is a {owner.title} launch, which "
                                        + (f"takes {owner.launch_version_flag}" if owner.launch_version_flag
                                           else "takes no release option") + f"; drop {flag}"), as_json)
    version = given.get(owner.launch_version_flag or "")
    owner.launch_cli(argv, policy=policy, device=device, model=model, version=version, dry_run=dry_run,
                     as_json=as_json, log_decisions=log_decisions)
