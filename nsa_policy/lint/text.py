"""Offsets to line:column, and the `nsa-policy: key=value` hints a file may carry in comments."""
from __future__ import annotations

import os
import re
from bisect import bisect_right

from nsa_policy.lint.report import Hint, Location

HINT_KEYS = ("device", "model", "policy", "sglang", "vllm")
_HINT = re.compile(r"#[^\n]*?nsa-policy:[ \t]*([^\n]*)")  # in a comment only: values in data are read per document
_PAIR = re.compile(r"([A-Za-z_-]+)\s*=\s*([^\s,;'\"]+)")
# The release a file targets: an sglang image tag (lmsysorg/sglang:v0.5.23-cu129 in a Dockerfile FROM,
# a Kubernetes/compose `image:`), or a pin (sglang==0.5.23 in a requirements file or a `pip install`).
_VERSION = r"(\d+\.\d+(?:\.\d+)?(?:\.post\d+|rc\d+)?)"
_IMAGE = re.compile(r"(?<![\w.:/-])((?:[\w.-]+(?::\d+)?/)*sglang):v?" + _VERSION + r"(?![\w.])([\w.-]*)")
_PIN = re.compile(r"(?<![\w.-])sglang(?:\[[^\]\n]*\])?[ \t]*==[ \t]*" + _VERSION + r"(?![\w.+])")
# The vLLM release: its OpenAI-server image (vllm/vllm-openai:v0.33.0) or a pin (vllm==0.33.0).
_VLLM_IMAGE = re.compile(r"(?<![\w.:/-])((?:[\w.-]+(?::\d+)?/)*vllm-openai):v?" + _VERSION + r"(?![\w.])([\w.-]*)")
_VLLM_PIN = re.compile(r"(?<![\w.-])vllm(?:\[[^\]\n]*\])?[ \t]*==[ \t]*" + _VERSION + r"(?![\w.+])")


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


def comment_hints(text: str, index: LineIndex, path: str) -> tuple[list[Hint], list[tuple[str, str, Location]]]:
    """Hints from `# nsa-policy: device=b200 model=… policy=… sglang=…` comments anywhere in the text, and the
    version of sglang the file targets from an image tag or a pip pin. Returns (hints, bad keys)."""
    hints: list[Hint] = []
    bad: list[tuple[str, str, Location]] = []
    if "nsa-policy:" in text:
        for m in _HINT.finditer(text):
            for pm in _PAIR.finditer(m.group(1)):
                key, value = pm.group(1).lower(), pm.group(2)
                loc = index.loc(path, m.start(1) + pm.start())
                if key in HINT_KEYS:
                    hints.append(Hint(key, value, loc, "comment"))
                else:
                    bad.append((key, value, loc))
    for engine, image, pin in (("sglang", _IMAGE, _PIN), ("vllm", _VLLM_IMAGE, _VLLM_PIN)):
        if engine not in text:
            continue
        for m in image.finditer(text):
            tag = m.group(1) + ":" + text[m.end(1) + 1:m.end()]
            hints.append(Hint(engine, m.group(2), index.loc(path, m.start()), f"image tag {tag}"))
        for m in pin.finditer(text):
            hints.append(Hint(engine, m.group(1), index.loc(path, m.start()), f"pin {engine}=={m.group(1)}"))
    return hints, bad


REQUIREMENTS = "requirements.txt"


def requirements_pins(base_dir: str, path: str) -> list[Hint]:
    """The sglang and vllm pins of a requirements.txt beside the file (the image or venv the launch runs in is
    built from it). Weaker than the file's own hints, tags and pins, which come first in the list."""
    from nsa_policy.base.errors import InputError
    from nsa_policy.base.safe_io import read_text

    full = os.path.join(base_dir, REQUIREMENTS)
    if not os.path.isfile(full):
        return []
    try:
        text = read_text(full, field="requirements")
    except (InputError, OSError):
        return []  # unreadable: no pin, the file's own checks still run
    if "sglang" not in text and "vllm" not in text:
        return []
    shown = os.path.join(os.path.dirname(path), REQUIREMENTS)
    index = LineIndex(text)
    out = []
    for engine, pin in (("sglang", _PIN), ("vllm", _VLLM_PIN)):
        for m in pin.finditer(text):
            loc = index.loc(shown, m.start())
            if text[index.starts[loc.line - 1]:m.start()].lstrip().startswith("#"):
                continue  # a commented-out pin
            out.append(Hint(engine, m.group(1), loc, f"pin {engine}=={m.group(1)} in {shown}"))
    return out
