"""CLI commands that live in their own modules. Each module here defines `register(app)`.

Modules are found by listing this package, so adding a command is adding a file. Keep heavy
imports inside the command functions: every CLI start imports these modules.
"""
from __future__ import annotations

import importlib
import pkgutil


def register(app) -> None:
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        hook = getattr(module, "register", None)
        if hook is not None:
            hook(app)
