"""`nsa-policy lint PATHS…` and `nsa-policy rule CODE`."""
from __future__ import annotations

import os
from typing import Optional

import typer

from nsa_policy.commands._common import EXIT_OK, EXIT_REJECTED, EXIT_USAGE, fail_usage

_LEVEL_RANK = {"info": 0, "warning": 1, "error": 2}


def register(app: typer.Typer) -> None:
    app.command(name="lint")(lint)
    app.command(name="rule")(rule)


def lint(
    paths: Optional[list[str]] = typer.Argument(None, help="Files or folders to lint (default: .)."),
    device: Optional[str] = typer.Option(None, "--device", help="Device for every launch (overrides what files say): "
                                                                 "catalog name (h200, b200…) or capability spec (sm90…)."),
    policy: Optional[str] = typer.Option(None, "--policy", help="Bundle the launches are checked against (default: "
                                         "default). Given here, no file's 'nsa-policy: policy=' hint can change it."),
    sglang_version: Optional[str] = typer.Option(None, "--sglang-version", help="The sglang release every launch "
                                                 "targets (overrides a file's hint comment, image tag or pin)."),
    fmt: str = typer.Option("text", "--format", help="text, json, github or sarif."),
    fail_level: str = typer.Option("error", "--fail-level", help="Exit 1 when a finding is at or above: error, warning, info."),
    exit_zero: bool = typer.Option(False, "--exit-zero", help="Exit 0 even with findings (unreadable input still exits 2)."),
    exclude: Optional[list[str]] = typer.Option(None, "--exclude", help="gitignore-style pattern to skip (repeatable)."),
    no_gitignore: bool = typer.Option(False, "--no-gitignore", help="Do not read .gitignore files."),
    output: Optional[str] = typer.Option(None, "--output", "-o", help="Write the report to this file instead of stdout."),
) -> None:
    """Find sglang launches in scripts, Dockerfiles, manifests and config files, and check each with the policy."""
    from nsa_policy.base.errors import InputError, NsaPolicyError
    from nsa_policy.lint import LintOptions, lint_paths
    from nsa_policy.lint.formats import FORMATS, RENDERERS

    as_json = fmt in ("json", "sarif")
    if fmt not in FORMATS:
        raise fail_usage(InputError("--format", fmt, list(FORMATS)))
    if fail_level not in _LEVEL_RANK:
        raise fail_usage(InputError("--fail-level", fail_level, list(_LEVEL_RANK)))
    from nsa_policy.base.safe_io import check_output_path, write_atomic

    targets = paths or ["."]
    try:
        if output:  # before any work: a bad path must not cost a lint run, nor overwrite a linted file
            check_output_path(output, field="--output", inputs=[p for p in targets if os.path.isfile(p)])
        report = lint_paths(targets, LintOptions(device=device, policy=policy or "default",
                                                 policy_explicit=policy is not None, sglang_version=sglang_version),
                            tuple(exclude or ()), use_gitignore=not no_gitignore)
        if output:
            check_output_path(output, field="--output", inputs=report.paths)
    except NsaPolicyError as exc:
        raise fail_usage(exc, as_json) from None
    text = RENDERERS[fmt](report)
    if output:
        try:
            write_atomic(output, text + "\n", field="--output")
        except NsaPolicyError as exc:
            raise fail_usage(exc, as_json) from None
    else:
        print(text)
    if report.unreadable:
        raise typer.Exit(EXIT_USAGE)
    failing = any(_LEVEL_RANK[d.level] >= _LEVEL_RANK[fail_level] for d in report.diagnostics)
    raise typer.Exit(EXIT_REJECTED if failing and not exit_zero else EXIT_OK)


def rule(
    code: Optional[str] = typer.Argument(None, help="A finding code, e.g. NSA101 (default: list every code)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Print a finding code's documentation (rules/codes.yaml)."""
    import json

    from nsa_policy.base.errors import NsaPolicyError
    from nsa_policy.catalog.codes import load_codes

    reg = load_codes()
    if code is None:
        if as_json:
            print(json.dumps({c: d.model_dump() for c, d in sorted(reg.codes.items())}))
        else:
            for c, d in sorted(reg.codes.items()):
                print(f"{c}  {d.level:<7}  {d.name:<36} {d.summary}")
        return
    try:
        doc = reg.get(code)
    except NsaPolicyError as exc:
        raise fail_usage(exc, as_json) from None
    code = code.upper()
    if as_json:
        print(json.dumps({"code": code, **doc.model_dump()}))
        return
    lines = [f"{code} {doc.name} ({doc.level})", "", doc.summary, "", doc.explanation, "", f"Fix: {doc.fix}"]
    if doc.example:
        lines.append(f"Example: {doc.example}")
    if doc.evidence:
        lines.append("Evidence: " + ", ".join(doc.evidence))
    print("\n".join(lines))
    raise typer.Exit(EXIT_OK)
