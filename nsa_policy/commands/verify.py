"""Commands `check`, `diff` and `matrix`: prove a bundle, compare two, draw the support matrix."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

import typer

from nsa_policy.base.safe_io import check_output_path, write_atomic
from nsa_policy.commands._common import EXIT_OK, EXIT_REJECTED, fail_usage


def register(app: typer.Typer) -> None:
    app.command("check")(check)
    app.command("diff")(diff)
    app.command("matrix")(matrix)


def _format(fmt: str, allowed: tuple[str, ...], as_json: bool):
    from nsa_policy.base.errors import InputError

    if fmt not in allowed:
        raise fail_usage(InputError("--format", fmt, list(allowed)), as_json)


def _capped(workers: Optional[int]) -> Optional[int]:
    """More processes than cores only thrash (300 forks on 2 cores): cap, and say so."""
    cores = os.cpu_count() or 1
    if workers is not None and workers > cores:
        print(f"nsa-policy: note: --workers {workers} capped at {cores} (the cores here)", file=sys.stderr)
        return cores
    return workers


def check(
    policy: Optional[list[str]] = typer.Option(None, "--policy",
                                               help="Bundle name or rule folder (repeatable; default: every shipped bundle)."),
    cases: Optional[list[str]] = typer.Option(None, "--cases", help="Case files or folders: report which rules they exercise."),
    fmt: str = typer.Option("text", "--format", help="text, markdown or json."),
    as_json: bool = typer.Option(False, "--json", help="Same as --format json."),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, help="Processes (default: up to 2)."),
) -> None:
    """Check bundles over the whole enumerated input space; exit 1 on any finding."""
    from nsa_policy.base.errors import NsaPolicyError
    from nsa_policy.verify.coverage import load_case_files
    from nsa_policy.verify.exhaustive import (
        check_bundle,
        checked_bundles,
        render_json,
        render_markdown,
        render_text,
    )

    fmt = "json" if as_json else fmt
    _format(fmt, ("text", "markdown", "json"), fmt == "json")
    workers = _capped(workers)
    try:
        loaded = load_case_files(list(cases)) if cases else None
        names = list(policy or checked_bundles())
        # a progress line per bundle on a terminal's stderr; never under --json or when piped
        reports = [check_bundle(p, workers=workers, cases=loaded, quiet=fmt == "json",
                                label=f"check {p} ({i}/{len(names)})" if len(names) > 1 else None)
                   for i, p in enumerate(names, 1)]
    except NsaPolicyError as exc:
        raise fail_usage(exc, fmt == "json") from None
    if fmt == "json":
        print(render_json(reports))
    else:
        render = render_markdown if fmt == "markdown" else render_text
        print("\n\n".join(render(r) for r in reports))
    raise typer.Exit(EXIT_OK if all(r.ok for r in reports) else EXIT_REJECTED)


def diff(
    a: Optional[str] = typer.Argument(None, help="Bundle name or rule folder (before); with --releases, the first "
                                                 "release to show (default: every release bundle)."),
    b: Optional[str] = typer.Argument(None, help="Bundle name or rule folder (after); with --releases, the last "
                                                 "release to show."),
    releases: bool = typer.Option(False, "--releases", help="Diff each sglang release bundle against the one before "
                                                            "it: the changelog (docs/sglang-releases.md)."),
    inputs: Optional[str] = typer.Option(None, "--inputs", help="A case file or YAML list of inputs, instead of the space."),
    fmt: str = typer.Option("text", "--format", help="text, markdown or json."),
    as_json: bool = typer.Option(False, "--json", help="Same as --format json."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write to this file instead of stdout."),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, help="Processes (default: up to 2)."),
    engine: Optional[str] = typer.Option(None, "--engine", help="sglang or vllm: which engine's bundle `default` "
                                                                "names (default: the other bundle's engine)."),
) -> None:
    """Every input whose decision differs between two bundles, grouped into change classes.

    `nsa-policy diff vllm-0.33 default --engine vllm` is the migration report for vLLM users
    (docs/migration-from-vllm.md).

    `--releases` writes the changelog of every sglang release bundle instead:
    `nsa-policy diff --releases --format markdown --out docs/sglang-releases.md`."""
    from nsa_policy.base.errors import InputError, NsaPolicyError
    from nsa_policy.engines.sglang import changelog
    from nsa_policy.verify.diff import diff_inputs, diff_space, load_inputs, render_json, render_markdown, render_text
    from nsa_policy.verify.exhaustive import load_for_check

    fmt = "json" if as_json else fmt
    _format(fmt, ("text", "markdown", "json"), fmt == "json")
    workers = _capped(workers)
    text: str
    try:
        if releases and inputs:
            raise InputError("--inputs", inputs, hint="--releases diffs over the enumerated space; drop one of them")
        if not releases and (a is None or b is None):
            raise InputError("diff", " ".join(x for x in (a, b) if x) or "(nothing)",
                             hint="give two bundles (nsa-policy diff A B), or --releases")
        if out is not None:  # before the seconds-to-minutes of work: a bad path must not waste it or lose the report
            check_output_path(out, field="--out", inputs=[inputs] if inputs else [])
        if releases:
            log = changelog.release_changelog(a, b, workers=workers, quiet=fmt == "json")
            text = {"json": changelog.render_json, "markdown": changelog.render_markdown,
                    "text": changelog.render_text}[fmt](log)
        else:
            assert a is not None and b is not None  # checked above
            a, b = _for_engine(a, b, engine)
            ba, bb = load_for_check(a), load_for_check(b)
            if inputs:
                report = diff_inputs(ba, bb, load_inputs(inputs), inputs)
            else:
                report = diff_space(ba, bb, workers=workers, policy_a=a, policy_b=b, quiet=fmt == "json")
            text = {"json": render_json, "markdown": render_markdown, "text": render_text}[fmt](report)
    except NsaPolicyError as exc:
        raise fail_usage(exc, fmt == "json") from None
    if out:
        try:
            write_atomic(out, text if text.endswith("\n") else text + "\n", field="--out")
        except NsaPolicyError as exc:
            raise fail_usage(exc, fmt == "json") from None
    else:
        print(text)
    raise typer.Exit(EXIT_OK)


def _for_engine(a: str, b: str, engine: Optional[str]) -> tuple[str, str]:
    """`default` as the engine's recommendation bundle: the one --engine names, else the other side's engine."""
    from nsa_policy import engines
    from nsa_policy.core.bundle import bundle_for_engine
    from nsa_policy.verify.exhaustive import load_for_check

    if engine is not None:
        engines.get(engine, "--engine")
    if engine is None:
        others = [x for x in (a, b) if x != "default"]
        engine = load_for_check(others[0]).engine if len(others) == 1 else engines.DEFAULT
    return bundle_for_engine(a, engine), bundle_for_engine(b, engine)


def matrix(
    out_dir: Optional[Path] = typer.Option(None, "--out-dir", help="Write matrix.md, matrix.png and matrix.svg here "
                                                                   "(with --engine vllm: matrix-vllm.md)."),
    policy: str = typer.Option("default", "--policy", help="Whose default picks to mark."),
    fmt: str = typer.Option("markdown", "--format", help="markdown or json (printed when no --out-dir)."),
    image: Optional[str] = typer.Option(None, "--image", help="Embed this image path in the printed markdown "
                                                              "(e.g. docs/matrix.png for the README)."),
    engine: Optional[str] = typer.Option(None, "--engine", help="A registered engine (default sglang); vllm: vLLM's "
                                         "backends × device × KV dtype, what vLLM picks and what the vLLM policy "
                                         "recommends."),
) -> None:
    """The support matrix (backend × device × KV dtype × phase) as markdown, or PNG+SVG+markdown files."""
    import json

    from nsa_policy import engines
    from nsa_policy.base.errors import InputError, NsaPolicyError
    from nsa_policy.verify.matrix import matrix_data, render_markdown, write_all

    _format(fmt, ("markdown", "json"), fmt == "json")
    try:
        chosen = engines.get(engine or engines.DEFAULT, "--engine")
    except InputError as exc:
        raise fail_usage(exc, fmt == "json") from None
    if chosen.matrix_cli(out_dir, policy, fmt, image):  # an engine with its own view of the matrix
        return
    try:
        if out_dir is not None:
            check_output_path(out_dir, field="--out-dir", want_dir=True)
            try:
                import matplotlib  # noqa: F401
            except ModuleNotFoundError:
                print("nsa-policy: error: --out-dir draws pictures, which needs matplotlib: pip install 'nsa-policy[plot]' "
                      "(in a checkout: pip install '.[plot]')", file=sys.stderr)
                raise typer.Exit(2) from None
            for path in write_all(out_dir, policy).values():
                print(f"wrote {path}")
            raise typer.Exit(EXIT_OK)
        data = matrix_data(chosen.bundle_for(policy), engine=chosen.name)
    except NsaPolicyError as exc:
        raise fail_usage(exc, fmt == "json") from None
    print(json.dumps(data) if fmt == "json" else render_markdown(data, image=image), end="" if fmt != "json" else "\n")
