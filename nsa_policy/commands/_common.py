"""What every CLI command shares: exit codes and the one way bad input is reported."""
from __future__ import annotations

import json
import sys
from typing import Callable

import typer

from nsa_policy.base.errors import InputError, PolicyError, RuleFileError

# One meaning each, for CI scripts: 0 resolved/clean, 1 rejected by the policy (or findings at the fail
# level), 2 unusable input, 3 an internal error (a bug to report; the traceback only with --debug).
EXIT_OK, EXIT_REJECTED, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
EXIT_CODES_HELP = "Exit codes: 0 resolved or clean; 1 rejected by the policy or findings at the fail level; " \
                  "2 unusable input; 3 internal error (rerun with --debug and report it)."


def fail_usage(exc: Exception, as_json: bool = False) -> typer.Exit:
    """Bad input: one clear line on stderr (and a JSON error object with --json); exit 2. Never a traceback."""
    if as_json:
        err: dict[str, object] = {"message": str(exc), "kind": type(exc).__name__}
        if isinstance(exc, InputError):
            value = exc.value if isinstance(exc.value, (str, int, float, bool, type(None))) else str(exc.value)
            err.update(field=exc.field, value=value, valid=exc.valid, suggestion=exc.suggestion)
        if isinstance(exc, RuleFileError):
            err.update(path=exc.path, line=exc.line)
        print(json.dumps({"error": err}))
    print(f"nsa-policy: error: {exc}", file=sys.stderr)
    return typer.Exit(EXIT_USAGE)


def fail_after_output(exc: Exception) -> typer.Exit:
    """The result was printed, but a side job (the decision log) failed: say so on one line; exit 3."""
    print(f"nsa-policy: error: {exc}", file=sys.stderr)
    return typer.Exit(EXIT_INTERNAL)


def usage_error_line(exc: Exception) -> str:
    """click's usage error as one line: the command, what is wrong, and where the help is."""
    ctx = getattr(exc, "ctx", None)
    fmt = getattr(exc, "format_message", None)
    message = " ".join((fmt() if callable(fmt) else str(exc)).split())
    where = ctx.command_path if ctx is not None else "nsa-policy"
    sub = where.split(" ", 1)[1] + ": " if " " in where else ""
    return f"nsa-policy: error: {sub}{message} (see '{where} --help')"


def rejected_exit(exc: PolicyError, as_json: bool) -> typer.Exit:
    """A rejected decision: its table and reason on stderr (and the JSON on stdout);
    exit 1, nothing runs."""
    from nsa_policy.commands._render import render_table  # lazy, as in the commands

    decision = exc.decision
    print(render_table(decision), file=sys.stderr)
    print(str(exc), file=sys.stderr)
    if as_json:
        print(json.dumps({"rejected": True, "decision": decision.model_dump(mode="json")}))
    return typer.Exit(EXIT_REJECTED)


def exec_or_fail(program: str, run: Callable[[], object]) -> None:
    """Hand the process over to a server command; one that cannot start is a usage error."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        run()
    except OSError as exc:
        print(f"nsa-policy: error: cannot run {program!r}: {exc.strerror}", file=sys.stderr)
        raise typer.Exit(EXIT_USAGE) from None


def log_quietly(path: str, decision: object, origin: str) -> None:
    """A rejected decision is logged too; a log that fails then does not hide the rejection."""
    from nsa_policy.base.errors import NsaPolicyError
    from nsa_policy.integration.decision_log import append_decision

    try:
        append_decision(path, decision, origin=origin)  # type: ignore[arg-type]
    except NsaPolicyError as exc:
        print(f"nsa-policy: error: {exc}", file=sys.stderr)
