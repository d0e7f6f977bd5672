"""The nsa-policy command line (typer). Thin: the root options; every command registers itself
from its module in nsa_policy/commands/ (resolve, launch, lint, check, …)."""
from __future__ import annotations

import os
import sys
import traceback
from typing import Any, Optional

import typer
from typer.core import TyperGroup

try:  # typer >= 0.2x runs on its own vendored click (and no longer depends on the click package)
    from typer import _click as click
except ImportError:  # pragma: no cover - older typer runs on the click package
    import click  # type: ignore[no-redef]

from nsa_policy import __version__
from nsa_policy.base.errors import NsaPolicyError
from nsa_policy.commands._common import EXIT_CODES_HELP, EXIT_INTERNAL, EXIT_OK, fail_usage

_DEBUG = {"on": bool(os.environ.get("NSA_POLICY_DEBUG"))}
# exits and usage errors pass through to typer, which prints them and exits 2 (or the given code)
_PASSTHROUGH: tuple[type[BaseException], ...] = tuple(
    t for t in (typer.Exit, SystemExit, click.ClickException, getattr(typer, "Abort", None),
                getattr(click, "Abort", None), getattr(getattr(click, "exceptions", None), "Exit", None))
    if isinstance(t, type))


class _Commands(TyperGroup):
    """Every command runs under one error policy: known errors are one line with exit 2; anything
    else is a bug, reported on one line with exit 3 (never exit 1, which means "rejected")."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> Optional[click.Command]:
        cmd = super().get_command(ctx, cmd_name)
        if cmd is not None and not cmd.epilog:  # every command's --help states the exit codes
            cmd.epilog = EXIT_CODES_HELP
        return cmd

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


app = typer.Typer(cls=_Commands, add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Decide, explain and check how a serving engine runs DeepSeek Sparse Attention (DSA/NSA). "
                       + EXIT_CODES_HELP)


def _version(value: bool) -> None:
    if value:
        print(f"nsa-policy {__version__}")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit."),
          debug: bool = typer.Option(False, "--debug", help="Show the traceback of an internal error (exit 3).")) -> None:
    if debug:
        _DEBUG["on"] = True


def _register_commands() -> None:
    from nsa_policy import commands

    commands.register(app)


_register_commands()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
