"""`nsa-policy launch [--policy …] [--device …] [--sglang-version X] [--dry-run] -- python -m sglang.launch_server ARGS…`."""
from __future__ import annotations

import json
import logging
import sys
from typing import TYPE_CHECKING, Callable, Optional

import typer

from nsa_policy.commands._common import EXIT_OK, EXIT_REJECTED, EXIT_USAGE, fail_usage

if TYPE_CHECKING:
    from nsa_policy.base.errors import PolicyError
    from nsa_policy.engines.sglang.launch import LaunchPlan



def _rejected(exc: PolicyError, as_json: bool) -> typer.Exit:
    """A rejected decision: its table and reason on stderr (and the JSON on stdout); nothing runs."""
    from nsa_policy.commands._render import render_table  # lazy, as in the commands

    print(render_table(exc.decision), file=sys.stderr)
    print(str(exc), file=sys.stderr)
    if as_json:
        print(json.dumps({"rejected": True, "decision": exc.decision.model_dump(mode="json")}))
    return typer.Exit(EXIT_REJECTED)

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
    from nsa_policy.base.errors import NsaPolicyError, PolicyError
    from nsa_policy.commands._render import render_table
    from nsa_policy.engines.sglang.launch import exec_plan, plan_launch

    logger = logging.getLogger(__name__)  # nsa_policy.commands.launch
    logger.propagate = False  # the decision is printed below; the record only feeds the decision log
    logger.setLevel(logging.INFO)
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())  # else logging's last-resort handler prints warnings twice
    handler = None
    if log_decisions:
        from nsa_policy.integration.decision_log import DecisionLogHandler

        handler = DecisionLogHandler(log_decisions)
        # a CLI should say it could not write the log
        handler.handleError = _raise_log_error  # type: ignore[method-assign]
        logger.addHandler(handler)
    from nsa_policy import engines
    from nsa_policy.engines.vllm.launch import is_vllm_command

    argv = list(command or [])
    owner = next((e for e in engines.every() if e.launch_start(argv) is not None), None)
    if owner is not None and owner.launch_cli(argv, policy=policy, device=device, model=model, dry_run=dry_run,
                                              as_json=as_json):
        return  # an engine with a launch of its own (an out-of-tree engine)
    if is_vllm_command(command or []):
        if handler is not None:
            logger.removeHandler(handler)
        _launch_vllm(list(command or []), policy, device, model, sglang_version, vllm_version, dry_run, as_json,
                     log_decisions)
        return
    if vllm_version is not None:
        from nsa_policy.base.errors import InputError

        raise fail_usage(InputError("--vllm-version", vllm_version,
                                    hint="the command is not a `vllm serve` launch; drop --vllm-version"), as_json)
    try:
        plan = plan_launch(list(command or []), policy=policy, device=device, model=model, sglang_version=sglang_version,
                           logger=logger)
    except PolicyError as exc:
        raise _rejected(exc, as_json) from None
    except (NsaPolicyError, _LogWriteError) as exc:
        raise fail_usage(exc, as_json) from None
    finally:
        if handler is not None:
            logger.removeHandler(handler)
    def say(text: str) -> None:
        print(f"nsa-policy launch: {text}", file=sys.stderr)

    say(f"target {plan.release.describe()}")
    if dry_run:
        _print_engine_view(plan, say)
    print(render_table(plan.decision), file=sys.stderr)
    for change in plan.rewritten:
        say(f"respelt {change}")
    say(("adding " + ", ".join(plan.added_flags)) if plan.added_flags else "no flag to add")
    for k, v in plan.env_additions.items():
        say(f"env {k}={v}")
    for note in plan.notes:
        say(f"note: {note}")
    if dry_run:
        if as_json:
            print(json.dumps({
                "argv": list(plan.argv), "env": plan.env_additions, "added_flags": list(plan.added_flags),
                "rewritten": list(plan.rewritten), "command": plan.shell_line(),
                "sglang": plan.release.model_dump(mode="json"), "notes": list(plan.notes),
                "engine": {"bundle": plan.engine_bundle, "overrides": plan.engine_overrides,
                           "decision": plan.engine_decision.model_dump(mode="json") if plan.engine_decision else None},
                "decision": plan.decision.model_dump(mode="json")}))
        else:
            print(plan.shell_line())
        raise typer.Exit(EXIT_OK)
    _exec(plan.argv[0], lambda: exec_plan(plan))


def _exec(program: str, run: Callable[[], object]) -> None:
    """Hand the process over to the server (sglang's plan or `vllm serve`); a command that cannot start is a usage error."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        run()
    except OSError as exc:
        print(f"nsa-policy: error: cannot run {program!r}: {exc.strerror}", file=sys.stderr)
        raise typer.Exit(EXIT_USAGE) from None


def _launch_vllm(command: list[str], policy: str, device: str, model: Optional[str], sglang_version: Optional[str],
                 vllm_version: Optional[str], dry_run: bool, as_json: bool, log_decisions: Optional[str] = None) -> None:
    """`launch -- vllm serve …`: resolve with a vLLM bundle, add the flags the target vLLM release reads, exec."""
    import os

    from nsa_policy.base.errors import DeviceDiscoveryError, InputError, NsaPolicyError, PolicyError
    from nsa_policy.commands._render import render_table
    from nsa_policy.engines.vllm.launch import plan_vllm_launch

    if sglang_version is not None:
        raise fail_usage(InputError("--sglang-version", sglang_version,
                                    hint="a vllm serve command targets a vLLM release; use --vllm-version"), as_json)
    from nsa_policy.integration.decision_log import append_decision, check_log_path

    try:
        if log_decisions:  # before any work: a log that can never be appended to is bad input
            check_log_path(log_decisions)
        plan = plan_vllm_launch(command, policy=policy, device=device, model=model, env=os.environ,
                                vllm_version=vllm_version)
    except PolicyError as exc:
        if log_decisions:
            _log_quietly(log_decisions, exc.decision)
        raise _rejected(exc, as_json) from None
    except (NsaPolicyError, DeviceDiscoveryError) as exc:
        raise fail_usage(exc, as_json) from None
    if log_decisions:
        try:
            append_decision(log_decisions, plan.decision, origin="cli.launch")
        except NsaPolicyError as exc:
            raise fail_usage(exc, as_json) from None
    print(f"nsa-policy launch: target {plan.release_why} ({plan.decision.policy})", file=sys.stderr)
    print(render_table(plan.decision), file=sys.stderr)
    print("nsa-policy launch: " + (("adding " + ", ".join(plan.added_flags)) if plan.added_flags else "no flag to add"),
          file=sys.stderr)
    for note in plan.notes:
        print(f"nsa-policy launch: note: {note}", file=sys.stderr)
    if dry_run:
        if as_json:
            print(json.dumps({"argv": plan.argv, "added_flags": plan.added_flags, "command": plan.shell_line(),
                              "engine": "vllm", "vllm": plan.release, "notes": plan.notes,
                              "decision": plan.decision.model_dump(mode="json")}))
        else:
            print(plan.shell_line())
        raise typer.Exit(EXIT_OK)
    _exec(plan.argv[0], lambda: os.execvp(plan.argv[0], plan.argv))  # pragma: no cover - replaces the process


def _log_quietly(path: str, decision: object) -> None:
    """A rejected decision is logged too; a log that fails then does not hide the rejection."""
    from nsa_policy.base.errors import NsaPolicyError
    from nsa_policy.integration.decision_log import append_decision

    try:
        append_decision(path, decision, origin="cli.launch")  # type: ignore[arg-type]
    except NsaPolicyError as exc:
        print(f"nsa-policy: error: {exc}", file=sys.stderr)


_OUTPUTS = ("kv_cache_dtype", "prefill_backend", "decode_backend", "page_size", "dense_attn_kv_len_threshold")


def _print_engine_view(plan: LaunchPlan, say: Callable[[str], None]) -> None:
    """--dry-run: what the release decides on its own, next to the final decision."""
    if plan.engine_decision is None:
        say(f"sglang {plan.release.version} on its own: no compatibility bundle reproduces it")
        return
    e, d = plan.engine_decision, plan.decision
    head = f"sglang {plan.release.version} on its own ({plan.engine_bundle})"
    if e.errors:
        say(f"{head}: refuses to start: " + "; ".join(f"{f.code} {f.message}" for f in e.errors))
    else:
        say(f"{head}: " + ", ".join(f"{f}={getattr(e, f)}" for f in _OUTPUTS))
    for f in e.warnings:
        say(f"  {f.code} {f.message}")
    differs = [f"{f}: {getattr(e, f)} → {getattr(d, f)}" for f in _OUTPUTS if getattr(e, f) != getattr(d, f)]
    say("with nsa-policy " + d.policy + ": " + ("; ".join(differs) if differs else "the same outputs"))


class _LogWriteError(Exception):
    pass


def _raise_log_error(record: logging.LogRecord) -> None:
    exc = sys.exc_info()[1]
    raise _LogWriteError(f"--log-decisions: {exc}")
