"""Memoise a pure computation over a fact namespace on exactly the facts it reads.

A finding's message and alternatives are computed from a handful of facts, and `check` builds the
same few hundred findings about 100,000 times over its space. Which facts a computation reads can
depend on the values it has already read (an alternatives list reads the KV dtype, and only when
there is one the backends), so the memo is a decision tree: each node is the next fact the
computation read, each branch one value of it, each leaf a result. A lookup follows this input's
values down the tree; where no branch fits, the computation runs on a `Recorder`, which notes the
facts it reads, and its path is added.

Exact, whatever the computation declares about itself: a hit is an input on which it would read the
same values in the same order, so it would compute the same result. It needs only that the
computation reads the namespace through `ns[key]`, `ns.get(key)` and `ns.packages` (a computed fact,
such as `cap.prefill.status`, counts as one read of its current value) and depends otherwise only on
constants (the rule, the catalog).
"""
from __future__ import annotations

from typing import Any, Callable, Hashable, Mapping, Optional, Union

_GET, _ITEM, _PACKAGES = "get", "item", "packages"
_ABSENT = object()  # what ns.get found for a key the namespace does not hold


def _label(value: Any) -> Hashable:
    """A fact's value as a branch label: typed, so True, 1 and 1.0 (equal in Python) stay apart."""
    return (value.__class__, value)


def _packages_label(packages: Mapping[str, str]) -> Hashable:
    return (dict, tuple(sorted(packages.items())))


class Recorder:
    """A read-only view of a namespace that notes each read: (how, key) and the value's label."""

    __slots__ = ("_ns", "reads")

    def __init__(self, ns: Any):
        self._ns = ns
        self.reads: list[tuple[tuple[str, str], Hashable]] = []

    def __getitem__(self, key: str) -> Any:
        value = self._ns[key]
        self.reads.append(((_ITEM, key), _label(value)))
        return value

    def get(self, key: str, default: Any = None) -> Any:
        value = self._ns.get(key, _ABSENT)
        self.reads.append(((_GET, key), _label(value)))
        return default if value is _ABSENT else value

    @property
    def packages(self) -> Any:
        value = self._ns.packages
        self.reads.append(((_PACKAGES, ""), _packages_label(value)))
        return value

    @property
    def catalog(self) -> Any:  # a constant of the namespace, not a fact
        return self._ns.catalog


def _read(ns: Any, how: tuple[str, str]) -> Hashable:
    """The label of what a recorded read gives on this namespace."""
    kind, key = how
    if kind == _ITEM:
        return _label(ns[key])
    if kind == _GET:
        return _label(ns.get(key, _ABSENT))
    return _packages_label(ns.packages)


class _Node:
    __slots__ = ("how", "children")

    def __init__(self, how: tuple[str, str]):
        self.how = how
        self.children: dict[Hashable, Union[_Node, _Leaf]] = {}


class _Leaf:
    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


class ReadMemo:
    """compute(ns) for namespaces, memoised on the facts each call read (see the module doc).
    At most `limit` results are kept; then the tree starts afresh."""

    __slots__ = ("_root", "_size", "_limit")

    def __init__(self, limit: int = 4096):
        self._root: Optional[Union[_Node, _Leaf]] = None
        self._size = 0
        self._limit = limit

    def get(self, ns: Any, compute: Callable[[Any], Any]) -> Any:
        node = self._root
        try:
            while node is not None:
                if node.__class__ is _Leaf:
                    return node.value
                node = node.children.get(_read(ns, node.how))  # type: ignore[union-attr]
        except TypeError:  # a value that cannot be a label (a list): not kept, computed every time
            return compute(ns)
        recorder = Recorder(ns)
        value = compute(recorder)
        try:
            self._insert(recorder.reads, value)
        except TypeError:  # it read a value that cannot be a label: the result stands, it is not kept
            pass
        return value

    def _insert(self, reads: list[tuple[tuple[str, str], Hashable]], value: Any) -> None:
        if self._size >= self._limit:
            self._root, self._size = None, 0
        leaf = _Leaf(value)
        if not reads:
            if self._root is None:
                self._root, self._size = leaf, 1
            return
        if self._root is None:
            self._root = _Node(reads[0][0])
        node: Any = self._root
        for i, (how, label) in enumerate(reads):
            if node.__class__ is not _Node or node.how != how:
                # Not a function of its reads after all (it read something else where an equal
                # earlier call read this): keep nothing rather than a wrong answer.
                self._root, self._size = None, 0
                return
            nxt = node.children.get(label)
            if nxt is None:
                nxt = node.children[label] = _Node(reads[i + 1][0]) if i + 1 < len(reads) else leaf
                if nxt is leaf:
                    self._size += 1
                    return
            node = nxt
        self._root, self._size = None, 0  # the path ended at an existing node: inconsistent, as above
