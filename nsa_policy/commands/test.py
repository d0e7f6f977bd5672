"""Command `test`: run a bundle's rule tests (rules/policy/<bundle>/tests/*.yaml; docs/rule-tests.md)."""
from __future__ import annotations

import json

import typer

from nsa_policy.commands._common import EXIT_OK, EXIT_REJECTED, fail_usage


def register(app: typer.Typer) -> None:
    app.command("test")(run_rule_tests)


def run_rule_tests(
    policy: str | None = typer.Option(None, "--policy",
                                      help="Bundle name or rule folder (default: every shipped bundle)."),
    cases: list[str] | None = typer.Option(None, "--cases",
                                           help="More test files or folders, run against --policy's bundle "
                                                "(repeatable; contract case files work too)."),
    as_json: bool = typer.Option(False, "--json", help="Print exactly one JSON object."),
    coverage: bool = typer.Option(False, "--coverage", help="Also list the rules no case fires."),
) -> None:
    """Run a bundle's own rule tests (its tests/*.yaml); exit 1 when a case fails."""
    from nsa_policy.base.errors import InputError, NsaPolicyError
    from nsa_policy.core.bundle import list_bundles
    from nsa_policy.verify.rule_tests import (
        execute,
        plan,
        report_json,
        report_text,
        shipped_plan,
    )

    try:
        if policy is None and cases:
            raise InputError("--policy", None, list_bundles(), hint="--cases needs --policy, the bundle they test")
        runs = plan(policy, cases or ()) if policy is not None else shipped_plan()
        results = execute(runs)
    except NsaPolicyError as exc:
        raise fail_usage(exc, as_json) from None
    failed = sum(rr.failed for rr in results)
    if as_json:
        print(json.dumps(report_json(results, coverage)))
    else:
        print(report_text(results, coverage))
    raise typer.Exit(EXIT_REJECTED if failed else EXIT_OK)
