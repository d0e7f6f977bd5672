"""engine.memo.ReadMemo: a computation memoised on exactly the facts it read gives what it computes."""
from __future__ import annotations

from typing import Any

from nsa_policy.core.memo import ReadMemo


class Ns(dict):
    """A namespace stand-in: facts by key, plus the installed packages."""

    def __init__(self, facts: dict[str, Any], packages: dict[str, str] | None = None):
        super().__init__(facts)
        self.packages = packages or {}
        self.catalog = None


def test_results_follow_the_facts_read_and_only_those() -> None:
    calls = []

    def compute(ns: Any) -> str:  # reads b only when a holds, and the packages only when b is 2
        calls.append(1)
        if not ns["a"]:
            return "no a"
        return f"b={ns['b']}" + (f" fi={ns.packages.get('flashinfer-python')}" if ns["b"] == 2 else "")

    memo = ReadMemo()
    inputs = [Ns({"a": a, "b": b, "c": c}, {"flashinfer-python": v})
              for a in (False, True) for b in (1, 2) for c in range(5) for v in ("0.6.7", "0.6.14")]
    for ns in inputs:
        assert memo.get(ns, compute) == compute(ns)  # the memo's answer is the computation's
    # a=False: 1 result; a=True, b=1: 1; a=True, b=2: one per package version. c is never read.
    assert len(calls) == len(inputs) + 4


def test_equal_values_of_different_types_stay_apart() -> None:
    memo = ReadMemo()

    def compute(ns: Any) -> str:
        return str(ns["x"])

    assert [memo.get(Ns({"x": v}), compute) for v in (1, True, 1.0, 1)] == ["1", "True", "1.0", "1"]


def test_unhashable_values_are_computed_every_time() -> None:
    memo = ReadMemo()
    assert memo.get(Ns({"x": [1]}), lambda ns: len(ns["x"])) == 1
    assert memo.get(Ns({"x": [1, 2]}), lambda ns: len(ns["x"])) == 2


def test_a_computation_that_is_not_a_function_of_its_reads_is_not_kept() -> None:
    memo = ReadMemo()
    state = {"first": True}

    def compute(ns: Any) -> Any:  # reads a different fact the second time on the same values
        key = "a" if state.pop("first", False) else "b"
        return ns[key]

    assert memo.get(Ns({"a": 1, "b": 2}), compute) == 1
    assert memo.get(Ns({"a": 3, "b": 4}), compute) == 4  # a miss (a=3); its path reads b: the tree is dropped
    assert memo.get(Ns({"a": 1, "b": 2}), lambda ns: ns["b"]) == 2  # nothing stale was kept for a=1
