"""Where the rules live: inside the installed wheel, else the top-level rules/ of a checkout."""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=1)
def rules_dir() -> Path:
    override = os.environ.get("NSA_POLICY_RULES_DIR")
    if override:
        return Path(override)
    package = Path(__file__).resolve().parent.parent  # nsa_policy/
    packaged = package / "_rules"  # the wheel carries rules/ here (pyproject force-include)
    if packaged.is_dir():
        return packaged
    checkout = package.parent / "rules"
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError(f"nsa-policy rules not found: looked in {packaged} and {checkout}")


@lru_cache(maxsize=1)
def packaged_rules_dir() -> Path | None:
    """The rules this installation ships (not an NSA_POLICY_RULES_DIR override): trusted as program code."""
    if os.environ.get("NSA_POLICY_RULES_DIR"):
        return None
    return rules_dir().resolve()


def policy_dir() -> Path:
    return rules_dir() / "policy"


def catalog_dir() -> Path:
    return rules_dir() / "catalog"
