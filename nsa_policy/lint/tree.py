"""One positioned tree for YAML, JSON and TOML documents: every key and value knows its line:col.

YAML comes from PyYAML's composer (marks), JSON from a small parser here (the standard library
gives no positions), TOML from tomllib plus a line scan that finds where each key was written.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

import yaml

from nsa_policy.base.safe_io import MAX_DEPTH, UnsafeInput, check_yaml_text, load_toml_text
from nsa_policy.lint.text import LineIndex


class ParseError(Exception):
    def __init__(self, message: str, line: Optional[int] = None, col: Optional[int] = None):
        super().__init__(message)
        self.line, self.col = line, col


@dataclass
class N:
    kind: str  # map | seq | scalar
    line: int
    col: int
    value: Any = None  # scalars: the typed value
    pairs: list[tuple[N, N]] = field(default_factory=list)
    items: list[N] = field(default_factory=list)
    start: int = -1  # absolute offsets of a scalar's source text, when known
    end: int = -1
    style: Optional[str] = None  # YAML scalar style: None plain, ' " | >

    def get(self, key: str) -> Optional[N]:
        for k, v in self.pairs:
            if k.value == key:
                return v
        return None

    def walk(self) -> Iterator[N]:
        yield self
        for _key, v in self.pairs:
            yield from v.walk()
        for it in self.items:
            yield from it.walk()


# YAML ------------------------------------------------------------------------------------------
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_BOOL = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}


def _yaml_scalar(node: yaml.ScalarNode) -> Any:
    tag, v = node.tag, node.value
    if tag.endswith(":int"):
        try:
            return int(v.replace("_", ""), 0)
        except ValueError:
            return v
    if tag.endswith(":bool"):
        return _BOOL.get(v.lower(), v)
    if tag.endswith(":null"):
        return None
    if tag.endswith(":float"):
        try:
            return float(v.replace("_", ""))
        except ValueError:
            return v
    return v


def _from_yaml(node: yaml.Node, index: LineIndex) -> N:
    line, col = node.start_mark.line + 1, node.start_mark.column + 1
    if isinstance(node, yaml.MappingNode):
        return N("map", line, col, pairs=[(_from_yaml(k, index), _from_yaml(v, index)) for k, v in node.value])
    if isinstance(node, yaml.SequenceNode):
        return N("seq", line, col, items=[_from_yaml(v, index) for v in node.value])
    start = index.offset(line, col)
    end = index.offset(node.end_mark.line + 1, node.end_mark.column + 1)
    return N("scalar", line, col, value=_yaml_scalar(node), start=start, end=end, style=node.style)


def refused(exc: UnsafeInput) -> ParseError:
    """A safe_io refusal as a ParseError, at the line its value names (`name:line`) when it names one."""
    m = re.search(r":(\d+)$", str(exc.value))
    return ParseError(f"refused: {exc.hint}", int(m.group(1)) if m else None)


def yaml_documents(text: str, index: LineIndex) -> list[N]:
    try:
        check_yaml_text(text, "YAML")  # alias bombs and deep nesting, before anything composes or walks it
    except UnsafeInput as exc:
        raise refused(exc) from None
    try:
        nodes = list(yaml.compose_all(text, Loader=_Loader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise ParseError(f"not valid YAML: {exc.problem or exc}", mark.line + 1 if mark else None,
                         mark.column + 1 if mark else None) from None
    except yaml.YAMLError as exc:  # any PyYAML release's error class
        raise ParseError(f"not valid YAML: {exc}") from None
    except RecursionError:
        raise ParseError(f"refused: nests deeper than {MAX_DEPTH} levels") from None
    return [_from_yaml(n, index) for n in nodes if n is not None]


def merged_pairs(node: N) -> list[tuple[N, N]]:
    """A YAML mapping's pairs with its merge keys (`<<: *base`, `<<: [*a, *b]`) applied, as YAML 1.1 reads
    them: the mapping's own keys win, then the merged mappings in order. Without merge keys: node.pairs."""
    if not any(k.value == "<<" and not k.style for k, _ in node.pairs):
        return node.pairs
    own = [(k, v) for k, v in node.pairs if not (k.value == "<<" and not k.style)]
    seen = {k.value for k, _ in own if isinstance(k.value, (str, int, float, bool))}
    merged: list[tuple[N, N]] = []
    for k, v in node.pairs:
        if not (k.value == "<<" and not k.style):
            continue
        sources = [v] if v.kind == "map" else [i for i in v.items if i.kind == "map"] if v.kind == "seq" else []
        for src in sources:
            for mk, mv in merged_pairs(src):
                if isinstance(mk.value, (str, int, float, bool)) and mk.value in seen:
                    continue
                seen.add(mk.value)
                merged.append((mk, mv))
    return merged + own


def scalar_source(node: N, text: str) -> Optional[tuple[str, int]]:
    """The scalar's source text as shell words can be read from it, with its absolute offset.

    Same length as the source, so word offsets stay true: folded styles turn newlines into spaces.
    """
    if node.start < 0:
        return None
    s, e = node.start, node.end
    if node.style in ("|", ">"):
        nl = text.find("\n", s)
        if nl == -1 or nl >= e:
            return None
        s = nl + 1
        chunk = text[s:e]
        return (chunk if node.style == "|" else chunk.replace("\n", " ")), s
    if node.style in ("'", '"'):
        s, e = s + 1, e - 1
    chunk = text[s:e]
    if node.style == '"' and "\\" in chunk:
        return None  # escapes (\" \x73 \n): the source is not the value; callers read the value itself
    if node.style == "'":
        chunk = chunk.replace("''", "' ")  # keeps the length; an escaped quote is not a word break
    return chunk.replace("\n", " "), s


# JSON ------------------------------------------------------------------------------------------
_WS = re.compile(r"[ \t\r\n]*")
_NUM = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_STR = re.compile(r'"(?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"')


class _Json:
    def __init__(self, text: str, index: LineIndex):
        self.t, self.ix, self.i = text, index, 0
        self.depth = 0  # nesting so far: the parser recurses per level, so it is bounded

    def nested(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.fail(f"nests deeper than {MAX_DEPTH} levels")

    def fail(self, msg: str) -> ParseError:
        loc = self.ix.loc("", min(self.i, len(self.t)))
        return ParseError(f"not valid JSON: {msg}", loc.line, loc.col)

    def ws(self) -> None:
        m = _WS.match(self.t, self.i)  # \s* always matches
        self.i = m.end() if m else self.i

    def value(self) -> N:
        self.ws()
        if self.i >= len(self.t):
            raise self.fail("unexpected end of file")
        c = self.t[self.i]
        loc = self.ix.loc("", self.i)
        if c == "{":
            self.nested()
            node = N("map", loc.line, loc.col)
            self.i += 1
            self.ws()
            if self.t.startswith("}", self.i):
                self.i += 1
                self.depth -= 1
                return node
            while True:
                self.ws()
                if not self.t.startswith('"', self.i):
                    raise self.fail("expected a string key")
                key = self.value()
                self.ws()
                if not self.t.startswith(":", self.i):
                    raise self.fail("expected ':'")
                self.i += 1
                node.pairs.append((key, self.value()))
                self.ws()
                if self.t.startswith(",", self.i):
                    self.i += 1
                    continue
                if self.t.startswith("}", self.i):
                    self.i += 1
                    self.depth -= 1
                    return node
                raise self.fail("expected ',' or '}'")
        if c == "[":
            self.nested()
            node = N("seq", loc.line, loc.col)
            self.i += 1
            self.ws()
            if self.t.startswith("]", self.i):
                self.i += 1
                self.depth -= 1
                return node
            while True:
                node.items.append(self.value())
                self.ws()
                if self.t.startswith(",", self.i):
                    self.i += 1
                    continue
                if self.t.startswith("]", self.i):
                    self.i += 1
                    self.depth -= 1
                    return node
                raise self.fail("expected ',' or ']'")
        if c == '"':
            m = _STR.match(self.t, self.i)
            if not m:
                raise self.fail("bad string")
            self.i = m.end()
            return N("scalar", loc.line, loc.col, value=json.loads(m.group(0)), start=m.start(), end=m.end(), style='"')
        for word, val in (("true", True), ("false", False), ("null", None)):
            if self.t.startswith(word, self.i):
                self.i += len(word)
                return N("scalar", loc.line, loc.col, value=val)
        m = _NUM.match(self.t, self.i)
        if m:
            self.i = m.end()
            txt = m.group(0)
            try:
                number = float(txt) if any(ch in txt for ch in ".eE") else int(txt)
            except ValueError:  # more digits than int() converts
                raise ParseError(f"not valid JSON: a number of {len(txt)} characters", loc.line, loc.col) from None
            return N("scalar", loc.line, loc.col, value=number)
        raise self.fail(f"unexpected {c!r}")


def json_document(text: str, index: LineIndex) -> N:
    p = _Json(text, index)
    node = p.value()
    p.ws()
    if p.i != len(text):
        raise p.fail("extra data after the document")
    return node


# TOML ------------------------------------------------------------------------------------------
_TABLE = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?")
_KEYLINE = re.compile(r"^(\s*)((?:[A-Za-z0-9_\-]+|\"[^\"]*\"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_\-]+|\"[^\"]*\"|'[^']*'))*)\s*=")


def _split_key(key: str) -> tuple[str, ...]:
    parts = re.findall(r"\"[^\"]*\"|'[^']*'|[A-Za-z0-9_\-]+", key)
    return tuple(p[1:-1] if p[:1] in "\"'" else p for p in parts)


def _toml_module():
    try:
        import tomllib  # Python 3.11+
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib
        except ModuleNotFoundError:
            raise ParseError("reading TOML needs Python 3.11+ (tomllib) or the tomli package") from None
    return tomllib


def toml_document(text: str, index: LineIndex) -> N:
    tomllib = _toml_module()
    try:
        data = load_toml_text(text, "TOML")
    except UnsafeInput as exc:
        raise refused(exc) from None
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+), column (\d+)", str(exc))
        raise ParseError(f"not valid TOML: {exc}", int(m.group(1)) if m else None,
                         int(m.group(2)) if m else None) from None
    # Where each key path was first written, and the offset of its value.
    where: dict[tuple[str, ...], tuple[int, int, int]] = {}
    table: tuple[str, ...] = ()
    for ln, line in enumerate(text.split("\n"), start=1):
        m = _TABLE.match(line)
        if m:
            table = _split_key(m.group(2))
            where.setdefault(table, (ln, m.start(2) + 1, -1))
            continue
        m = _KEYLINE.match(line)
        if m:
            path = table + _split_key(m.group(2))
            where.setdefault(path, (ln, len(m.group(1)) + 1, index.offset(ln, 1) + m.end()))
    return _from_toml(data, (), where, text, index, (1, 1, -1))


def _from_toml(value: Any, path: tuple[str, ...], where: dict, text: str, index: LineIndex,
               at: tuple[int, int, int]) -> N:
    line, col, voff = at
    if isinstance(value, dict):
        node = N("map", line, col)
        for k, v in value.items():
            kat = where.get(path + (k,), (line, col, -1))
            node.pairs.append((N("scalar", kat[0], kat[1], value=k), _from_toml(v, path + (k,), where, text, index, kat)))
        return node
    if isinstance(value, list):
        node = N("seq", line, col)
        pos = voff
        for item in value:
            iat = (line, col, -1)
            if isinstance(item, str) and pos >= 0:  # find the item's literal after the previous one
                hit = _find_string(text, item, pos)
                if hit is not None:
                    l2 = index.loc("", hit)
                    iat, pos = (l2.line, l2.col, hit), hit + 1
            node.items.append(_from_toml(item, path, where, text, index, iat))
        return node
    if voff >= 0:
        m = _WS.match(text, voff)
        voff = m.end() if m else voff
        l2 = index.loc("", voff)
        line, col = l2.line, l2.col
    node = N("scalar", line, col, value=value)
    if isinstance(value, str) and voff >= 0 and text[voff:voff + 1] in "\"'" and "\n" not in value:
        q = text[voff]
        end = text.find(q, voff + 1)
        if end != -1 and text[voff + 1:end] == value:
            node.start, node.end, node.style = voff, end + 1, q
    return node


def _find_string(text: str, value: str, pos: int) -> Optional[int]:
    for q in ('"', "'"):
        hit = text.find(q + value + q, pos)
        if hit != -1:
            return hit
    return None
