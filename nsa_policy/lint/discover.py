"""Which files lint reads: walk the given paths, honour .gitignore files and --exclude patterns
(gitignore syntax), and tell each file's kind from its name."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterator, Optional, cast

from nsa_policy.base.safe_io import read_text

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


MAX_IGNORE_BYTES = 1024 * 1024  # a .gitignore larger than this is not read
MAX_PATTERN = 4096  # characters of one pattern


class Glob:
    """A gitignore glob matched without backtracking: an NFA over the pattern's tokens, run once over the
    path (time: pattern length × path length). A regex with `[^/]*` per `*` backtracks exponentially on a
    pattern like `*a*a*a*a*a*b`, and the linted tree chooses its own .gitignore."""

    def __init__(self, pat: str):
        self.anchored = "/" in pat.rstrip("/")
        pat = pat.lstrip("/")
        toks: list[tuple[str, object]] = []
        i = 0
        while i < len(pat):
            if pat.startswith("**/", i):
                toks.append(("dirs", None))  # zero or more whole folders
                i += 3
            elif pat.startswith("**", i):
                toks.append(("globstar", None))
                i += 2
            elif pat[i] == "*":
                toks.append(("star", None))
                i += 1
            elif pat[i] == "?":
                toks.append(("any1", None))
                i += 1
            elif pat[i] == "[" and (j := pat.find("]", i + 2 if pat[i + 1:i + 2] in ("!", "^", "]") else i + 1)) != -1:
                body = pat[i + 1:j]
                neg = body[:1] in ("!", "^")
                toks.append(("set", (neg, _ranges(body[1:] if neg else body))))
                i = j + 1
            elif pat[i] == "\\" and i + 1 < len(pat):
                toks.append(("lit", pat[i + 1]))
                i += 2
            else:
                toks.append(("lit", pat[i]))
                i += 1
        self.toks = toks

    def _closure(self, states: set[int]) -> set[int]:
        """States reachable without reading: a `*`, `**` or `**/` may match nothing."""
        out, todo = set(states), list(states)
        while todo:
            s = todo.pop()
            if s < len(self.toks) and self.toks[s][0] in ("star", "globstar", "dirs") and s + 1 not in out:
                out.add(s + 1)
                todo.append(s + 1)
        return out

    def match(self, path: str) -> bool:
        """Whether the pattern matches `path` ('/'-separated, relative to the pattern's folder) or a folder it is in."""
        end = len(self.toks)
        states = self._closure({0})
        for ch in path:
            if end in states and ch == "/":
                return True  # the pattern matched a folder this path is inside
            nxt: set[int] = set()
            for s in states:
                if s >= end:
                    continue
                kind, arg = self.toks[s]
                if kind == "lit" and arg == ch:
                    nxt.add(s + 1)
                elif kind in ("any1", "star") and ch != "/":
                    nxt.add(s + 1 if kind == "any1" else s)
                elif kind == "set" and ch != "/" and _in_set(ch, arg):
                    nxt.add(s + 1)
                elif kind == "globstar":
                    nxt.add(s)
                elif kind == "dirs":
                    nxt.add(s)  # inside a folder name of the run …
                    if ch == "/":
                        nxt.add(s + 1)  # … or past its slash
            if not self.anchored and ch == "/":
                nxt.add(0)  # an unanchored pattern matches at any folder level
            states = self._closure(nxt)
            if not states and self.anchored:
                return False
        return end in states


def _ranges(body: str) -> tuple[tuple[str, str], ...]:
    out, i = [], 0
    while i < len(body):
        if i + 2 < len(body) and body[i + 1] == "-":
            out.append((body[i], body[i + 2]))
            i += 3
        else:
            out.append((body[i], body[i]))
            i += 1
    return tuple(out)


def _in_set(ch: str, arg: object) -> bool:
    neg, ranges = cast("tuple[bool, tuple[tuple[str, str], ...]]", arg)
    return any(a <= ch <= b for a, b in ranges) != neg


@dataclass(frozen=True)
class _Pattern:
    glob: Glob
    negate: bool
    dir_only: bool


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
            if len(line) > MAX_PATTERN:
                continue  # no real pattern is this long
            self.patterns.append(_Pattern(Glob(line.rstrip("/") or line), negate, dir_only))

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
            if p.glob.match(rel):
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
    """A folder's .gitignore: a regular file, never through a symbolic link (git does not follow one either),
    size-capped; a FIFO or a device there is never opened for a blocking read."""
    try:
        text = read_text(os.path.join(folder, ".gitignore"), field=".gitignore", max_bytes=MAX_IGNORE_BYTES,
                         follow_symlinks=False)
    except ValueError:  # missing, a link, not a regular file, too large, not UTF-8: no patterns from it
        return None
    return IgnoreRules(folder, text.splitlines())


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
