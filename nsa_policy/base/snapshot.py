"""Validated snapshots of the shipped rule and catalog files, so that a fresh process need not parse
and validate them again (issue 20: cold start).

The shipped rules are program code, as the .py files are; their snapshot is kept like Python keeps
bytecode: in the package's `__snapshot__/` when that folder is writable, else in the user's cache
(`$XDG_CACHE_HOME/nsa-policy`, default `~/.cache/nsa-policy`), else nowhere. A snapshot is used only
when its key matches, and the key covers everything the result depends on:
- the file's bytes (sha256),
- the schema class (module and name), the nsa_policy version and the source files of the modules
  that define schemas (their size and mtime, as a .pyc's header does),
- the pydantic and Python versions.
Anything else (a user's rule folder, NSA_POLICY_RULES_DIR, a linted file) is input and is parsed
and validated every time. NSA_POLICY_NO_SNAPSHOT=1 turns snapshots off. A snapshot that cannot be
read or written is ignored: the file is parsed instead, never a different answer.
"""
from __future__ import annotations

import hashlib
import os
import pickle
import sys
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

from nsa_policy.base.gc_pause import paused

T = TypeVar("T")

_FORMAT = 1
_OFF_VAR = "NSA_POLICY_NO_SNAPSHOT"
_PACKAGE = Path(__file__).resolve().parent.parent  # nsa_policy/


@lru_cache(maxsize=1)
def _code_key() -> str:
    """What the schemas' code is: version, interpreter, pydantic, and each package module's stat."""
    import pydantic

    parts = [str(_FORMAT), pydantic.VERSION, sys.version]
    package = _PACKAGE
    # __init__.py holds the version; the rest define the schemas and what they validate with
    for path in [package / "__init__.py"] + [p for sub in ("base", "core", "catalog", "engines")
                                             for p in sorted((package / sub).rglob("*.py"))]:
        try:
            st = path.stat()
        except OSError:
            continue
        parts.append(f"{path.relative_to(package)}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


@lru_cache(maxsize=1)
def _folders() -> tuple[Path, ...]:
    # inside the package, as __pycache__ is (git-ignored, so a wheel built from a checkout never carries one)
    out = [_PACKAGE / "__snapshot__"]
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    out.append(Path(cache) / "nsa-policy")
    return tuple(out)


def enabled(path: Path) -> bool:
    """Snapshots are for the shipped rules only (program code), and can be switched off."""
    if os.environ.get(_OFF_VAR, "").strip() not in ("", "0"):
        return False
    from nsa_policy.base.paths import packaged_rules_dir, real_path

    shipped = packaged_rules_dir()
    try:
        return shipped is not None and real_path(path).is_relative_to(shipped)
    except OSError:
        return False


def cached(path: Path, text: bytes, schema: type, build: Callable[[], T]) -> T:
    """build(), or the snapshot of its result for these bytes and this schema."""
    from nsa_policy.base.paths import real_path

    key = hashlib.sha256(b"\0".join([_code_key().encode(), f"{schema.__module__}.{schema.__qualname__}".encode(),
                                     str(real_path(path)).encode(), text])).hexdigest()
    return _lookup(key, build)


def cached_over_rules(label: str, build: Callable[[], T]) -> T:
    """build(), or the snapshot of its result, for a value that may read any shipped rule file (a
    compiled bundle: its chain, the catalog, the codes). The key covers the code and every file of
    the shipped rules by path, size and mtime, as a .pyc's header covers its source."""
    from nsa_policy.base.paths import packaged_rules_dir

    shipped = packaged_rules_dir()
    if shipped is None or os.environ.get(_OFF_VAR, "").strip() not in ("", "0"):
        return build()
    parts = [_code_key(), label]
    _stat_tree(str(shipped), "", parts)
    return _lookup(hashlib.sha256("\n".join(parts).encode()).hexdigest(), build)


def _stat_tree(folder: str, rel: str, parts: list[str]) -> None:
    """Append "relative path:size:mtime" for every file below folder, in sorted order. scandir, not
    os.walk + relpath: this runs in every plugin process's first decision (issue 22's budget)."""
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=True):
                _stat_tree(entry.path, f"{rel}{entry.name}/", parts)
                continue
            st = entry.stat()
        except OSError:
            continue
        parts.append(f"{rel}{entry.name}:{st.st_size}:{st.st_mtime_ns}")


def _lookup(key: str, build: Callable[[], T]) -> T:
    name = f"{key[:40]}.pickle"
    for folder in _folders():
        found = _read(folder / name, key)
        if found is not None:
            return found[1]
    value = build()
    for folder in _folders():
        if _write(folder, name, (key, value)):
            break
    return value


def _read(path: Path, key: str) -> Optional[tuple[str, Any]]:
    try:
        with open(path, "rb") as fh, paused():
            found = pickle.load(fh)
    except FileNotFoundError:
        return None
    except Exception:  # noqa: BLE001 - a stale or damaged snapshot is parsed again, never trusted
        return None
    if not (isinstance(found, tuple) and len(found) == 2 and found[0] == key):
        return None
    return found


def _write(folder: Path, name: str, value: Any) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".pickle")
        try:
            with os.fdopen(fd, "wb") as fh:
                pickle.dump(value, fh, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, folder / name)  # atomic: a reader sees the old file or the whole new one
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        return True
    except Exception:  # noqa: BLE001 - a read-only install or a full disk: no snapshot, same answer
        return False
