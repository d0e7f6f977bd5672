"""`nsa-policy launch -- python -m sglang.launch_server …`: respell for the target release, add the
decided flags, show what the release decides on its own (--dry-run), exec."""
from __future__ import annotations

import json
import logging
import sys
from typing import TYPE_CHECKING, Callable, Optional

import typer

from nsa_policy.commands._common import EXIT_OK, exec_or_fail, fail_usage, rejected_exit

if TYPE_CHECKING:
    from nsa_policy.engines.sglang.launch import LaunchPlan

_OUTPUTS = ("kv_cache_dtype", "prefill_backend", "decode_backend", "page_size", "dense_attn_kv_len_threshold")


class LogWriteError(Exception):
    """--log-decisions could not be written: a CLI says so (the plugin's log only warns)."""


def _raise_log_error(record: logging.LogRecord) -> None:
    exc = sys.exc_info()[1]
    raise LogWriteError(f"--log-decisions: {exc}")


def launch_cli(argv: list[str], *, policy: str, device: str, model: Optional[str], version: Optional[str],
               dry_run: bool, as_json: bool, log_decisions: Optional[str] = None) -> None:
    from nsa_policy.base.errors import NsaPolicyError, PolicyError
    from nsa_policy.commands._render import render_table
    from nsa_policy.engines.sglang.launch import exec_plan, plan_launch

    logger = logging.getLogger("nsa_policy.commands.launch")
    logger.propagate = False  # the decision is printed below; the record only feeds the decision log
    logger.setLevel(logging.INFO)
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())  # else logging's last-resort handler prints warnings twice
    handler = None
    if log_decisions:
        from nsa_policy.integration.decision_log import DecisionLogHandler

        handler = DecisionLogHandler(log_decisions)
        handler.handleError = _raise_log_error  # type: ignore[method-assign]
        logger.addHandler(handler)
    try:
        plan = plan_launch(argv, policy=policy, device=device, model=model, sglang_version=version, logger=logger)
    except PolicyError as exc:
        raise rejected_exit(exc, as_json) from None
    except (NsaPolicyError, LogWriteError) as exc:
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
    exec_or_fail(plan.argv[0], lambda: exec_plan(plan))


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
