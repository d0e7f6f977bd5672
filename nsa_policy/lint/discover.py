"""Which files lint reads: walk the given paths, honour .gitignore files and --exclude patterns
(gitignore syntax), and tell each file's kind from its name."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Iterator, Optional

ALWAYS_SKIPPED_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", ".tox",
                                 ".mypy_cache", ".pytest_cache", ".ruff_cache"})
_EXT = {".sh": "shell", ".bash": "shell", ".zsh": "shell", ".yaml": "yaml", ".yml": "yaml", ".json": "json",
        ".toml": "toml", ".env": "env", ".dockerfile": "dockerfile"}


def classify(name: str) -> Optional[str]:
    """shell | dockerfile | yaml | json | toml | env | maybe-shell (no extension: check the #! line) | None."""
    lower = name.lower()
    if lower in ("dockerfile", "containerfile") or lower.startswith(("dockerfile.", "containerfile.")):
        return "dockerfile"
    if lower == ".env" or lower.startswith(".env.") or lower.endswith(".env"):
        return "env"
    ext = os.path.splitext(lower)[1]
    if ext in _EXT:
        return _EXT[ext]
    if not ext and not lower.startswith("."):
        return "maybe-shell"
    return None


@dataclass(frozen=True)
class _Pattern:
    regex: re.Pattern
    negate: bool
    dir_only: bool


def _translate(pat: str) -> str:
    """gitignore glob → regex over a '/'-separated path relative to the pattern's folder."""
    anchored = "/" in pat.rstrip("/")
    pat = pat.lstrip("/")
    out, i = [], 0
    while i < len(pat):
        if pat.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pat.startswith("/**", i) and i + 3 == len(pat):
            out.append("/.*")
            i += 3
        elif pat.startswith("**", i):
            out.append(".*")
            i += 2
        elif pat[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pat[i] == "?":
            out.append("[^/]")
            i += 1
        elif pat[i] == "[":
            j = pat.find("]", i + 1)
            if j == -1:
                out.append(re.escape(pat[i]))
                i += 1
            else:
                body = pat[i + 1:j].replace("\\", "\\\\")
                out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
                i = j + 1
        else:
            out.append(re.escape(pat[i]))
            i += 1
    body = "".join(out)
    return ("^" if anchored else "^(?:.*/)?") + body + "(?:/.*)?$"


class IgnoreRules:
    """The patterns of one .gitignore (or of --exclude), relative to `base`."""

    def __init__(self, base: str, lines: list[str]):
        self.base = base
        self.patterns: list[_Pattern] = []
        for raw in lines:
            line = raw.rstrip("\n").rstrip()
            if not line or line.startswith("#"):
                continue
            negate = line.startswith("!")
            if negate:
                line = line[1:]
            line = line.replace("\\#", "#").replace("\\!", "!")
            dir_only = line.endswith("/")
            self.patterns.append(_Pattern(re.compile(_translate(line.rstrip("/") or line)), negate, dir_only))

    def verdict(self, path: str, is_dir: bool) -> Optional[bool]:
        """True: ignored, False: re-included by '!', None: these patterns say nothing.

        The walk never enters an ignored folder, so a pattern only needs to match the entry itself.
        """
        rel = os.path.relpath(path, self.base).replace(os.sep, "/")
        if rel.startswith("../"):
            return None
        result = None
        for p in self.patterns:
            if p.dir_only and not is_dir:
                continue
            if p.regex.match(rel):
                result = not p.negate
        return result


def _ignored(path: str, is_dir: bool, rules: list[IgnoreRules], exclude: Optional[IgnoreRules]) -> bool:
    if exclude is not None and exclude.verdict(path, is_dir):
        return True
    verdict = None
    for r in rules:
        v = r.verdict(path, is_dir)
        if v is not None:
            verdict = v
    return bool(verdict)


def _read_gitignore(folder: str) -> Optional[IgnoreRules]:
    try:
        with open(os.path.join(folder, ".gitignore"), encoding="utf-8") as fh:
            return IgnoreRules(folder, fh.readlines())
    except (OSError, UnicodeDecodeError):
        return None


def iter_files(paths: list[str], excludes: list[str], use_gitignore: bool = True) -> Iterator[tuple[str, str]]:
    """(path, kind) for each file to lint, in a stable order. Named files are linted unless --exclude'd."""
    exclude = IgnoreRules(os.getcwd(), excludes) if excludes else None
    for top in paths:
        if os.path.isfile(top):
            kind = classify(os.path.basename(top)) or "unknown"
            if not _ignored(os.path.abspath(top), False, [], exclude):
                yield top, kind
            continue
        if not os.path.isdir(top):  # a FIFO, device or socket named on the command line: reported, never read
            yield top, "unreadable"
            continue
        yield from _walk(top, exclude, use_gitignore)


def _walk(top: str, exclude: Optional[IgnoreRules], use_gitignore: bool) -> Iterator[tuple[str, str]]:
    rules: list[IgnoreRules] = []
    if use_gitignore:  # .gitignore files in the folders above the starting one, up to the repository root
        cur = os.path.abspath(top)
        while True:
            parent = os.path.dirname(cur)
            if parent == cur:
                break
            cur = parent
            r = _read_gitignore(cur)
            if r:
                rules.insert(0, r)
            if os.path.isdir(os.path.join(cur, ".git")):
                break
    stack = [(top, rules)]
    while stack:
        folder, rules = stack.pop()
        if use_gitignore:
            r = _read_gitignore(folder)
            if r:
                rules = rules + [r]
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            yield folder, "unreadable"  # silently skipping it would report a tree clean that was not read
            continue
        subdirs = []
        for e in entries:
            absf = os.path.abspath(e.path)
            if e.is_dir(follow_symlinks=False):
                if e.name in ALWAYS_SKIPPED_DIRS or _ignored(absf, True, rules, exclude):
                    continue
                subdirs.append((e.path, rules))
            elif e.is_file(follow_symlinks=False):
                kind = classify(e.name)
                if kind is None or _ignored(absf, False, rules, exclude):
                    continue
                yield e.path, kind
        stack.extend(reversed(subdirs))
