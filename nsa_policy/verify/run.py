"""Evaluate a bundle over the whole space, with a probe that watches every rule.

The real evaluator runs unchanged; the probe is a copy of the bundle whose rules' condition
callables are wrapped. A wrapper sees the fact namespace at the moment the rule is tested, so it
records: which rules matched; which rule set each output; fill conflicts (a rule that would have
set an output to another value, had an earlier rule not set it first); and reads of outputs that
were changed later by another rule (a result that depends on evaluation order).

Work is split over processes (fork) by index range; every aggregate keeps its minimal example
(fewest settings off baseline, then lowest index), so results do not depend on the split.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import itertools
import multiprocessing
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, cast

from nsa_policy import engines
from nsa_policy.catalog.store import KV_DTYPES, Catalog, load_catalog
from nsa_policy.core.bundle import CompiledBundle
from nsa_policy.core.conditions import Namespace, conjuncts
from nsa_policy.core.decision import DECISION_OUTPUTS, RECORDED_FIELDS, outputs_for
from nsa_policy.core.evaluator import evaluate
from nsa_policy.core.namespace import outputs_read
from nsa_policy.verify.invariants import check_invariants  # imported here, not in forked workers
from nsa_policy.verify.space import FactsBuilder, Point, Space

RECORD_FIELDS = RECORDED_FIELDS  # the Decision fields tagged `recorded`
# Every DSA decision that is not rejected sets all its outputs.
ESSENTIAL = RECORD_FIELDS + tuple(f for f in DECISION_OUTPUTS if f not in RECORD_FIELDS)


def _reads_outputs(reads: tuple[str, ...]) -> tuple[str, ...]:
    """The outputs a condition depends on: out.X, prov.X, and the outputs behind cap./req./pad. facts."""
    return tuple(dict.fromkeys(out for path in reads for out in outputs_read(path)))


class Probe:
    """Per-evaluation observations, filled by the wrapped condition callables."""

    def __init__(self, bundle: CompiledBundle, catalog: Catalog):
        self.catalog = catalog
        self.rules = bundle.rules
        self.index = {r.id: i for i, r in enumerate(self.rules)}
        self.read_outs = [_reads_outputs(r.reads) for r in self.rules]
        self.set_outs = [frozenset(r.outputs) for r in self.rules]
        # Without overwrite rules a set output never changes again, so only reads of unset ones can go stale.
        self.only_unset_reads = not any(r.overwrite for r in self.rules)
        self.reset()

    def reset(self) -> None:
        self.ns: Namespace = {}  # the namespace of the evaluation in progress (set before any rule matches)
        self.matched: list[int] = []
        self.pending: Optional[tuple[int, tuple]] = None
        self.setter: dict[str, int] = {}
        self.conflicts: list[tuple] = []
        self.reads: list[tuple[int, str, Any]] = []

    def settle(self) -> None:
        """Attribute the outputs the previously matched rule changed to it."""
        pending = self.pending
        if pending is None:  # callers settle only after a rule matched
            raise RuntimeError("Probe.settle() with no matched rule pending")
        idx, before = pending
        self.pending = None
        ns = self.ns
        for out, key, prov_key, value, prov in before:
            if ns[key] != value or ns[prov_key] != prov:
                self.setter[out] = idx

    def wrap(self, i: int, rest: Optional[Callable]) -> Callable:
        rule = self.rules[i]
        overwrite = rule.overwrite
        catalog = self.catalog
        only_unset = self.only_unset_reads
        read_keys = tuple((out, "out." + out) for out in self.read_outs[i])
        # per output it sets: (output, its out. and prov. keys, how its value is computed), built once
        sets = tuple((out, "out." + out, "prov." + out, spec) for out, spec in rule.sets)

        def probed(ns) -> bool:
            if self.pending is not None:
                self.settle()
            self.ns = ns
            if read_keys:
                reads = self.reads
                for out, key in read_keys:
                    seen = ns[key]
                    if seen is None or not only_unset:
                        reads.append((i, out, seen))
            ok = rest(ns) if rest is not None else True
            if ok:
                self.matched.append(i)
                if sets:
                    if not overwrite:
                        for out, key, prov_key, spec in sets:
                            cur = ns[key]
                            if cur is None or ns[prov_key] != "rule":
                                continue
                            would = spec.value(ns, catalog)
                            if would is not None and would != cur:
                                self.conflicts.append((self.setter.get(out), i, out, cur, would))
                    self.pending = (i, tuple((out, key, prov_key, ns[key], ns[prov_key])
                                             for out, key, prov_key, _ in sets))
            return ok

        return probed


_COPIES = itertools.count(1)


def probe_bundle(bundle: CompiledBundle, probe: Probe) -> CompiledBundle:
    """A copy of the bundle whose rules report to the probe. Each copy gets its own digest: the
    evaluator caches per-device rule plans by digest, and a plan must hold this copy's wrappers."""
    stages = {}
    for stage, rules in bundle.stages.items():
        out = []
        for r in rules:
            i = probe.index[r.id]
            full = r.check
            out.append(dataclasses.replace(r, rest_check=probe.wrap(i, r.rest_check), check=probe.wrap(i, full)))
        stages[stage] = tuple(out)
    return dataclasses.replace(bundle, stages=stages, digest=f"{bundle.digest}+probe{next(_COPIES)}")


class MemoCatalog:
    """The catalog with its pure queries memoised (the catalog's own methods, called once per distinct
    question): over the space the evaluator asks the same few hundred questions millions of times."""

    def __init__(self, catalog: Catalog):
        self._catalog = catalog
        self._memo: dict = {}
        self._package_keys: dict[int, tuple[Any, tuple]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._catalog, name)

    def _packages(self, packages: Optional[dict]) -> tuple:
        """A package mapping as part of a key. The space's environments are shared objects: each is
        sorted once (the entry keeps the object alive, so its id cannot be reused by another)."""
        packages = packages or {}
        hit = self._package_keys.get(id(packages))
        if hit is None or hit[0] is not packages:
            if len(self._package_keys) >= 1024:
                self._package_keys.clear()
            hit = self._package_keys[id(packages)] = (packages, tuple(sorted(packages.items())))
        return hit[1]

    def _call(self, name: str, key: tuple, *args) -> Any:
        try:
            return self._memo[key]
        except KeyError:
            value = self._memo[key] = getattr(self._catalog, name)(*args)
            return value

    def capability(self, backend: str, device_class: str, kv: str, phase: str):
        return self._call("capability", ("capability", backend, device_class, kv, phase),
                          backend, device_class, kv, phase)

    def requirement_problem(self, backend: str, index_topk: Optional[int], packages) -> Optional[str]:
        return self._call("requirement_problem", ("requirement_problem", backend, index_topk, self._packages(packages)),
                          backend, index_topk, dict(packages))

    def runs(self, backend: str, device_class: str, kv: str, phase: str, index_topk: Optional[int] = None,
             packages=None) -> bool:
        return self._call("runs", ("runs", backend, device_class, kv, phase, index_topk, self._packages(packages)),
                          backend, device_class, kv, phase, index_topk, dict(packages or {}))

    def valid_backends(self, phase: str, device_class: str, kv: str, index_topk: Optional[int] = None,
                       packages=None) -> list[str]:
        return list(self._call("valid_backends",
                               ("valid_backends", phase, device_class, kv, index_topk, self._packages(packages)),
                               phase, device_class, kv, index_topk, dict(packages or {})))

    def sglang_lists(self, backend: str, phase: str, release: str) -> bool:
        return self._call("sglang_lists", ("sglang_lists", backend, phase, release), backend, phase, release)

    def sglang_choices(self, release: str, phase: Optional[str] = None) -> list[str]:
        return list(self._call("sglang_choices", ("sglang_choices", release, phase), release, phase))


_MEMO_CATALOG: dict = {}


def memo_catalog() -> Catalog:
    """The loaded catalog behind a MemoCatalog (duck-typed: every attribute it does not memoise forwards)."""
    cat = load_catalog()
    hit = _MEMO_CATALOG.get(id(cat))
    if hit is None:
        hit = _MEMO_CATALOG[id(cat)] = MemoCatalog(cat)
    return cast(Catalog, hit)


# ---------------------------------------------------------------- aggregates

def _better(best: Optional[tuple], key: tuple) -> bool:
    return best is None or key < best


@dataclass
class Agg:
    """A count and the minimal example (sort key, index) of one kind of observation."""

    count: int = 0
    best: Optional[tuple] = None  # (complexity, index)
    info: Any = None  # detail of the minimal example

    def add(self, key: tuple, info: Any = None) -> None:
        self.count += 1
        if _better(self.best, key):
            self.best, self.info = key, info

    def merge(self, other: Agg) -> None:
        self.count += other.count
        if other.best is not None and _better(self.best, other.best):
            self.best, self.info = other.best, other.info

    @property
    def example(self) -> Optional[int]:
        return None if self.best is None else self.best[1]


def _merge_dict(into: dict, other: dict) -> None:
    for k, v in other.items():
        if k in into:
            into[k].merge(v)
        else:
            into[k] = v


@dataclass
class SpaceRun:
    """What evaluating one bundle over a space produced (per input, in index order, plus aggregates)."""

    bundle: str
    compat: bool
    size: int
    rule_ids: tuple = ()
    records: list = field(default_factory=list)  # per input: (status, values, causes, codes)
    complexity: bytearray = field(default_factory=bytearray)  # per input: settings off baseline
    matched: dict = field(default_factory=dict)  # rule id → bytearray over the space (condition held)
    effective: dict = field(default_factory=dict)  # rule id → bytearray (emitted, or set a final output)
    conflicts: dict = field(default_factory=dict)  # (earlier id, later id, output) → Agg(info=(cur, would))
    order_reads: dict = field(default_factory=dict)  # (rule id, output) → Agg(info=(seen, final, setter))
    crashes: dict = field(default_factory=dict)  # message → Agg
    undecided: dict = field(default_factory=dict)  # missing outputs → Agg
    violations: dict = field(default_factory=dict)  # (invariant, detail) → Agg(info=message)
    no_alternatives: list = field(default_factory=list)  # (index, fault dims, error rules): rejected, none listed

    def merge(self, other: SpaceRun) -> None:
        """Append a later range (ranges are merged in index order)."""
        self.records.extend(other.records)
        self.complexity.extend(other.complexity)
        for name in ("matched", "effective"):
            mine = getattr(self, name)
            for rid, bits in getattr(other, name).items():
                mine[rid].extend(bits)
        for name in ("conflicts", "order_reads", "crashes", "undecided", "violations"):
            _merge_dict(getattr(self, name), getattr(other, name))
        self.no_alternatives.extend(other.no_alternatives)

    def count(self, kind: str, rule_id: str) -> int:
        return getattr(self, kind)[rule_id].count(1)

    def example(self, kind: str, rule_id: str) -> Optional[int]:
        """The minimal input (fewest settings, then lowest index) where the rule matched / took effect."""
        return first_example(getattr(self, kind)[rule_id], self.complexity)


def first_example(bits: bytearray, complexity: bytearray) -> Optional[int]:
    best = None
    pos = bits.find(1)
    while pos != -1:
        c = complexity[pos]
        if best is None or c < best[0]:
            best = (c, pos)
            if c == 0:
                break
        pos = bits.find(1, pos + 1)
    return None if best is None else best[1]


# ---------------------------------------------------------------- one range of the space

def _status(decision) -> str:
    if not decision.applies:
        return "n/a"
    return "rejected" if decision.errors else "accepted"


def _cause(decision, out: str) -> Optional[str]:
    p = decision.provenance.get(out)
    if p is None:
        return None
    return p.detail if p.source in ("rule", "model") and p.detail else p.source


def record_of(decision) -> tuple:
    values = tuple(getattr(decision, f) for f in RECORD_FIELDS)
    causes = tuple(_cause(decision, f) for f in RECORD_FIELDS)
    codes = tuple(sorted((f.code, f.rule, f.level) for f in decision.findings))  # level: refusals are errors
    return (_status(decision), values, causes, codes)


_PROBES: dict = {}


def probed_bundle(bundle: CompiledBundle, catalog: Catalog) -> tuple[Probe, CompiledBundle]:
    """One probe per bundle per process (the evaluator caches per-device plans of the probed copy)."""
    key = (bundle.digest, bundle.files, id(bundle))
    hit = _PROBES.get(key)
    if hit is None:
        probe = Probe(bundle, catalog)
        hit = _PROBES[key] = (probe, probe_bundle(bundle, probe))
    return hit


def _evaluate_range(bundle: CompiledBundle, space: Space, start: int, stop: int, invariants: bool) -> SpaceRun:
    catalog = memo_catalog()
    probe, probed = probed_bundle(bundle, catalog)
    builder = FactsBuilder(catalog)
    rules = probe.rules
    n = stop - start
    run = SpaceRun(bundle=bundle.name, compat=bundle.compat, size=n, rule_ids=tuple(r.id for r in rules),
                   complexity=bytearray(n))
    matched = [bytearray(n) for _ in rules]
    effective = [bytearray(n) for _ in rules]
    index = probe.index
    records = run.records
    for gi in range(start, stop):
        local = gi - start
        point = space.point(gi)
        key = point.sort_key
        run.complexity[local] = key[0]
        probe.reset()
        try:
            facts = builder.facts(point)
            decision = evaluate(probed, facts, catalog, trace=False)
        except Exception as exc:  # a crash is a finding, with its input
            text = str(exc).splitlines()[0] if str(exc) else ""
            run.crashes.setdefault(f"{type(exc).__name__}: {text}", Agg()).add(key)
            records.append(("crash", (None,) * len(RECORD_FIELDS), (None,) * len(RECORD_FIELDS), ()))
            continue
        if probe.pending is not None:
            probe.settle()
        rec = record_of(decision)
        records.append(rec)
        for i in probe.matched:
            matched[i][local] = 1
        for f in decision.findings:
            effective[index[f.rule]][local] = 1
        for i in probe.setter.values():
            effective[i][local] = 1
        for a, b, out, cur, would in probe.conflicts:
            k = (rules[a].id if a is not None else None, rules[b].id, out)
            run.conflicts.setdefault(k, Agg()).add(key, (cur, would))
        if probe.reads:
            ns = probe.ns
            for i, out, seen in probe.reads:
                final = ns["out." + out]
                if final != seen and out not in probe.set_outs[i]:  # changed after the rule read it
                    setter = probe.setter.get(out)
                    if setter is not None and any(fnmatch.fnmatchcase(rules[setter].id, p)
                                                  for p in rules[i].reads_before):
                        continue  # declared: the rule reads the value at its step, as the engine does
                    run.order_reads.setdefault((rules[i].id, out), Agg()).add(
                        key, (seen, final, rules[setter].id if setter is not None else None))
        if rec[0] == "accepted":
            given = bundle.left_as_given.get(decision.device_class, frozenset())  # the release leaves these alone
            decided = [f for f in outputs_for(decision.engine, decision.dsa_scope)
                       if f not in given and f not in engines.get(decision.engine).optional_outputs]
            missing = tuple(f for f in ESSENTIAL if getattr(decision, f) is None and f in decided)
            if missing:
                run.undecided.setdefault(missing, Agg()).add(key)
        if invariants and rec[0] != "n/a":
            for name, detail, message in check_invariants(decision, facts, catalog):
                run.violations.setdefault((name, detail), Agg()).add(key, message)
            if rec[0] == "rejected" and not any(e.alternatives for e in decision.errors):
                field_dims = engines.get(decision.engine).field_dims
                dims = tuple(sorted({field_dims[f] for e in decision.errors for f in e.fields if f in field_dims}))
                if dims:
                    run.no_alternatives.append((gi, dims, tuple(sorted({e.rule for e in decision.errors}))))
    run.matched = {r.id: b for r, b in zip(rules, matched)}
    run.effective = {r.id: b for r, b in zip(rules, effective)}
    return run


# ---------------------------------------------------------------- near misses of rules that never fire

def _near_range(bundle: CompiledBundle, space: Space, start: int, stop: int, targets: tuple) -> dict:
    """For each target rule: the input where most of its top-level tests hold (then fewest settings),
    which tests failed there, and which tests never hold anywhere."""
    catalog = memo_catalog()
    parts = {rid: conjuncts(bundle.rule(rid).when) for rid in targets}
    found = {rid: {"best": None, "failing": None, "ever": [False] * len(parts[rid])} for rid in targets}
    current: dict = {}

    def wrap(rule):
        tests = parts[rule.id]
        slot = found[rule.id]

        def probed(ns) -> bool:
            held = [bool(t(ns)) for _, t in tests]
            for k, h in enumerate(held):
                if h:
                    slot["ever"][k] = True
            key = (-sum(held),) + current["key"]
            if slot["best"] is None or key < slot["best"]:
                slot["best"] = key
                slot["failing"] = [text for (text, _), h in zip(tests, held) if not h]
            return rule.check(ns)
        return probed

    stages = {stage: tuple(dataclasses.replace(r, device_check=None, rest_check=wrap(r)) if r.id in found else r
                           for r in rules) for stage, rules in bundle.stages.items()}
    probed_bundle = dataclasses.replace(bundle, stages=stages, digest=f"{bundle.digest}+near{next(_COPIES)}")
    builder = FactsBuilder(catalog)
    for gi in range(start, stop):
        point = space.point(gi)
        current["key"] = point.sort_key
        try:
            evaluate(probed_bundle, builder.facts(point), catalog, trace=False)
        except Exception:
            continue
    return found


def _near_work(args: tuple) -> dict:
    start, stop = args
    return _near_range(_JOB["bundle"], _JOB["space"], start, stop, _JOB["targets"])


def near_misses(bundle: CompiledBundle, space: Space, targets: tuple, *, workers: Optional[int] = None) -> dict:
    """rule id → {"best": (-tests held, complexity, index) or None, "failing": [test], "never": [test]}."""
    if not targets:
        return {}
    workers = default_workers() if workers is None else workers
    n = len(space)
    if workers <= 1 or n < 2000 or "fork" not in multiprocessing.get_all_start_methods():
        parts = [_near_range(bundle, space, 0, n, targets)]
    else:
        bounds = [(n * k // (workers * 2), n * (k + 1) // (workers * 2)) for k in range(workers * 2)]
        _JOB.update(bundle=bundle, space=space, targets=targets)
        try:
            with multiprocessing.get_context("fork").Pool(workers) as pool:
                parts = pool.map(_near_work, bounds, chunksize=1)
        finally:
            _JOB.clear()
    out = {}
    for rid in targets:
        texts = [t for t, _ in conjuncts(bundle.rule(rid).when)]
        best, failing, ever = None, None, [False] * len(texts)
        for part in parts:
            slot = part[rid]
            ever = [a or b for a, b in zip(ever, slot["ever"])]
            if slot["best"] is not None and (best is None or slot["best"] < best):
                best, failing = slot["best"], slot["failing"]
        out[rid] = {"best": best, "failing": failing or [], "never": [t for t, e in zip(texts, ever) if not e]}
    return out


# ---------------------------------------------------------------- the whole space, in parallel

_JOB: dict = {}


def _work(args: tuple) -> SpaceRun:
    start, stop = args
    return _evaluate_range(_JOB["bundle"], _JOB["space"], start, stop, _JOB["invariants"])


def default_workers() -> int:
    return max(1, min(2, os.cpu_count() or 1))


def run_space(bundle: CompiledBundle, space: Space, *, workers: Optional[int] = None,
              invariants: Optional[bool] = None, progress: Optional[Callable[[int], None]] = None) -> SpaceRun:
    """Evaluate every input of the space; invariants default to on for non-compat bundles.

    `progress`, if given, is called with the number of inputs each finished range held (for a
    progress line; ranges finish in index order)."""
    invariants = (not bundle.compat) if invariants is None else invariants
    workers = default_workers() if workers is None else workers
    n = len(space)
    parallel = workers > 1 and n >= 2000 and "fork" in multiprocessing.get_all_start_methods()
    if not parallel and (progress is None or n < 2000):
        run = _evaluate_range(bundle, space, 0, n, invariants)
        if progress is not None:
            progress(n)
        return run
    chunks = workers * 4 if parallel else 8  # in one process, ranges only so progress shows between them
    bounds = [(n * k // chunks, n * (k + 1) // chunks) for k in range(chunks)]
    parts: list[SpaceRun] = []
    if parallel:
        _JOB.update(bundle=bundle, space=space, invariants=invariants)
        try:
            with multiprocessing.get_context("fork").Pool(workers) as pool:
                for (lo, hi), part in zip(bounds, pool.imap(_work, bounds, chunksize=1)):
                    parts.append(part)
                    if progress is not None:
                        progress(hi - lo)
        finally:
            _JOB.clear()
    else:
        for lo, hi in bounds:
            parts.append(_evaluate_range(bundle, space, lo, hi, invariants))
            if progress is not None:
                progress(hi - lo)
    total = parts[0]
    for part in parts[1:]:
        total.merge(part)
    total.size = n
    return total


def normalise_kv(value: Optional[str]) -> Optional[str]:
    """A KV dtype under the policy's name (sglang's bf16 alias is bfloat16)."""
    from nsa_policy.engines.sglang.config import KV_ALIASES

    return KV_ALIASES.get(value, value) if value is not None else None


__all__ = ["RECORD_FIELDS", "Probe", "SpaceRun", "probe_bundle", "run_space", "record_of",
           "KV_DTYPES", "normalise_kv", "Point"]
