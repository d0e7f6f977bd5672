"""The nsa-policy command line (typer). Thin: the root options; every command registers itself
from its module in nsa_policy/commands/ (resolve, launch, lint, check, …)."""
from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any, Optional

import typer
from typer.core import TyperGroup

try:  # typer >= 0.2x runs on its own vendored click (and no longer depends on the click package)
    from typer import _click as click
except ImportError:  # pragma: no cover - older typer runs on the click package
    import click  # type: ignore[no-redef]

from nsa_policy import __version__
from nsa_policy.base.errors import NsaPolicyError
from nsa_policy.commands._common import EXIT_CODES_HELP, EXIT_INTERNAL, EXIT_OK, fail_usage, usage_error_line

_DEBUG = {"on": bool(os.environ.get("NSA_POLICY_DEBUG"))}
# exits and usage errors pass through to typer, which prints them and exits 2 (or the given code)
_PASSTHROUGH: tuple[type[BaseException], ...] = tuple(
    t for t in (typer.Exit, SystemExit, click.ClickException, getattr(typer, "Abort", None),
                getattr(click, "Abort", None), getattr(getattr(click, "exceptions", None), "Exit", None))
    if isinstance(t, type))


def _no_flag_placeholders(cmd: click.Command) -> None:
    """A flag takes no value, so its help row shows none (typer would print `<bool>`)."""
    for param in cmd.params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""


class _Commands(TyperGroup):
    """Every command runs under one error policy: known errors are one line with exit 2; anything
    else is a bug, reported on one line with exit 3 (never exit 1, which means "rejected")."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> Optional[click.Command]:
        cmd = super().get_command(ctx, cmd_name)
        if cmd is not None:
            if not cmd.epilog:  # every command's --help states the exit codes
                cmd.epilog = EXIT_CODES_HELP
            _no_flag_placeholders(cmd)
            help_option = cmd.get_help_option(ctx)
            if help_option is not None:
                help_option.metavar = ""
        return cmd

    def get_help_option(self, ctx: click.Context) -> Any:
        help_option = super().get_help_option(ctx)
        if help_option is not None:
            help_option.metavar = ""
        return help_option

    def main(self, args: Optional[Sequence[str]] = None, prog_name: Optional[str] = None,
             complete_var: Optional[str] = None, standalone_mode: bool = True, windows_expand_args: bool = True,
             **extra: Any) -> Any:
        """A usage error (unknown option, missing or malformed value) is one line on stderr, exit 2:
        click's own report is a usage line, a hint and a box of 4-5 lines."""
        _no_flag_placeholders(self)
        try:
            rv = super().main(args=args, prog_name=prog_name, complete_var=complete_var,
                              standalone_mode=False, windows_expand_args=windows_expand_args, **extra)
        except click.exceptions.NoArgsIsHelpError as exc:  # `nsa-policy` alone: typer has printed the help
            rv = exc.exit_code
        except click.exceptions.ClickException as exc:
            if not standalone_mode:
                raise
            print(usage_error_line(exc), file=sys.stderr)
            sys.exit(exc.exit_code)
        except typer.Abort:
            if not standalone_mode:
                raise
            print("nsa-policy: aborted", file=sys.stderr)
            sys.exit(1)
        if not standalone_mode:
            return rv
        sys.exit(rv if isinstance(rv, int) else EXIT_OK)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except _PASSTHROUGH:
            raise
        except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as Unix tools do
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise typer.Exit(141) from None
        except NsaPolicyError as exc:
            raise fail_usage(exc) from None
        except KeyboardInterrupt:
            raise typer.Exit(130) from None
        except Exception as exc:  # noqa: BLE001 - the one place an unexpected error becomes exit 3
            if _DEBUG["on"]:
                traceback.print_exc()
            detail = str(exc).splitlines()[0][:300] if str(exc) else ""
            print(f"nsa-policy: internal error: {type(exc).__name__}: {detail} "
                  f"(a bug: rerun with --debug and report it with the traceback)", file=sys.stderr)
            raise typer.Exit(EXIT_INTERNAL) from None


def _new_app() -> typer.Typer:
    app = typer.Typer(cls=_Commands, add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                      help="Decide, explain and check how a serving engine runs DeepSeek Sparse Attention (DSA/NSA). "
                           + EXIT_CODES_HELP)
    app.callback()(_root)
    return app


def _version(value: bool) -> None:
    if value:
        print(f"nsa-policy {__version__}")
        raise typer.Exit(EXIT_OK)


def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit."),
          debug: bool = typer.Option(False, "--debug", help="Show the traceback of an internal error (exit 3).")) -> None:
    if debug:
        _DEBUG["on"] = True


_FULL: dict[str, typer.Typer] = {}


def full_app() -> typer.Typer:
    """The application with every command (help, completion, tests)."""
    if "app" not in _FULL:
        from nsa_policy import commands

        app = _new_app()
        commands.register(app)
        _FULL["app"] = app
    return _FULL["app"]


def _command_of(argv: Sequence[str]) -> Optional[str]:
    """The command a command line runs: the first word after the root's flags (which take no value)."""
    for word in argv:
        if word.startswith("-"):
            if word in ("--version", "--help", "-h"):
                return None
            continue
        return word
    return None


def app_for(argv: Sequence[str]) -> typer.Typer:
    """Only the command this command line runs, when its module is named after it (resolve, lint,
    launch, bench, test); the full application otherwise, so help and errors are as always."""
    from nsa_policy import commands

    name = _command_of(argv)
    if name is None or name not in commands.modules():
        return full_app()
    app = _new_app()
    commands.register(app, only=name)
    if not any(info.name == name for info in app.registered_commands):
        return full_app()
    return app


def __getattr__(name: str) -> Any:
    if name == "app":  # `from nsa_policy.cli import app`: every command, built on first use
        return full_app()
    raise AttributeError(f"module 'nsa_policy.cli' has no attribute {name!r}")


def main() -> None:
    """The console script. Collection is off while the command's modules load, and what they created is
    then frozen out of it (gc.freeze): modules stay loaded to the end, so every pass over them finds
    nothing. What is left at exit is frozen too, out of the interpreter's final collection, which only
    walks objects the exit frees anyway. Together about a quarter of a cold `resolve`
    (benchmarks/bench_resolve.py, 2026-12-02: 2.50x to 1.72-1.86x a bare pydantic/typer/yaml import)."""
    import gc

    from nsa_policy.base.gc_pause import paused

    with paused():  # restores the caller's setting: a caller that had collection off keeps it off
        app = app_for(sys.argv[1:])
        gc.freeze()
    try:
        app()
    finally:
        gc.freeze()


if __name__ == "__main__":
    main()
