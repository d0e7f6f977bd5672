"""The nsa-policy command line (typer). Thin: the root options; every command registers itself
from its module in nsa_policy/commands/ (resolve, launch, lint, check, …)."""
from __future__ import annotations

import typer

from nsa_policy import __version__
from nsa_policy.commands._common import EXIT_OK

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Decide, explain and check how a serving engine runs DeepSeek Sparse Attention (DSA/NSA).")


def _version(value: bool) -> None:
    if value:
        print(f"nsa-policy {__version__}")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    pass


def _register_commands() -> None:
    from nsa_policy import commands

    commands.register(app)


_register_commands()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
