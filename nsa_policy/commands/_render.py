"""Human-readable output of a decision: a short table, and with --explain the why of everything."""
from __future__ import annotations

from typing import Optional

from nsa_policy.base.errors import InputError
from nsa_policy.core.bundle import get_bundle
from nsa_policy.core.decision import SHOWN_FIELDS, Decision, of_engine

SHOWN = SHOWN_FIELDS  # the Decision fields tagged `shown`


def shown_fields(decision: Decision) -> tuple[str, ...]:
    """The rows of this decision's table: another engine's outputs (tagged `engine`) are left out."""
    return of_engine(SHOWN, decision.engine)


def _source(decision: Decision, field: str) -> str:
    p = decision.provenance.get(field)
    if p is None:
        return ""
    text = {"user": "user", "env": "env", "rule": "rule", "model": "model", "none": ""}[p.source]
    if p.detail:
        text += f" {p.detail}"
    if p.overwrote:
        text += f" (overwrote {p.overwrote})"
    if p.label:
        text += f" [{p.label}]"
    return text


def policy_label(decision: Decision, requested: Optional[str] = None) -> str:
    """`sglang-0.5.22`, or for a release answered by an older bundle `sglang 0.5.23, answered by
    sglang-0.5.22's rules`: a release whose start-up policy did not change ships no bundle of its own.
    (`requested` is unused: the decision's own `answers_for` says it; kept for callers.)"""
    if decision.answers_for:
        from nsa_policy import engines

        title = engines.get(decision.engine).title or decision.engine
        release = decision.answers_for.partition("-")[2]
        return f"{title} {release}, answered by {decision.policy}'s rules"
    return str(decision.policy)


def render_table(decision: Decision, requested: Optional[str] = None) -> str:
    lines = []
    model = decision.model or decision.architecture
    lines.append(f"policy {policy_label(decision, requested)} ({decision.policy_digest}) · device {decision.device} "
                 f"({decision.device_class}) · model {model}" + (f" ({decision.model_family})" if decision.model_family else ""))
    if not decision.applies:
        lines.append("not a DSA model: no DSA setting applies")
    else:
        for field in shown_fields(decision):
            value = getattr(decision, field)
            lines.append(f"  {field:<28} {('-' if value is None else str(value)):<22} {_source(decision, field)}")
        if decision.heads_per_rank is not None:
            pad = ", ".join(f"{k} padded to {v}" for k, v in decision.padded_heads.items() if v != decision.heads_per_rank)
            lines.append(f"  {'heads_per_rank':<28} {decision.heads_per_rank:<22} {pad}")
        if decision.runtime:
            rt = decision.runtime
            lines.append(f"  {'planner':<28} mha_one_shot={rt.mha_one_shot} chunk={rt.mha_chunk_capacity} "
                         f"flashmla_auto_ratio={rt.flashmla_auto_ratio}")
    for title, items in (("errors", decision.errors), ("warnings", decision.warnings), ("notes", decision.notes)):
        if items:
            lines.append(f"{title}:")
            seen: set[tuple[str, str]] = set()
            for f in items:  # one finding per code and message: two rules may report the same clause
                if (f.code, f.message) not in seen:
                    seen.add((f.code, f.message))
                    lines.append(f"  {f.code} {f.message}")
    lines.append("REJECTED" if decision.errors else "resolved")
    return "\n".join(lines)


def _rejected_options(decision: Decision, field: str) -> list[str]:
    """For a backend output: every other backend of that phase, with why it was not chosen here (the
    capability matrix cell for this device class and KV dtype). Where a release is targeted, the backends
    it does not accept for the phase are no options: one line names them."""
    phase = {"prefill_backend": "prefill", "decode_backend": "decode"}.get(field)
    if phase is None or getattr(decision, field) is None or not decision.device_class or not decision.kv_cache_dtype:
        return []
    from nsa_policy import engines
    from nsa_policy.catalog.store import load_catalog

    cat = load_catalog()
    chosen = getattr(decision, field)
    release = decision.inputs.release if decision.inputs is not None else None
    engine = engines.get(decision.engine)
    out, unlisted = [], []
    for name, spec in cat.backends.items():
        if name == chosen or phase not in spec.phases:
            continue
        if release is not None and not engine.lists_backend(cat, name, phase, release):
            unlisted.append(name)
            continue
        try:
            cap = cat.capability(name, decision.device_class, decision.kv_cache_dtype, phase)
        except (KeyError, ValueError):
            continue
        if cap.status == "supported":
            out.append(f"      runs here, not chosen: {name} (the rule above prefers {chosen})")
        else:
            out.append(f"      rejected {name}: {cap.status} - {cap.reason}")
    if unlisted:
        out.append(f"      not options: {', '.join(unlisted)} ({engine.title or engine.name} {release} does not list them "
                   f"for {phase})")
    return out


def _model_source(decision: Decision) -> str:
    """Where the model's facts came from: the catalog entry, a config.json, or the caller."""
    m = decision.inputs.model if decision.inputs is not None else None
    if m is None or m.source == "catalog":
        return f"model catalog entry {decision.model or decision.architecture}"
    if m.source in ("mapping", "cli"):
        return "as given"
    return m.source


def render_explain(decision: Decision, requested: Optional[str] = None) -> str:
    """For each output: the rule that decided it and why; the options it rejected, with the reason; the
    other rules that could have set it and did not match; then the full trace."""
    bundle = get_bundle(decision.policy) if decision.policy else None
    lines = [render_table(decision, requested), "", "why:"]
    by_rule = {t.rule: t for t in decision.trace}
    for field in shown_fields(decision):
        p = decision.provenance.get(field)
        value = getattr(decision, field)
        if p is None:
            lines.append(f"  {field} = {value!r}: no rule set it")
            continue
        if p.rule is not None and bundle is not None:
            try:
                rule = bundle.rule(p.rule)
                # a value copied from a model fact is the model's: credit the fact and where it came from
                how = (f"the model's {p.fact} ({_model_source(decision)}), set by rule"
                       if p.source == "model" else "decided by rule")
                lines.append(f"  {field} = {value!r}: {how} {rule.id} ({rule.origin}) - {rule.description}"
                             + (f" [evidence: {', '.join(rule.evidence)}]" if rule.evidence else ""))
            except InputError:  # a decision from another version of the bundle
                lines.append(f"  {field} = {value!r}: rule {p.detail}")
        else:
            lines.append(f"  {field} = {value!r}: {p.source} {p.detail}".rstrip())
        lines.extend(_rejected_options(decision, field))
        if bundle is not None:
            unmatched = []
            for rule in bundle.rules:
                if field in rule.outputs and rule.id != p.rule:
                    t = by_rule.get(rule.id)
                    if t is not None and t.outcome != "fired":
                        unmatched.append(f"      did not apply: {rule.id} ({t.outcome}: {t.why})")
            lines.extend(dict.fromkeys(unmatched))  # one line per rule and reason
    if decision.trace:
        lines.append("")
        lines.append("trace (every rule, in order):")
        for t in decision.trace:
            lines.append(f"  [{t.stage}] {t.rule}: {t.outcome} - {t.why}")
    return "\n".join(lines)
