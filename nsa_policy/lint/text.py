"""Offsets to line:column, and the `nsa-policy: key=value` hints a file may carry in comments."""
from __future__ import annotations

import os
import re
from bisect import bisect_right
from functools import lru_cache
from typing import TYPE_CHECKING

from nsa_policy.lint.report import Hint, Location

if TYPE_CHECKING:  # pragma: no cover
    from nsa_policy.lint.confine import Reader

_HINT = re.compile(r"#[^\n]*?nsa-policy:[ \t]*([^\n]*)")  # in a comment only: values in data are read per document
_PAIR = re.compile(r"([A-Za-z_-]+)\s*=\s*([^\s,;'\"]+)")


def hint_keys() -> tuple[str, ...]:
    """What a hint may name: the device, the model, the policy, and each engine's release (`sglang=X.Y.Z`)."""
    from nsa_policy import engines

    return ("device", "model", "policy") + engines.names()


@lru_cache(maxsize=1)
def _pins() -> tuple[tuple[str, re.Pattern, re.Pattern], ...]:
    """(engine, image regex, pin regex) for each engine: where deployment files name its release."""
    from nsa_policy import engines

    return tuple((e.name, re.compile(image), re.compile(pin)) for e in engines.every() for image, pin in e.image_pins())


class LineIndex:
    """Absolute character offset ↔ 1-based line and column."""

    def __init__(self, text: str):
        self.text = text
        starts = [0]
        find = text.find
        pos = find("\n")
        while pos != -1:
            starts.append(pos + 1)
            pos = find("\n", pos + 1)
        self.starts = starts

    def loc(self, path: str, offset: int) -> Location:
        i = bisect_right(self.starts, offset) - 1
        return Location(path, i + 1, offset - self.starts[i] + 1)

    def offset(self, line: int, col: int) -> int:
        """From 1-based line and column."""
        return self.starts[line - 1] + col - 1


class FixedIndex(LineIndex):
    """Text whose characters all stand at one place of a file: a decoded string (JSON or YAML escapes,
    a shell string the outer shell rewrote), whose own offsets are not the file's."""

    def __init__(self, text: str, at: Location):
        super().__init__(text)
        self.at = at

    def loc(self, path: str, offset: int) -> Location:
        return self.at


def comment_hints(text: str, index: LineIndex, path: str) -> tuple[list[Hint], list[tuple[str, str, Location]]]:
    """Hints from `# nsa-policy: device=b200 model=… policy=… sglang=…` comments anywhere in the text, and the
    version of sglang the file targets from an image tag or a pip pin. Returns (hints, bad keys)."""
    hints: list[Hint] = []
    bad: list[tuple[str, str, Location]] = []
    keys = hint_keys()
    if "nsa-policy:" in text:
        for m in _HINT.finditer(text):
            for pm in _PAIR.finditer(m.group(1)):
                key, value = pm.group(1).lower(), pm.group(2)
                loc = index.loc(path, m.start(1) + pm.start())
                if key in keys:
                    hints.append(Hint(key, value, loc, "comment"))
                else:
                    bad.append((key, value, loc))
    for engine, image, pin in _pins():
        if engine not in text:
            continue
        for m in image.finditer(text):
            tag = m.group(1) + ":" + text[m.end(1) + 1:m.end()]
            hints.append(Hint(engine, m.group(2), index.loc(path, m.start()), f"image tag {tag}"))
        for m in pin.finditer(text):
            hints.append(Hint(engine, m.group(1), index.loc(path, m.start()), f"pin {engine}=={m.group(1)}"))
    return hints, bad


REQUIREMENTS = "requirements.txt"


def requirements_pins(base_dir: str, path: str, reader: Reader) -> list[Hint]:
    """Each engine's pins in a requirements.txt beside the file (the image or venv the launch runs in is
    built from it). Weaker than the file's own hints, tags and pins, which come first in the list. Read
    only inside the linted tree (`reader`)."""
    from nsa_policy.base.errors import InputError

    full = os.path.join(base_dir, REQUIREMENTS)
    if not reader.exists(full):
        return []
    try:
        text = reader.read(full, field="requirements")
    except (InputError, OSError):
        return []  # unreadable: no pin, the file's own checks still run
    shown = os.path.join(os.path.dirname(path), REQUIREMENTS)
    index = LineIndex(text)
    out = []
    for engine, _image, pin in _pins():
        for m in pin.finditer(text):
            loc = index.loc(shown, m.start())
            if text[index.starts[loc.line - 1]:m.start()].lstrip().startswith("#"):
                continue  # a commented-out pin
            out.append(Hint(engine, m.group(1), loc, f"pin {engine}=={m.group(1)} in {shown}"))
    return out
