"""sglang's namespace facts (the `sglang.*` family), one release at a time.

- `sglang.<release>.lists_<phase>_backend`: does that release list the configured backend among its
  --nsa/--dsa-<phase>-backend choices (catalog backends.yaml `sglang_choice`); None when unset or unknown.
- `sglang.<release>.{refused,deprecated}_spellings`: the flags among input.spellings that release's
  parser refuses (with what to use instead) or accepts as deprecated aliases (its own warning text),
  as one line from the argument registry (rules/catalog/sglang/args.yaml); None when there are none.
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Optional

_RELEASE = r"(\d+(?:\.[0-9A-Za-z]+)*)"
LISTS = re.compile(rf"^{_RELEASE}\.lists_(prefill|decode)_backend$")
SPELLINGS = re.compile(rf"^{_RELEASE}\.(refused|deprecated)_spellings$")
PATHS = ("sglang.<release>.lists_{prefill,decode}_backend", "sglang.<release>.{refused,deprecated}_spellings")


@lru_cache(maxsize=1024)
def _parse(what: str) -> Optional[tuple[str, str, str]]:
    """(kind, release, phase or refused/deprecated), parsed once per path."""
    m = LISTS.match(what)
    if m:
        return "lists", m.group(1), m.group(2)
    m = SPELLINGS.match(what)
    return ("spellings", m.group(1), m.group(2)) if m else None


def known(what: str) -> bool:
    return _parse(what) is not None


def sglang_fact(ns: Any, what: str) -> Any:
    parsed = _parse(what)
    if parsed is None:
        raise KeyError(f"sglang.{what}")
    kind, release, which = parsed
    if kind == "lists":
        backend = ns[f"config.{which}_backend"]
        if backend is None or backend not in ns.catalog.backends:
            return None
        return ns.catalog.sglang_lists(backend, which, release)
    spellings = ns["input.spellings"]
    if not spellings:
        return None
    from nsa_policy.engines.sglang.args import load_args  # lazy: only inputs with sglang spellings need it

    reg = load_args()
    return reg.refused_text(spellings, release) if which == "refused" else reg.deprecated_text(spellings, release)


def fact_inputs(what: str) -> Optional[frozenset[str]]:
    return frozenset({"config"})  # the flags as given
