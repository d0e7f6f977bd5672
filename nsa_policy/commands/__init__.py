"""CLI commands that live in their own modules. Each module here defines `register(app)`.

Modules are found by listing this package, so adding a command is adding a file. Keep heavy
imports inside the command functions: every CLI start imports these modules.
"""
from __future__ import annotations

import importlib
import pkgutil


def modules() -> list[str]:
    return [m.name for m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name) if not m.name.startswith("_")]


def register(app, only: str | None = None) -> None:
    """Register every command, or only the module named `only` (a command's own module: the CLI
    builds just the command it runs, since building all of them costs a cold start ~30 ms)."""
    for name in modules():
        if only is not None and name != only:
            continue
        module = importlib.import_module(f"{__name__}.{name}")
        hook = getattr(module, "register", None)
        if hook is not None:
            hook(app)
