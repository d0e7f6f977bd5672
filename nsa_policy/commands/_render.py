"""Human-readable output of a decision: a short table, and with --explain the why of everything."""
from __future__ import annotations

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
    return text


def render_table(decision: Decision) -> str:
    lines = []
    model = decision.model or decision.architecture
    lines.append(f"policy {decision.policy} ({decision.policy_digest}) · device {decision.device} "
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
            lines.extend(f"  {f.code} {f.message}" for f in items)
    lines.append("REJECTED" if decision.errors else "resolved")
    return "\n".join(lines)


def render_explain(decision: Decision) -> str:
    """For each output: where it came from and why; then every rule passed over and why."""
    bundle = get_bundle(decision.policy) if decision.policy else None
    lines = [render_table(decision), "", "why:"]
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
                lines.append(f"  {field} = {value!r}: rule {rule.id} ({rule.origin}) - {rule.description}"
                             + (f" [evidence: {', '.join(rule.evidence)}]" if rule.evidence else ""))
            except InputError:  # a decision from another version of the bundle
                lines.append(f"  {field} = {value!r}: rule {p.detail}")
        else:
            lines.append(f"  {field} = {value!r}: {p.source} {p.detail}".rstrip())
        if bundle is not None:
            for rule in bundle.rules:
                if field in rule.outputs and rule.id != p.rule:
                    t = by_rule.get(rule.id)
                    if t is not None and t.outcome != "fired":
                        lines.append(f"      passed over {rule.id}: {t.outcome} - {t.why}")
    if decision.trace:
        lines.append("")
        lines.append("trace (every rule, in order):")
        for t in decision.trace:
            lines.append(f"  [{t.stage}] {t.rule}: {t.outcome} - {t.why}")
    return "\n".join(lines)
