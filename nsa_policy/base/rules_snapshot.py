"""The shipped rule and catalog YAML, parsed once at wheel build time (hatch_build.py), with line numbers.

Parsing the YAML with line tracking is a third of the first decision's cost in a fresh process (each
engine process the plugins run in starts cold). The wheel carries `nsa_policy/_rules_snapshot.pickle`:
for every shipped .yaml file, the sha256 of its bytes and its parsed value (LineDict / LineList, as
yaml_lines.load_yaml returns it). load_yaml uses an entry only for a shipped file whose bytes still
hash to the recorded digest, so an edited file is parsed again; a checkout has no snapshot.
The snapshot is the package's own file, written by its build: as trusted as its code.
"""
from __future__ import annotations

import hashlib
import pickle
from pathlib import Path
from typing import Any, Optional

SNAPSHOT = Path(__file__).resolve().parent.parent / "_rules_snapshot.pickle"
FORMAT = 1
MISS = object()  # no usable entry: parse the file
_loaded: list[Optional[dict[str, tuple[str, bytes]]]] = []


def build(parsed: dict[str, tuple[bytes, Any]]) -> bytes:
    """The snapshot of `parsed`: path under rules/ -> (the file's bytes, load_yaml's value). The wheel build
    (hatch_build.py) parses with yaml_lines.parse_yaml; this module does not import it (the loader imports this)."""
    files = {key: (hashlib.sha256(raw).hexdigest(), pickle.dumps(value, protocol=4))
             for key, (raw, value) in sorted(parsed.items())}
    return pickle.dumps({"format": FORMAT, "files": files}, protocol=4)


def _files() -> Optional[dict[str, tuple[str, bytes]]]:
    if not _loaded:
        found = None
        try:
            data = pickle.loads(SNAPSHOT.read_bytes())
            if isinstance(data, dict) and data.get("format") == FORMAT:
                found = data["files"]
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, KeyError):
            found = None  # absent (a checkout) or unreadable: parse the YAML
        _loaded.append(found)
    return _loaded[0]


def available() -> bool:
    """This installation has a snapshot (a wheel built with hatch_build.py; a checkout has none)."""
    return bool(_files())


def lookup(path: Path, raw: bytes, shipped: Path) -> Any:
    """The parsed value of shipped file `path` (its bytes `raw`), or MISS."""
    files = _files()
    if not files:
        return MISS
    try:
        key = Path(path).resolve().relative_to(shipped).as_posix()
    except ValueError:
        return MISS
    entry = files.get(key)
    if entry is None or entry[0] != hashlib.sha256(raw).hexdigest():
        return MISS
    return pickle.loads(entry[1])  # a fresh value per call, as parsing gives
