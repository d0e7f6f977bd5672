"""YAML loading that remembers line numbers, so schema errors can say file:line."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import yaml

from nsa_policy.base.errors import RuleFileError
from nsa_policy.base.safe_io import UnsafeInput, check_digits, check_yaml_text, read_text

_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class LineDict(dict[Any, Any]):
    """A mapping that knows the line it starts on and the line of each key."""

    line: int = 0
    key_lines: dict[Any, int]


class LineList(list[Any]):
    line: int = 0
    item_lines: list[int]


class _Loader(_Base):  # type: ignore[misc, valid-type]
    pass


def _mapping(loader: _Loader, node: yaml.MappingNode) -> LineDict:
    out = LineDict()
    out.line = node.start_mark.line + 1
    out.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if isinstance(key, (list, dict)):  # unhashable: would escape as a TypeError without a line
            raise RuleFileError(str(getattr(loader, "name", node.start_mark.name)), key_node.start_mark.line + 1,
                                "a mapping key must be a plain value, not a list or mapping")
        if key in out:
            raise RuleFileError(str(getattr(loader, "name", node.start_mark.name)), key_node.start_mark.line + 1,
                                f"duplicate key {key!r}")
        out[key] = loader.construct_object(value_node, deep=True)
        out.key_lines[key] = key_node.start_mark.line + 1
    return out


def _sequence(loader: _Loader, node: yaml.SequenceNode) -> LineList:
    out = LineList(loader.construct_object(child, deep=True) for child in node.value)
    out.line = node.start_mark.line + 1
    out.item_lines = [child.start_mark.line + 1 for child in node.value]
    return out


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _sequence)


def _shipped(path: Path) -> bool:
    from nsa_policy.base.paths import packaged_rules_dir

    shipped = packaged_rules_dir()
    return shipped is not None and Path(path).resolve().is_relative_to(shipped)


def load_yaml(path: Path) -> Any:
    """A rule, catalog or test file: a regular UTF-8 file within the size, depth and alias limits."""
    try:
        text = read_text(path, field=str(path))
        if not _shipped(path):  # the wheel's own rules are part of the program; anything else is input
            check_yaml_text(text, str(path), field=str(path))
            check_digits(text, str(path), field=str(path))
    except UnsafeInput as exc:
        where = str(exc.value)  # "path:line" for a bad byte, else the path
        name, _, line = where.rpartition(":") if where.rpartition(":")[2].isdigit() else (where, "", "")
        raise RuleFileError(name or str(path), int(line) if line else None, exc.hint or str(exc)) from None
    try:
        loader = _Loader(text)
        loader.name = str(path)
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise RuleFileError(str(path), mark.line + 1 if mark else None, f"not valid YAML: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise RuleFileError(str(path), None, f"not valid YAML: {exc}") from None


def line_of(data: Any, loc: Sequence[Any]) -> int | None:
    """The line of the deepest node along a pydantic error location."""
    line = getattr(data, "line", None)
    node = data
    for part in loc:
        if isinstance(node, LineDict) and part in node:
            line = node.key_lines.get(part, line)
            node = node[part]
        elif isinstance(node, LineList) and isinstance(part, int) and 0 <= part < len(node):
            line = node.item_lines[part]
            node = node[part]
        else:
            break
        line = getattr(node, "line", line) if isinstance(node, (LineDict, LineList)) else line
    return line
