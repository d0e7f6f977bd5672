"""The launch model lint works on: where each argument was written, and what lint found there."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass(frozen=True, order=True)
class Location:
    path: str
    line: int  # 1-based
    col: int  # 1-based

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}"


@dataclass
class Arg:
    """One server argument as written: a `--flag value` on a command line or a key in a config file."""

    spelling: str  # as written, without a value: "--kv-cache-dtype", "kv_cache_dtype"
    value: Any  # str from command lines; YAML/JSON/TOML scalars from config files; True for a bare flag
    loc: Location
    style: str = "flag"  # flag | key
    unresolved: Optional[str] = None  # the $VARIABLE a value still depends on, if any

    @property
    def name(self) -> str:
        """The spelling without dashes, with dashes for underscores: kv-cache-dtype."""
        return self.spelling.lstrip("-").replace("_", "-")


@dataclass
class EnvValue:
    value: str
    loc: Location
    unresolved: Optional[str] = None


@dataclass
class Hint:
    """Something the file says about where or how the launch runs (device, model, policy, sglang)."""

    key: str  # device | model | policy | sglang
    value: str
    loc: Location
    source: str  # "comment", "nodeSelector", "affinity", "annotation", "image tag", …


@dataclass
class Launch:
    """One sglang server start (a command line or a config file's arguments) with its environment."""

    path: str
    loc: Location  # where the launch starts: the command word, the config mapping
    kind: str  # shell | dockerfile | kubernetes | compose | config | env
    args: list[Arg] = field(default_factory=list)
    env: dict[str, EnvValue] = field(default_factory=dict)
    hints: list[Hint] = field(default_factory=list)
    engine: str = "sglang"  # the registered engine that runs it (its package's lint.py checks it)
    # words lint cannot see into ("$@", an unset $EXTRA standing alone): each is an NSA409
    unseen: list[tuple[str, Location]] = field(default_factory=list)
    # the lines of the file whose image tags and pins name its release (a Dockerfile stage); None: all
    scope: Optional[tuple[tuple[int, int], ...]] = None


@dataclass(frozen=True)
class Diagnostic:
    code: str
    level: str  # error | warning | info
    message: str
    loc: Location
    fix: str = ""
    alternatives: tuple[str, ...] = ()
    rule: Optional[str] = None  # the policy rule id, for policy findings

    def to_json(self) -> dict:
        return {"path": self.loc.path, "line": self.loc.line, "column": self.loc.col, "code": self.code,
                "level": self.level, "message": self.message, "fix": self.fix,
                "alternatives": list(self.alternatives), "rule": self.rule}


OUTSIDE_FIX = "Keep the file inside the linted tree, or lint the folder that holds it too."


def finding(code: str, message: str, loc: Location, fix: Optional[str] = None) -> Diagnostic:
    """A diagnostic at its code's documented level and fix (rules/codes.yaml)."""
    from nsa_policy.catalog.codes import load_codes

    doc = load_codes().codes[code]
    return Diagnostic(code, doc.level, message, loc, fix if fix is not None else doc.fix)


@dataclass
class FileScan:
    """What an extractor found in one file."""

    path: str
    launches: list[Launch] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    unreadable: bool = False
