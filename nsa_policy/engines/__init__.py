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
import importlib.metadata
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Optional

from nsa_policy.base.errors import InputError, RuleFileError

if TYPE_CHECKING:  # pragma: no cover
    from nsa_policy.engines.base import Engine

ENTRY_POINT_GROUP = "nsa_policy.engines"
# name → "module:attribute" of its Engine instance; the first is the engine a bare call means.
BUILTIN = {"sglang": "nsa_policy.engines.sglang:ENGINE", "vllm": "nsa_policy.engines.vllm:ENGINE"}
DEFAULT = next(iter(BUILTIN))


@lru_cache(maxsize=1)
def _targets() -> dict[str, str]:
    found = dict(BUILTIN)
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in BUILTIN:
            continue  # a built-in's name is taken: the built-in stays (an entry point cannot replace it)
        found[ep.name] = ep.value
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


def every() -> tuple[Engine, ...]:
    return tuple(get(n) for n in names())


def owner_of_bundle(name: str) -> Optional[Engine]:
    """The engine whose release naming `name` follows (sglang-0.5.23, vllm-0.33.0), if any."""
    for engine in every():
        if engine.release_of_bundle_name(name) is not None:
            return engine
    return None
