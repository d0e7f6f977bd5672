"""The condition language of rule files: a closed set of operators over named facts. No eval.

A condition is a mapping. Each key is either a combinator (`all`, `any`, `not`) or a fact path
(`device.class`, `out.prefill_backend`, …) whose value is a predicate: a scalar (equality), null
(the fact is unset) or a mapping of operators (eq, ne, in, not_in, gt, ge, lt, le, set,
version_ge, version_lt). Several keys in one mapping must all hold.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping

from nsa_policy.base.versions import version_ge

Namespace = Mapping[str, Any]
Check = Callable[[Namespace], bool]
Explain = Callable[[Namespace], "str | None"]  # None = holds; else why it does not


class ConditionError(ValueError):
    """A malformed condition; `path` is the location inside the rule for file:line reporting."""

    def __init__(self, message: str, path: tuple[Any, ...] = ()):
        super().__init__(message)
        self.path = path


def _fmt(v: Any) -> str:
    return repr(v) if not isinstance(v, (list, tuple)) else "[" + ", ".join(map(repr, v)) + "]"


def _ver_ok(have: Any, need: str, want_ge: bool) -> bool:
    if have is None:
        return False
    return version_ge(str(have), need) if want_ge else not version_ge(str(have), need)


# op → (check of the fact's value v, given the namespace ns; text of the requirement).
# An operator's argument may be a literal or {fact: path}, compared against another fact.
def _op(name: str, arg: Any) -> tuple[Callable[[Any, Namespace], bool], str]:
    if isinstance(arg, Mapping) and set(arg) == {"fact"} and name in _BINARY:
        ref = str(arg["fact"])
        base = _BINARY[name]
        return (lambda v, ns: base(v, ns[ref])), f"{_SYMBOL[name]} {ref}"
    if name in _BINARY:
        if name in ("gt", "ge", "lt", "le") and (not isinstance(arg, (int, float)) or isinstance(arg, bool)):
            raise ConditionError(f"operator {name!r} takes a number or {{fact: path}}, got {arg!r}")
        base = _BINARY[name]
        return (lambda v, ns: base(v, arg)), f"{_SYMBOL[name]} {_fmt(arg)}"
    if name in ("in", "not_in"):
        if not isinstance(arg, (list, tuple)):
            raise ConditionError(f"operator {name!r} takes a list, got {arg!r}")
        odd = [m for m in arg if not isinstance(m, (str, int, float, bool)) and m is not None]
        if odd:  # a list or mapping member is unhashable and never equal to a fact's value
            raise ConditionError(f"operator {name!r} takes a list of plain values, got {odd[0]!r}")
        members = frozenset(arg)
        if name == "in":
            return (lambda v, ns: v in members), f"in {_fmt(list(arg))}"
        return (lambda v, ns: v not in members), f"not in {_fmt(list(arg))}"
    if name == "set":
        if not isinstance(arg, bool):
            raise ConditionError(f"operator 'set' takes true or false, got {arg!r}")
        return ((lambda v, ns: v is not None) if arg else (lambda v, ns: v is None)), ("set" if arg else "unset")
    if name in ("version_ge", "version_lt"):
        from nsa_policy.base.versions import is_version

        if not isinstance(arg, (str, int, float)) or isinstance(arg, bool) or not is_version(str(arg)):
            raise ConditionError(f"operator {name!r} takes a PEP 440 version such as 0.6.7.post2, got {arg!r}")
        need = str(arg)
        want = name == "version_ge"
        return (lambda v, ns: _ver_ok(v, need, want)), f"{'>=' if want else '<'} version {need}"
    raise ConditionError(f"unknown operator {name!r}; valid: {', '.join(OPERATORS)}")


def _num(cmp: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool]:
    def test(v: Any, w: Any) -> bool:
        return (v is not None and w is not None and not isinstance(v, (str, bool))
                and not isinstance(w, (str, bool)) and cmp(v, w))
    return test


_BINARY: dict[str, Callable[[Any, Any], bool]] = {
    "eq": lambda v, w: v == w, "ne": lambda v, w: v != w,
    "gt": _num(lambda v, w: v > w), "ge": _num(lambda v, w: v >= w),
    "lt": _num(lambda v, w: v < w), "le": _num(lambda v, w: v <= w),
}
_SYMBOL = {"eq": "==", "ne": "!=", "gt": ">", "ge": ">=", "lt": "<", "le": "<="}


OPERATORS = ("eq", "ne", "in", "not_in", "gt", "ge", "lt", "le", "set", "version_ge", "version_lt")


def _leaf(path: str, pred: Any, loc: tuple[Any, ...]) -> tuple[Check, Explain, list[str]]:
    if isinstance(pred, Mapping):
        if not pred:
            raise ConditionError(f"empty predicate for {path!r}", loc)
        tests = []
        for op, arg in pred.items():
            try:
                tests.append(_op(op, arg))
            except ConditionError as exc:
                raise ConditionError(str(exc), loc + (op,)) from None
    elif pred is None:
        tests = [_op("set", False)]
    elif isinstance(pred, (list, tuple)):
        raise ConditionError(f"{path!r}: a list needs an operator, e.g. {{in: {list(pred)}}}", loc)
    else:
        tests = [_op("eq", pred)]
    checks = [t for t, _ in tests]

    if len(checks) == 1:
        only = checks[0]

        def check(ns: Namespace) -> bool:
            return only(ns[path], ns)
    else:
        def check(ns: Namespace) -> bool:
            v = ns[path]
            return all(c(v, ns) for c in checks)

    def explain(ns: Namespace) -> str | None:
        v = ns[path]
        for c, text in tests:
            if not c(v, ns):
                return f"{path} is {v!r}, needs {text}"
        return None

    refs = [a["fact"] for a in (pred.values() if isinstance(pred, Mapping) else ())
            if isinstance(a, Mapping) and set(a) == {"fact"}]
    return check, explain, [path] + refs


def leaves(cond: Any) -> Iterator[tuple[str, Any]]:
    """Every (fact path, predicate) test of a condition as written, inside all/any/not too."""
    if isinstance(cond, Mapping):
        for key, value in cond.items():
            if key in ("all", "any"):
                for sub in value or []:
                    yield from leaves(sub)
            elif key == "not":
                yield from leaves(value)
            else:
                yield str(key), value


def conjuncts(cond: Any) -> list[tuple[str, Check]]:
    """The top-level tests of a condition (all must hold), each as (its text, its compiled check)."""
    return [(f"{key}: {value}", compile_condition({key: value})[0]) for key, value in (cond or {}).items()]


def compile_condition(cond: Any, loc: tuple[Any, ...] = ()) -> tuple[Check, Explain, list[str]]:
    """Compile a condition to (check, explain, fact paths it reads)."""
    if cond is None:
        return (lambda ns: True), (lambda ns: None), []
    if not isinstance(cond, Mapping):
        raise ConditionError(f"a condition is a mapping, got {cond!r}", loc)
    parts: list[tuple[Check, Explain]] = []
    paths: list[str] = []
    for key, value in cond.items():
        here = loc + (key,)
        if key in ("all", "any"):
            if not isinstance(value, list) or not value:
                raise ConditionError(f"{key!r} takes a non-empty list of conditions", here)
            subs = [compile_condition(c, here + (i,)) for i, c in enumerate(value)]
            for _, _, p in subs:
                paths.extend(p)
            parts.append(_combine(key, [(c, e) for c, e, _ in subs]))
        elif key == "not":
            c, e, p = compile_condition(value, here)
            paths.extend(p)
            parts.append(_negate(c))
        else:
            c, e, p = _leaf(str(key), value, here)
            paths.extend(p)
            parts.append((c, e))
    if len(parts) == 1:
        return parts[0][0], parts[0][1], paths
    return (*_combine("all", parts), paths)


def _negate(c: Check) -> tuple[Check, Explain]:
    def check(ns: Namespace) -> bool:
        return not c(ns)

    def explain(ns: Namespace) -> str | None:
        return "negated condition holds" if c(ns) else None
    return check, explain


def _combine(kind: str, parts: list[tuple[Check, Explain]]) -> tuple[Check, Explain]:
    checks = [c for c, _ in parts]
    if kind == "all":
        def check(ns: Namespace) -> bool:
            for c in checks:
                if not c(ns):
                    return False
            return True

        def explain(ns: Namespace) -> str | None:
            for _, e in parts:
                why = e(ns)
                if why:
                    return why
            return None
    else:
        def check(ns: Namespace) -> bool:
            for c in checks:
                if c(ns):
                    return True
            return False

        def explain(ns: Namespace) -> str | None:
            whys = [e(ns) for _, e in parts]
            return None if any(w is None for w in whys) else "none of: " + "; ".join(w for w in whys if w)
    return check, explain
