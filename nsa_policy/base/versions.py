"""Versions and package names as the packaging ecosystem defines them (PEP 440, PEP 503).

One comparator serves `--package`, `--device auto`'s package reading, the rules' version_ge /
version_lt conditions and lint's `sglang=` hint, so `0.6.13rc1 < 0.6.13 < 0.6.13.post1` and
`0.6.7+cu130` counts as 0.6.7 everywhere.
"""
from __future__ import annotations

import re
from functools import lru_cache

from packaging.version import InvalidVersion, Version

from nsa_policy.base.errors import InputError

_SEPARATORS = re.compile(r"[-_.]+")


def canonical_name(name: str) -> str:
    """PEP 503: `FlashInfer_Python` and `flashinfer.python` are the distribution `flashinfer-python`."""
    return _SEPARATORS.sub("-", name.strip()).lower()


@lru_cache(maxsize=1024)
def _parse(text: str) -> Version:
    return Version(text)


def parse_version(text: object, *, field: str = "version") -> Version:
    """A PEP 440 version, or an InputError naming the field and the value."""
    if not isinstance(text, str) or not text.strip():
        raise InputError(field, text, hint="a PEP 440 version such as 0.6.7.post2 is expected")
    try:
        return _parse(text.strip())
    except InvalidVersion:
        raise InputError(field, text, hint="not a PEP 440 version (e.g. 0.6.7, 0.6.7.post2, 0.6.13rc1)") from None
    except ValueError:  # a release segment of more digits than int() converts (CPython's 4300-digit limit)
        raise InputError(field, text[:40] + "…", hint="a version segment with too many digits") from None


def is_version(text: object) -> bool:
    try:
        parse_version(text)
    except InputError:
        return False
    return True


def version_ge(have: str, need: str) -> bool:
    """have >= need under PEP 440; the local label (+cu130) does not count, as pip's specifiers ignore it."""
    return _release_of(parse_version(have)) >= _release_of(parse_version(need))


def version_lt(have: str, need: str) -> bool:
    return not version_ge(have, need)


def _release_of(v: Version) -> Version:
    return _parse(v.public)
