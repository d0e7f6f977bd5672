"""Errors the tool raises. Each names the field, the value and what would be valid."""
from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Iterable, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from nsa_policy.core.decision import Decision


_LOOK_ALIKE = str.maketrans({"o": "0", "l": "1", "i": "1"})


def closest(value: object, choices: Iterable[str]) -> str | None:
    """The valid name nearest to a misspelt one, if any is near enough."""
    text = str(value).lower()
    names = list(choices)
    lowered = {n.lower(): n for n in names}
    hits = difflib.get_close_matches(text, list(lowered), n=len(lowered) or 1, cutoff=0.6)  # all: ties break below
    if hits:
        # equal ratios (NSA1O1: NSA101 or NSA411?) go to the name with more letters in place, then to the one
        # a look-alike typo explains (O for 0, l for 1: NSA1O1 is NSA101, not NSA111)
        plain = text.translate(_LOOK_ALIKE)
        best = max(hits, key=lambda h: (difflib.SequenceMatcher(None, text, h).ratio(),
                                        sum(a == b for a, b in zip(text, h)),
                                        sum(a == b for a, b in zip(plain, h.translate(_LOOK_ALIKE)))))
        return lowered[best]
    # Prefixes catch "b2" → "b200" and "deepseek" → "deepseek-ai/…", which ratio-based matching misses.
    pref = [n for n in names if n.lower().startswith(text) or text.startswith(n.lower())]
    return pref[0] if len(pref) == 1 else None


class NsaPolicyError(Exception):
    """Base of every error this package raises on purpose."""


class InputError(NsaPolicyError, ValueError):
    """Bad input that stops resolution before any rule runs (CLI exit code 2)."""

    def __init__(self, field: str, value: object, valid: Sequence[str] = (), *, hint: str | None = None,
                 show_valid: int = 40):
        self.field = field
        self.value = value
        self.valid = list(valid)
        self.hint = hint
        self.suggestion = closest(value, self.valid) if self.valid and isinstance(value, str) else None
        reasons = [hint] if hint else []
        if self.suggestion:
            reasons.append(f"did you mean {self.suggestion!r}?")
        if self.valid:
            shown = ", ".join(self.valid[:show_valid]) + (", …" if len(self.valid) > show_valid else "")
            reasons.append(f"valid: {shown}")
        self.reason = "; ".join(reasons)  # why it is not valid, without the field and value
        head = f"{field}: {value!r} is not valid" + (f" ({hint})" if hint else "")
        super().__init__("; ".join([head] + reasons[1 if hint else 0:]))


class RuleFileError(NsaPolicyError):
    """A rule or catalog file that does not match its schema, located at file:line."""

    def __init__(self, path: str, line: int | None, message: str):
        self.path = path
        self.line = line
        self.detail = message
        where = f"{path}:{line}" if line else path
        super().__init__(f"{where}: {message}")


class DeviceDiscoveryError(NsaPolicyError):
    """`--device auto` found no usable GPU; the message lists the --device choices."""


class PolicyError(NsaPolicyError):
    """The policy rejected the configuration; `.decision` holds the full decision, errors included."""

    def __init__(self, decision: Decision):
        self.decision = decision
        lines = [f"{e.code}: {e.message}" for e in decision.errors]
        answered = f" (answering for {decision.answers_for})" if getattr(decision, "answers_for", None) else ""
        super().__init__(f"configuration rejected by policy {decision.policy!r}{answered}:\n  " + "\n  ".join(lines))
