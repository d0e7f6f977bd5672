"""The evaluator: facts + compiled bundle → Decision. Deterministic and pure.

One evaluation, step by step:

1. `_seed_user_values`: the user's explicit values are outputs from the start;
2. `_run_stage`, for each stage in order: each rule whose condition holds fires
   (`_apply_sets` sets what it may, `_emit` adds its finding); a malformed input stops after `input`;
3. `_assemble`: the outputs, findings, provenance and trace become the Decision.

With `trace=True` every rule is reported (`_Evaluation.note`), also those whose condition failed;
without it, rules ruled out by the device alone are skipped (a plan decided once per device) and no
text is built.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any, Optional

from nsa_policy.catalog.store import Catalog
from nsa_policy.core.bundle import STAGES, CompiledBundle, CompiledRule, FindingSpec, FromFact, ValueSpec
from nsa_policy.core.conditions import Check
from nsa_policy.core.decision import (
    DECISION_OUTPUTS,
    Decision,
    Finding,
    Provenance,
    RuntimeThresholds,
    TraceEntry,
    model_detail,
)
from nsa_policy.core.facts import Facts, FrozenDict
from nsa_policy.core.memo import ReadMemo
from nsa_policy.core.namespace import FactNamespace, build_namespace

_DSA_STAGES = tuple(s for s in STAGES if s != "not_dsa")
# sglang's NSA backend constants, owned by RuntimeThresholds' defaults
_RUNTIME_DEFAULTS = {k: f.default for k, f in RuntimeThresholds.model_fields.items()}
_DEFAULTING_STAGES = ("kv_cache", "backends", "threshold")
_OUTPUT_KEYS = tuple((f, "out." + f) for f in DECISION_OUTPUTS)
# Per output a rule sets: (output, "out.<output>", "prov.<output>", value spec, provenance when it replaces nothing)
Targets = tuple[tuple[str, str, str, ValueSpec, Provenance], ...]
# An output set: (output, value, (the value it replaced,) or None)
Changed = tuple[str, Any, Optional[tuple[Any]]]


@lru_cache(maxsize=1024)
def _provenance(source: str, detail: str, overwrote: Optional[str], label: Optional[str] = None) -> Provenance:
    return Provenance.model_construct(source=source, detail=detail, overwrote=overwrote, label=label)


@lru_cache(maxsize=8192)
def _trace_entry(rule: str, stage: str, outcome: str, why: str) -> TraceEntry:
    # Entries are frozen, and the same ones recur from one evaluation to the next: share them.
    return TraceEntry.model_construct(rule=rule, stage=stage, outcome=outcome, why=why)


@lru_cache(maxsize=64)
def _runtime(capacity: int, ratio: int, one_shot: bool) -> RuntimeThresholds:
    return RuntimeThresholds.model_construct(mha_chunk_capacity=capacity, flashmla_auto_ratio=ratio, mha_one_shot=one_shot)


def value_of(spec: ValueSpec, ns: FactNamespace, catalog: Catalog) -> Any:
    """The value a rule's `set` would give an output here (None: nothing to set)."""
    return spec.value(ns, catalog)


class _Evaluation:
    """The state of one evaluation: the namespace, provenance, findings and (when tracing) the trace."""

    __slots__ = ("ns", "catalog", "trace", "prov", "findings", "steps")

    def __init__(self, ns: FactNamespace, catalog: Catalog, trace: bool):
        self.ns = ns
        self.catalog = catalog
        self.trace = trace
        self.prov: dict[str, Provenance] = {}
        self.findings: dict[str, list[Finding]] = {"error": [], "warning": [], "info": []}
        self.steps: list[TraceEntry] = []

    def note(self, rule: CompiledRule, outcome: str, why: str) -> None:
        """One trace entry (callers check `trace` first, so no text is built without one)."""
        self.steps.append(_trace_entry(rule.id, rule.stage, outcome, why))


def _seed_user_values(ev: _Evaluation, engine: Any) -> None:
    """Explicit user values are outputs from the start; fill rules then never touch them. Which values
    those are, and the flag each comes from, is the engine's to say."""
    ns, prov = ev.ns, ev.prov
    for out, value, source, detail in engine.seed_outputs(ns):
        ns[f"out.{out}"] = value
        ns[f"prov.{out}"] = source
        prov[out] = _provenance(source, detail, None)


def _targets(rule: CompiledRule) -> Targets:
    """Per output the rule sets: (output, its out./prov. keys, the value spec, the provenance it gives
    when it replaces nothing). Computed once per plan, not per evaluation."""
    out = []
    for name, spec in rule.sets:
        if isinstance(spec, FromFact) and spec.source == "model":
            fresh = _provenance("model", model_detail(spec.fact, rule.id), None, rule.label)
        else:
            fresh = _provenance("rule", rule.id, None, rule.label)
        out.append((name, "out." + name, "prov." + name, spec, fresh))
    return tuple(out)


def _apply_sets(ev: _Evaluation, rule: CompiledRule,
                targets: Targets) -> tuple[list[Changed], list[tuple[str, Any]], list[str]]:
    """Set the rule's outputs that are still unset (all of them for an `overwrite` rule).

    Returns (changed, blocked, none_valid): (output, value, (the value it replaced,) or None) for
    each output set, (output, value already there) for each left alone, and the outputs no
    candidate runs here for."""
    ns, prov = ev.ns, ev.prov
    changed: list[Changed] = []
    blocked: list[tuple[str, Any]] = []
    none_valid: list[str] = []
    for out, key, prov_key, spec, fresh in targets:
        current = ns[key]
        if current is not None and not rule.overwrite:
            blocked.append((out, current))
            continue
        value = spec.value(ns, ev.catalog)
        if value is None:
            none_valid.append(out)
            continue
        ns[key] = value
        ns[prov_key] = "rule"
        if current is None or current == value:
            prov[out] = fresh
            changed.append((out, value, None))
            continue
        # Only compatibility bundles get here: a rule that overwrites a value says what it replaced.
        replaced = f"{current!r} ({prov[out].source}: {prov[out].detail})" if out in prov else repr(current)
        prov[out] = _provenance(fresh.source, fresh.detail, replaced, fresh.label)
        changed.append((out, value, (current,)))
    return changed, blocked, none_valid


def _build_finding(ns: Any, catalog: Catalog, rule: CompiledRule, spec: FindingSpec) -> Finding:
    alts = spec.alternatives.values(ns, catalog) if spec.alternatives else ()
    return Finding.model_construct(code=spec.code, level=spec.level, message=spec.render(ns, alts),
                                   rule=rule.id, fields=spec.fields, alternatives=alts, evidence=rule.evidence)


def _emit(ev: _Evaluation, rule: CompiledRule, spec: FindingSpec, emitted: ReadMemo) -> Finding:
    """Add the rule's finding, its message filled in and its alternatives listed. `emitted` holds the
    rule's findings so far by the facts each read: over `check`'s space a few hundred findings stand
    for ~100,000 (findings are frozen, so sharing one is safe)."""
    finding: Finding = emitted.get(ev.ns, lambda ns: _build_finding(ns, ev.catalog, rule, spec))
    ev.findings[spec.level].append(finding)
    return finding


def _fire(ev: _Evaluation, rule: CompiledRule, targets: Targets, emitted: ReadMemo) -> None:
    """A rule whose condition holds: set, then emit; trace what happened."""
    outcome, why = "fired" if targets else "emitted", ""
    if targets:
        changed, blocked, none_valid = _apply_sets(ev, rule, targets)
        if changed:
            if ev.trace:
                why = "set " + ", ".join(f"{out}={value!r}" + (f" over {before[0]!r}" if before else "")
                                         for out, value, before in changed)
        else:
            if ev.trace:
                why = "; ".join(f"{out} already {cur!r} ({ev.ns['prov.' + out]})" for out, cur in blocked)
                ev.note(rule, "already_set" if blocked else "no_valid_candidate",
                        why or f"no candidate runs here for {', '.join(none_valid)}")
            if not rule.emit:
                return
            outcome = "emitted"  # a finding still follows
    if rule.emit is not None:
        finding = _emit(ev, rule, rule.emit, emitted)
        if ev.trace:
            why = (why + "; " if why else "") + f"{finding.code}: {finding.message}"
    if ev.trace:
        ev.note(rule, outcome, why)


Step = tuple[CompiledRule, Optional[Check], Targets, ReadMemo]
Plan = dict[str, tuple[Step, ...]]
_PLANS: dict[tuple[Any, ...], Plan] = {}


def _plan(bundle: CompiledBundle, ns: FactNamespace, device: Any, trace: bool) -> Plan:
    """Per stage, (rule, test, targets, the rule's findings so far). With a trace, every rule under its
    full condition; without, only the rules whose top-level device tests hold on this device (decided
    once per device), under the rest of their condition (None: nothing left to test)."""
    key = (bundle.digest, bundle.files, device if not trace else None, trace)
    plan = _PLANS.get(key)
    if plan is None:
        if trace:
            plan = {stage: tuple((r, r.check, _targets(r), ReadMemo()) for r in rules)
                    for stage, rules in bundle.stages.items()}
        else:
            plan = {stage: tuple((r, r.rest_check, _targets(r), ReadMemo()) for r in rules
                                 if r.device_check is None or r.device_check(ns))
                    for stage, rules in bundle.stages.items()}
        if len(_PLANS) > 4096:
            _PLANS.clear()
        _PLANS[key] = plan
    return plan


def _run_stage(ev: _Evaluation, steps: tuple[Step, ...]) -> None:
    ns, trace = ev.ns, ev.trace
    for rule, test, targets, emitted in steps:
        if test is not None and not test(ns):
            if trace:
                ev.note(rule, "not_matched", rule.explain(ns) or "condition false")
            continue
        _fire(ev, rule, targets, emitted)


def _assemble(ev: _Evaluation, bundle: CompiledBundle, facts: Facts, applies: bool,
              device_label: Optional[str]) -> Decision:
    ns, prov, findings = ev.ns, ev.prov, ev.findings
    get = ns.get
    runtime = None
    padded = {}
    if applies:
        if get("out.mha_one_shot") is not None:
            runtime = _runtime(get("out.mha_chunk_capacity") or _RUNTIME_DEFAULTS["mha_chunk_capacity"],
                               get("out.flashmla_auto_ratio") or _RUNTIME_DEFAULTS["flashmla_auto_ratio"],
                               bool(get("out.mha_one_shot")))
        for phase in ("prefill", "decode"):
            p = ns["pad." + phase]
            if p is not None:
                padded[phase] = int(p)
    for out, source in (("index_topk", "model"), ("attention_backend", "rule")):
        if get("out." + out) is not None and out not in prov:
            prov[out] = _provenance(source, "", None)
    outputs = {f: get(key) for f, key in _OUTPUT_KEYS}
    return Decision.model_construct(
        applies=applies, dsa_scope=ns["policy.dsa_scope"], engine=facts.config.engine, policy=bundle.name,
        policy_digest=bundle.digest,
        device=device_label or facts.device.name, device_class=facts.device.device_class,
        model=facts.model.model_id, model_family=facts.model.family, architecture=facts.model.architecture,
        **outputs, heads_per_rank=facts.derived.heads_per_rank, padded_heads=FrozenDict(padded),
        runtime=runtime, warnings=tuple(findings["warning"]), errors=tuple(findings["error"]),
        notes=tuple(findings["info"]), provenance=FrozenDict(prov), trace=tuple(ev.steps), inputs=facts,
    )


def evaluate(bundle: CompiledBundle, facts: Facts, catalog: Catalog, *, trace: bool = True,
             device_label: Optional[str] = None) -> Decision:
    from nsa_policy import engines

    if facts.config.engine != bundle.engine:
        from nsa_policy.base.errors import InputError

        raise InputError("engine", facts.config.engine, [bundle.engine],
                         hint=f"policy {bundle.name} describes {bundle.engine}")
    engine = engines.get(facts.config.engine)
    ns = build_namespace(facts, catalog, engine)
    ev = _Evaluation(ns, catalog, trace)
    _seed_user_values(ev, engine)
    scope = bundle.dsa_scope(facts.model.family, facts.model.architecture)
    ns["policy.dsa_scope"] = scope
    applies = scope != "none"
    plan = _plan(bundle, ns, facts.device, trace)
    stages = _DSA_STAGES if applies else ("not_dsa",)
    if scope == "family_only":  # the engine leaves the KV dtype, the backends and the threshold as given
        stages = tuple(s for s in stages if s not in _DEFAULTING_STAGES)
        if ns["prov.dense_attn_kv_len_threshold"] == "env":  # not decided: the kernel reads its variable itself
            ns["out.dense_attn_kv_len_threshold"] = ns["prov.dense_attn_kv_len_threshold"] = None
            ev.prov.pop("dense_attn_kv_len_threshold", None)
    for stage in stages:
        _run_stage(ev, plan.get(stage, ()))
        if stage == "input" and ev.findings["error"]:
            break  # malformed input: later stages would only repeat the problem
    return _assemble(ev, bundle, facts, applies, device_label)
