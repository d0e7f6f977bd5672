"""Validate a YAML document against a pydantic schema; report failures at file:line."""
from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from nsa_policy.base.errors import RuleFileError, closest
from nsa_policy.base.yaml_lines import line_of, load_yaml

M = TypeVar("M", bound=BaseModel)


def validate_doc(schema: type[M], data: Any, path: Path | str) -> M:
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        # An unknown key is usually the cause of a "missing" one beside it (a typo): report it first.
        err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
        loc = [p for p in err["loc"]]
        where = ".".join(str(p) for p in loc) or "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            missing = [str(e["loc"][-1]) for e in errors if e["type"] == "missing" and list(e["loc"][:-1]) == loc[:-1]]
            near = closest(str(loc[-1]), missing) if missing else None
            msg = f"unknown key {loc[-1]!r}" + (f"; did you mean {near!r}?" if near else "")
        elif err["type"] == "missing":
            msg = f"missing key {loc[-1]!r}"
        raise RuleFileError(str(path), line_of(data, loc), f"{where}: {msg}") from None


def load_doc(schema: type[M], path: Path) -> tuple[M, Any]:
    """The validated document and its line-tracked data. A shipped file's result comes from its
    snapshot when the file and the code are unchanged (base/snapshot.py): the same objects, unparsed."""
    from nsa_policy.base import snapshot

    if snapshot.enabled(path):
        try:
            raw = Path(path).read_bytes()
        except OSError:
            raw = None
        if raw is not None:
            return snapshot.cached(path, raw, schema, lambda: _parse(schema, path))
    return _parse(schema, path)


def _parse(schema: type[M], path: Path) -> tuple[M, Any]:
    data = load_yaml(path)
    return validate_doc(schema, data, path), data
