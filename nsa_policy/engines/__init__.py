"""The serving engines: one registered package each, and the only list of them.

Callers ask the registered object (`get("vllm").config_from(...)`), never branch on an engine's name,
as vLLM's platform plugins are asked. The built-in engines are listed here; an out-of-tree engine
registers an `Engine` instance under the entry-point group `nsa_policy.engines`:

    [project.entry-points."nsa_policy.engines"]
    myengine = "my_package.nsa_engine:ENGINE"

Engine packages are imported on first use, so a plain sglang resolve never loads vLLM's catalog.
"""
from __future__ import annotations

import importlib
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Optional

from nsa_policy.base.errors import InputError, RuleFileError

if TYPE_CHECKING:  # pragma: no cover
    from nsa_policy.engines.base import Engine

ENTRY_POINT_GROUP = "nsa_policy.engines"
# name → "module:attribute" of its Engine instance; the first is the engine a bare call means.
BUILTIN = {"sglang": "nsa_policy.engines.sglang:ENGINE", "vllm": "nsa_policy.engines.vllm:ENGINE"}
DEFAULT = next(iter(BUILTIN))


def _entry_points() -> list[tuple[str, str]]:
    """(name, target) of the group's entry points. Reads only the entry_points.txt files that mention
    the group (importlib.metadata parses every installed distribution's: ~10 ms of each cold start)."""
    import os
    import sys

    marker = f"[{ENTRY_POINT_GROUP}]"
    found: list[tuple[str, str]] = []
    for folder in sys.path:
        try:
            names = os.listdir(folder or ".")
        except OSError:
            continue
        for name in names:
            if not name.endswith((".dist-info", ".egg-info")):
                continue
            try:
                with open(os.path.join(folder or ".", name, "entry_points.txt"), encoding="utf-8") as fh:
                    text = fh.read(1 << 20)
            except OSError:
                continue
            if marker in text:
                import importlib.metadata  # lazy: only an installed out-of-tree engine needs it

                dist = importlib.metadata.PathDistribution.at(os.path.join(folder or ".", name))
                found.extend((ep.name, ep.value) for ep in dist.entry_points if ep.group == ENTRY_POINT_GROUP)
    return found


@lru_cache(maxsize=1)
def _targets() -> dict[str, str]:
    found = dict(BUILTIN)
    for name, value in _entry_points():
        if name in BUILTIN or name in found:
            continue  # a built-in's name is taken (an entry point cannot replace it); the first on sys.path wins
        found[name] = value
    return found


def names() -> tuple[str, ...]:
    """Every registered engine, the built-ins first."""
    return tuple(_targets())


@cache
def get(name: str, field: str = "engine") -> Engine:
    """The registered engine `name`; an InputError naming the registered ones otherwise."""
    target = _targets().get(name) if isinstance(name, str) else None
    if target is None:
        from nsa_policy.base.errors import closest

        near = closest(name, names())
        raise InputError(field, name, list(names()), hint=f"did you mean {near!r}?" if near else None)
    module, _, attr = target.partition(":")
    try:
        engine = getattr(importlib.import_module(module), attr or "ENGINE")
    except (ImportError, AttributeError) as exc:
        raise RuleFileError(f"entry point {ENTRY_POINT_GROUP}:{name}", None, f"{target!r} does not load ({exc})") from None
    if getattr(engine, "name", None) != name:
        raise RuleFileError(f"entry point {ENTRY_POINT_GROUP}:{name}", None,
                            f"{target!r} gives {engine!r}, not an Engine named {name!r}")
    return engine


def only_builtin() -> bool:
    """No out-of-tree engine is installed (what the shipped bundles compile against is all in-tree)."""
    return set(_targets()) == set(BUILTIN)


def every() -> tuple[Engine, ...]:
    return tuple(get(n) for n in names())


def owner_of_bundle(name: str) -> Optional[Engine]:
    """The engine whose release naming `name` follows (sglang-0.5.23, vllm-0.33.0), if any."""
    for engine in every():
        if engine.release_of_bundle_name(name) is not None:
            return engine
    return None
