"""What every CLI command shares: exit codes and the one way bad input is reported."""
from __future__ import annotations

import json
import sys

import typer

from nsa_policy.errors import InputError, RuleFileError

EXIT_OK, EXIT_REJECTED, EXIT_USAGE = 0, 1, 2


def fail_usage(exc: Exception, as_json: bool = False) -> typer.Exit:
    """Bad input: one clear line on stderr (and a JSON error object with --json); exit 2. Never a traceback."""
    if as_json:
        err = {"message": str(exc), "kind": type(exc).__name__}
        if isinstance(exc, InputError):
            value = exc.value if isinstance(exc.value, (str, int, float, bool, type(None))) else str(exc.value)
            err.update(field=exc.field, value=value, valid=exc.valid, suggestion=exc.suggestion)
        if isinstance(exc, RuleFileError):
            err.update(path=exc.path, line=exc.line)
        print(json.dumps({"error": err}))
    print(f"nsa-policy: error: {exc}", file=sys.stderr)
    return typer.Exit(EXIT_USAGE)
