"""`.env` files: KEY=VALUE lines (with `export`, quotes, comments and ${VAR} references)."""
from __future__ import annotations

import re
from typing import Optional

from nsa_policy.lint.confine import OutsideTree, Reader
from nsa_policy.lint.report import EnvValue, FileScan, Launch
from nsa_policy.lint.shell import Expander
from nsa_policy.lint.text import LineIndex
from nsa_policy.lint.tree import ParseError

_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_.\-]*)\s*=\s*(.*?)\s*$")


class EnvSyntaxError(Exception):
    def __init__(self, line: int, text: str):
        super().__init__(f"line {line}: expected KEY=VALUE, got {text.strip()[:60]!r}")
        self.line = line


def parse_env(text: str, path: str) -> dict[str, EnvValue]:
    exp = Expander()
    env: dict[str, EnvValue] = {}
    for ln, line in enumerate(text.splitlines(), start=1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            raise EnvSyntaxError(ln, line)
        key, raw = m.group(1), m.group(2)
        missing: Optional[str] = None
        if raw[:1] in "'\"" and raw[-1:] == raw[:1] and len(raw) >= 2:
            value = raw[1:-1]
            if raw[0] == '"':
                value, missing = exp.expand_plain(value)
        else:
            value = re.sub(r"\s+#.*$", "", raw)
            value, missing = exp.expand_plain(value)
        exp.vars[key] = value
        env[key] = EnvValue(value, _loc(path, ln, line.index(key) + 1), missing)
    return env


def _loc(path: str, line: int, col: int):
    from nsa_policy.lint.report import Location

    return Location(path, line, col)


def read_env_file(full: str, display: str, reader: Reader, shown: Optional[str] = None) -> dict[str, EnvValue]:
    """The variables of an env file another file names. Raises OutsideTree (confine.py) for a path outside
    the linted tree; a file that is no regular UTF-8 file, or no env file, gives nothing here (it is linted,
    and reported, on its own when it is among the linted paths)."""
    try:
        text = reader.read(full, field="env_file", shown=shown)
    except OutsideTree:
        raise
    except (OSError, ValueError):
        return {}
    try:
        return parse_env(text, display)
    except (EnvSyntaxError, ParseError, RecursionError):
        return {}


def scan_env(path: str, text: str, index: LineIndex) -> FileScan:
    """An env file is an environment-only launch: its threshold variables are checked on their own."""
    from nsa_policy.engines.sglang.env import threshold_env_vars

    env = parse_env(text, path)
    scan = FileScan(path)
    relevant = {k: v for k, v in env.items() if k in threshold_env_vars()}
    if relevant:
        first = min(relevant.values(), key=lambda e: e.loc.line)
        scan.launches.append(Launch(path, first.loc, "env", env=env))
    return scan
