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


@lru_cache(maxsize=256)
def _real_dir(folder: str) -> str:
    return os.path.realpath(folder)


def real_path(path: Path | str) -> Path:
    """path with its folder's symlinks resolved, each folder once per process: a cold start reads
    some ninety shipped rule files, and Path.resolve() on each was a tenth of it."""
    full = os.path.abspath(path)
    return Path(_real_dir(os.path.dirname(full)), os.path.basename(full))


def policy_dir() -> Path:
    return rules_dir() / "policy"


def catalog_dir() -> Path:
    return rules_dir() / "catalog"
