"""The condition language of rule files: a closed set of operators over named facts. No eval.

A condition is a mapping. Each key is either a combinator (`all`, `any`, `not`) or a fact path
(`device.class`, `out.prefill_backend`, …) whose value is a predicate: a scalar (equality), null
(the fact is unset) or a mapping of operators (eq, ne, in, not_in, gt, ge, lt, le, set,
version_ge, version_lt). Several keys in one mapping must all hold.
"""
from __future__ import annotations

from collections.abc import Mapping  # not typing's alias: isinstance on it is several times slower
from functools import partial
from typing import Any, Callable, Iterator

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


# Compiled conditions are partials of module functions, not closures, so that a compiled bundle
# pickles (a fresh process loads the shipped bundles from their snapshot instead of compiling them,
# issue 20); a partial is called in C, as fast as the closure it replaces.
def _against(base: Callable[[Any, Any], bool], arg: Any, v: Any, ns: Namespace) -> bool:
    return base(v, arg)


def _against_fact(base: Callable[[Any, Any], bool], ref: str, v: Any, ns: Namespace) -> bool:
    return base(v, ns[ref])


def _member(members: frozenset[Any], v: Any, ns: Namespace) -> bool:
    return v in members


def _not_member(members: frozenset[Any], v: Any, ns: Namespace) -> bool:
    return v not in members


def _is_set(v: Any, ns: Namespace) -> bool:
    return v is not None


def _is_unset(v: Any, ns: Namespace) -> bool:
    return v is None


def _version(need: str, want_ge: bool, v: Any, ns: Namespace) -> bool:
    return _ver_ok(v, need, want_ge)


# op → (check of the fact's value v, given the namespace ns; text of the requirement).
# An operator's argument may be a literal or {fact: path}, compared against another fact.
def _op(name: str, arg: Any) -> tuple[Callable[[Any, Namespace], bool], str]:
    if isinstance(arg, Mapping) and set(arg) == {"fact"} and name in _BINARY:
        ref = str(arg["fact"])
        return partial(_against_fact, _BINARY[name], ref), f"{_SYMBOL[name]} {ref}"
    if name in _BINARY:
        if name in ("gt", "ge", "lt", "le") and (not isinstance(arg, (int, float)) or isinstance(arg, bool)):
            raise ConditionError(f"operator {name!r} takes a number or {{fact: path}}, got {arg!r}")
        return partial(_against, _BINARY[name], arg), f"{_SYMBOL[name]} {_fmt(arg)}"
    if name in ("in", "not_in"):
        if not isinstance(arg, (list, tuple)):
            raise ConditionError(f"operator {name!r} takes a list, got {arg!r}")
        odd = [m for m in arg if not isinstance(m, (str, int, float, bool)) and m is not None]
        if odd:  # a list or mapping member is unhashable and never equal to a fact's value
            raise ConditionError(f"operator {name!r} takes a list of plain values, got {odd[0]!r}")
        members = frozenset(arg)
        if name == "in":
            return partial(_member, members), f"in {_fmt(list(arg))}"
        return partial(_not_member, members), f"not in {_fmt(list(arg))}"
    if name == "set":
        if not isinstance(arg, bool):
            raise ConditionError(f"operator 'set' takes true or false, got {arg!r}")
        return (_is_set if arg else _is_unset), ("set" if arg else "unset")
    if name in ("version_ge", "version_lt"):
        from nsa_policy.base.versions import is_version

        if not isinstance(arg, (str, int, float)) or isinstance(arg, bool) or not is_version(str(arg)):
            raise ConditionError(f"operator {name!r} takes a PEP 440 version such as 0.6.7.post2, got {arg!r}")
        need = str(arg)
        want = name == "version_ge"
        return partial(_version, need, want), f"{'>=' if want else '<'} version {need}"
    raise ConditionError(f"unknown operator {name!r}; valid: {', '.join(OPERATORS)}")


def _numbers(v: Any, w: Any) -> bool:
    return v is not None and w is not None and not isinstance(v, (str, bool)) and not isinstance(w, (str, bool))


def _eq(v: Any, w: Any) -> bool:
    return bool(v == w)


def _ne(v: Any, w: Any) -> bool:
    return bool(v != w)


def _gt(v: Any, w: Any) -> bool:
    return _numbers(v, w) and v > w


def _ge(v: Any, w: Any) -> bool:
    return _numbers(v, w) and v >= w


def _lt(v: Any, w: Any) -> bool:
    return _numbers(v, w) and v < w


def _le(v: Any, w: Any) -> bool:
    return _numbers(v, w) and v <= w


_BINARY: dict[str, Callable[[Any, Any], bool]] = {"eq": _eq, "ne": _ne, "gt": _gt, "ge": _ge, "lt": _lt, "le": _le}
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
    check = _leaf_check(path, [t for t, _ in tests])
    explain: Explain = (partial(_leaf_explain_one, path, check, tests[0][1]) if len(tests) == 1
                        else partial(_leaf_explain, path, tuple(tests)))
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
        return _always, _holds, []
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


def _always(ns: Namespace) -> bool:
    return True


def _holds(ns: Namespace) -> str | None:
    return None


def _leaf_check(path: str, tests: list[Callable[[Any, Namespace], bool]]) -> Check:
    # a one-operator leaf is one call
    if len(tests) == 1:
        only = tests[0]
        if only is _is_set or only is _is_unset:
            return partial(_leaf_set if only is _is_set else _leaf_unset, path)
        if isinstance(only, partial):
            if only.func is _against and only.args[0] is _eq:
                return partial(_leaf_eq, path, only.args[1])
            if only.func is _member or only.func is _not_member:
                return partial(_leaf_in if only.func is _member else _leaf_not_in, path, only.args[0])
    return partial(_leaf_all, path, tuple(tests))


def _leaf_eq(path: str, value: Any, ns: Namespace) -> bool:
    return bool(ns[path] == value)


def _leaf_in(path: str, members: frozenset[Any], ns: Namespace) -> bool:
    return ns[path] in members


def _leaf_not_in(path: str, members: frozenset[Any], ns: Namespace) -> bool:
    return ns[path] not in members


def _leaf_set(path: str, ns: Namespace) -> bool:
    return ns[path] is not None


def _leaf_unset(path: str, ns: Namespace) -> bool:
    return ns[path] is None


def _leaf_all(path: str, tests: tuple[Callable[[Any, Namespace], bool], ...], ns: Namespace) -> bool:
    v = ns[path]
    for t in tests:
        if not t(v, ns):
            return False
    return True


def _leaf_explain(path: str, tests: tuple[tuple[Callable[[Any, Namespace], bool], str], ...],
                  ns: Namespace) -> str | None:
    v = ns[path]
    for c, text in tests:
        if not c(v, ns):
            return f"{path} is {v!r}, needs {text}"
    return None


def _leaf_explain_one(path: str, check: Check, text: str, ns: Namespace) -> str | None:
    if check(ns):
        return None
    return f"{path} is {ns[path]!r}, needs {text}"


def _not(c: Check, ns: Namespace) -> bool:
    return not c(ns)


def _not_explain(c: Check, ns: Namespace) -> str | None:
    return "negated condition holds" if c(ns) else None


def _all(checks: tuple[Check, ...], ns: Namespace) -> bool:
    for c in checks:
        if not c(ns):
            return False
    return True


def _all_explain(explains: tuple[Explain, ...], ns: Namespace) -> str | None:
    for e in explains:
        why = e(ns)
        if why:
            return why
    return None


def _any(checks: tuple[Check, ...], ns: Namespace) -> bool:
    for c in checks:
        if c(ns):
            return True
    return False


def _any_explain(explains: tuple[Explain, ...], ns: Namespace) -> str | None:
    whys = [e(ns) for e in explains]
    return None if any(w is None for w in whys) else "none of: " + "; ".join(w for w in whys if w)


def _negate(c: Check) -> tuple[Check, Explain]:
    return partial(_not, c), partial(_not_explain, c)


def _combine(kind: str, parts: list[tuple[Check, Explain]]) -> tuple[Check, Explain]:
    checks, explains = tuple(c for c, _ in parts), tuple(e for _, e in parts)
    if kind == "all":
        return partial(_all, checks), partial(_all_explain, explains)
    return partial(_any, checks), partial(_any_explain, explains)
