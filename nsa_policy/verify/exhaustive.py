"""`nsa-policy check`: prove a bundle over the whole enumerated space.

Findings (each with a minimal example input where one exists — fewest settings, then first):
- schema / reference / evidence: the bundle compiles; every name a rule uses exists; every rule has
  evidence or a cited reason;
- unreachable: a rule whose condition never holds (with the nearest miss and the tests that fail);
- shadowed: a rule that matches but never takes effect (an earlier rule always set its outputs);
- order-dependence: two rules of a stage that both match an input and would set an output to
  different values, where the bundle does not declare which wins (`wins_over` on the earlier rule;
  a later rule without `when` is a declared fallback; an earlier rule that only matches where the
  later one does is a declared special case);
- stale-declaration: a `wins_over` that never decides anything;
- order-read: a rule that read an output which a later rule then changed;
- crash / undecided: an input that raises, or is accepted with an output left unset;
- invariant: for non-compat bundles, the invariants in invariants.py (vllm_invariants.py for vLLM bundles).
"""
from __future__ import annotations

import fnmatch
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Optional

from nsa_policy.base.errors import RuleFileError
from nsa_policy.catalog.codes import load_codes
from nsa_policy.catalog.store import load_catalog
from nsa_policy.core.bundle import CompiledBundle, compile_bundle, concrete_bundles, get_bundle
from nsa_policy.core.evaluator import evaluate
from nsa_policy.verify.invariants import invariant_titles
from nsa_policy.verify.references import code_problems, declared_wins, evidence_basis, literal_problems, wins_over_problems
from nsa_policy.verify.run import RECORD_FIELDS, SpaceRun, near_misses, run_space
from nsa_policy.verify.space import FactsBuilder, Space, space_for

KIND_ORDER = ("schema", "reference", "evidence", "unreachable", "shadowed", "order-dependence", "stale-declaration",
              "order-read", "crash", "undecided", "invariant")


@dataclass
class Issue:
    kind: str
    subject: str
    message: str
    count: int = 0  # inputs of the space where it shows
    example: Optional[dict] = None


@dataclass
class CheckReport:
    bundle: str
    policy: str  # what was asked for (a name or a folder)
    compat: bool = False
    digest: str = ""
    inputs: int = 0
    seconds: float = 0.0
    space: list = field(default_factory=list)
    issues: list = field(default_factory=list)
    rules: list = field(default_factory=list)  # per rule: id, stage, matched, effective, evidence
    coverage: Optional[dict] = None

    @property
    def ok(self) -> bool:
        return not self.issues

    def to_dict(self) -> dict:
        return {"bundle": self.bundle, "policy": self.policy, "compat": self.compat, "digest": self.digest,
                "ok": self.ok, "inputs": self.inputs, "seconds": round(self.seconds, 3), "space": self.space,
                "issues": [asdict(i) for i in self.issues], "rules": self.rules, "coverage": self.coverage}


# ---------------------------------------------------------------- examples

def example_of(space: Space, index: int, bundle: CompiledBundle, policy: str) -> dict:
    """The input, the command that reproduces it, and what the bundle decides there."""
    point = space.point(index)
    facts = FactsBuilder().facts(point)
    d = evaluate(bundle, facts, load_catalog(), trace=False)
    status = "not applicable" if not d.applies else ("rejected" if d.errors else "accepted")
    outcome = {"status": status, **{f: getattr(d, f) for f in RECORD_FIELDS if getattr(d, f) is not None},
               "codes": sorted({f.code for f in d.findings})}
    return {"index": index, "block": point.block.name, "input": point.as_input(), "command": point.command(policy),
            "outcome": outcome}


def _trace_line(space: Space, index: int, bundle: CompiledBundle, rule_id: str) -> str:
    d = evaluate(bundle, FactsBuilder().facts(space.point(index)), load_catalog(), trace=True)
    entry = next((t for t in d.trace if t.rule == rule_id), None)
    if entry is None:
        return "the rule was not reached"
    why = entry.why
    for out in bundle.rule(rule_id).outputs:
        p = d.provenance.get(out)
        if p is not None:
            why += f"; {out} came from {p.source}{' ' + p.detail if p.detail else ''}"
    return f"{entry.outcome}: {why}"


# ---------------------------------------------------------------- static checks

def static_issues(bundle: CompiledBundle) -> list[Issue]:
    catalog, codes = load_catalog(), load_codes()
    out = []
    for rule in bundle.rules:
        for problem in literal_problems(rule, catalog, bundle.engine):
            out.append(Issue("reference", rule.id, f"{rule.origin}: {problem}"))
        for problem in code_problems(rule, bundle, codes):
            out.append(Issue("reference", rule.id, f"{rule.origin}: {problem}"))
        if evidence_basis(rule, bundle, codes) is None:
            out.append(Issue("evidence", rule.id, f"{rule.origin}: no evidence - add `evidence:` (an issue, PR or "
                                                  "spec section), or cite the source in the description"))
    for rule, problem in wins_over_problems(bundle):
        out.append(Issue("reference", rule.id, f"{rule.origin}: {problem}"))
    return out


# ---------------------------------------------------------------- dynamic checks

def _subset(a: bytearray, b: bytearray) -> bool:
    """Every input where a holds, b holds too."""
    return (int.from_bytes(a, "little") & ~int.from_bytes(b, "little")) == 0


def dynamic_issues(bundle: CompiledBundle, space: Space, run: SpaceRun, policy: str,
                   workers: Optional[int] = None) -> list[Issue]:
    ex = lambda i: example_of(space, i, bundle, policy)  # noqa: E731
    out: list[Issue] = []
    never = tuple(r.id for r in bundle.rules if run.count("matched", r.id) == 0)
    near = near_misses(bundle, space, never, workers=workers)
    for rid in never:
        info = near[rid]
        rule = bundle.rule(rid)
        msg = f"{rule.origin}: never fires over the {run.size} inputs of the space"
        if info["never"]:
            msg += "; these tests never hold: " + "; ".join(info["never"])
        example = None
        if info["best"] is not None:
            example = ex(info["best"][-1])
            if info["failing"]:
                msg += f"; nearest input fails only: {'; '.join(info['failing'])}"
        out.append(Issue("unreachable", rid, msg, 0, example))
    for rule in bundle.rules:
        if rule.id in never or run.count("effective", rule.id):
            continue
        idx = run.example("matched", rule.id)
        if idx is None:  # not in `never`, so it matched somewhere
            raise RuntimeError(f"rule {rule.id} counted as matched but has no example input")
        example = ex(idx)
        example["rule_trace"] = _trace_line(space, idx, bundle, rule.id)
        out.append(Issue("shadowed", rule.id,
                         f"{rule.origin}: matches {run.count('matched', rule.id)} inputs but never takes effect: "
                         "an earlier rule always sets what it sets", run.count("matched", rule.id), example))
    used: dict[tuple, int] = {}
    for (a, b, output), agg in sorted(run.conflicts.items(), key=lambda kv: (kv[0][0] or "", kv[0][1], kv[0][2])):
        later = bundle.rule(b)
        if later.when is None:
            continue  # an unconditional rule is a declared fallback
        if a is not None:
            earlier = bundle.rule(a)
            if declared_wins(earlier, b):
                for p in earlier.wins_over:
                    if fnmatch.fnmatchcase(b, p):
                        used[(a, p)] = used.get((a, p), 0) + agg.count
                continue
            if _subset(run.matched[a], run.matched[b]):
                continue  # a special case placed before its general rule
        cur, would = agg.info
        who = f"rule {a}" if a else "an earlier rule"
        out.append(Issue("order-dependence", f"{a} > {b}",
                         f"{output} depends on rule order in {agg.count} inputs: {who} sets {cur!r} first, "
                         f"{b} ({later.origin}) would set {would!r}; declare `wins_over: [{b}]` on {a} if that "
                         "is intended, or make the conditions exclusive", agg.count, ex(agg.example)))
    for rule in bundle.rules:
        for p in rule.wins_over:
            if (rule.id, p) not in used and any(fnmatch.fnmatchcase(r.id, p) for r in bundle.rules):
                out.append(Issue("stale-declaration", rule.id,
                                 f"{rule.origin}: wins_over {p!r} never decides an output over the space "
                                 "(the rules never both match with different values); remove it"))
    for (rid, output), agg in sorted(run.order_reads.items()):
        seen, final, setter = agg.info
        out.append(Issue("order-read", rid,
                         f"{bundle.rule(rid).origin}: reads {output} while it is {seen!r}, but "
                         f"{setter or 'a later rule'} then sets it to {final!r} ({agg.count} inputs): the result "
                         "depends on evaluation order", agg.count, ex(agg.example)))
    for msg, agg in sorted(run.crashes.items()):
        out.append(Issue("crash", msg, f"evaluation raised {msg}", agg.count, ex(agg.example)))
    for missing, agg in sorted(run.undecided.items()):
        out.append(Issue("undecided", ",".join(missing), f"accepted with {', '.join(missing)} unset",
                         agg.count, ex(agg.example)))
    for (name, _detail), agg in sorted(run.violations.items()):
        out.append(Issue("invariant", name, f"{invariant_titles()[name]}: {agg.info}", agg.count, ex(agg.example)))
    out.extend(_rejections_without_alternatives(bundle, space, run, policy))
    return out


def _rejections_without_alternatives(bundle: CompiledBundle, space: Space, run: SpaceRun, policy: str) -> list[Issue]:
    """Invariant 4: a rejection that lists no alternative, where changing the fields at fault is accepted."""
    found: dict[tuple, list] = {}
    records = run.records
    for index, dims, rules in run.no_alternatives:
        point = space.point(index)
        fix = next((n for n in space.neighbours(point, dims) if records[n][0] == "accepted"), None)
        if fix is None:
            continue
        slot = found.setdefault(rules, [0, None, None])
        slot[0] += 1
        key = point.sort_key
        if slot[1] is None or key < slot[1]:
            slot[1], slot[2] = key, fix
    out = []
    for rules, (count, key, fix) in sorted(found.items()):
        example = example_of(space, key[1], bundle, policy)
        example["accepted_alternative"] = space.point(fix).as_input()
        out.append(Issue("invariant", "rejection-lists-alternative",
                         f"{invariant_titles()['rejection-lists-alternative']}: rejected by {', '.join(rules)} with no "
                         f"alternative listed, though changing the fields at fault is accepted ({count} inputs)",
                         count, example))
    return out


# ---------------------------------------------------------------- entry point

def load_for_check(policy: str) -> CompiledBundle:
    """A shipped bundle by name (cached) or a rule folder (compiled fresh, so edits are seen)."""
    from pathlib import Path

    if (Path(policy) / "bundle.yaml").is_file():
        return compile_bundle(policy)
    return get_bundle(policy)


def checked_bundles() -> list[str]:
    """The shipped concrete bundles `check` checks: every registered engine's (each has its space, its
    invariants, the literal values its rules may name and the outputs its decisions hold)."""
    from nsa_policy import engines

    return [n for n in concrete_bundles() if get_bundle(n).engine in engines.names()]


def check_bundle(policy: str, *, space: Optional[Space] = None, workers: Optional[int] = None,
                 cases: Optional[list] = None, quiet: bool = False, label: Optional[str] = None) -> CheckReport:
    """Check one bundle. Raises InputError for an unknown policy name, or a bundle of an engine that is not
    registered; a rule file that does not compile is reported as a `schema` issue. A progress line
    (`label`, default `check NAME`) shows on a terminal's stderr unless `quiet`."""
    from nsa_policy.progress import Progress

    started = time.perf_counter()
    try:
        bundle = load_for_check(policy)
    except RuleFileError as exc:
        return CheckReport(bundle=policy, policy=policy, issues=[Issue("schema", exc.path, str(exc))],
                           seconds=time.perf_counter() - started)
    from nsa_policy import engines

    engines.get(bundle.engine, "--policy")  # an engine that is not registered has no space or invariants
    space = space or space_for([bundle])
    report = CheckReport(bundle=bundle.name, policy=policy, compat=bundle.compat, digest=bundle.digest,
                         inputs=len(space), space=space.summary())
    issues = static_issues(bundle)
    with Progress(label or f"check {bundle.name}", len(space), quiet=quiet) as bar:
        run = run_space(bundle, space, workers=workers, progress=bar.advance)
    issues += dynamic_issues(bundle, space, run, policy, workers=workers)
    issues.sort(key=lambda i: (KIND_ORDER.index(i.kind), i.subject))
    report.issues = issues
    codes = load_codes()
    report.rules = [{"id": r.id, "stage": r.stage, "origin": r.origin, "matched": run.count("matched", r.id),
                     "effective": run.count("effective", r.id), "evidence": evidence_basis(r, bundle, codes)}
                    for r in bundle.rules]
    if cases:
        from nsa_policy.verify.coverage import case_coverage

        report.coverage = case_coverage(bundle, cases)
    report.seconds = time.perf_counter() - started
    return report


# ---------------------------------------------------------------- rendering

def _example_lines(example: Optional[dict], indent: str = "    ") -> list[str]:
    if not example:
        return []
    lines = [f"{indent}example: {example['command']}"]
    o = example["outcome"]
    shown = ", ".join(f"{k}={v}" for k, v in o.items() if k not in ("status", "codes"))
    lines.append(f"{indent}  → {o['status']}" + (f": {shown}" if shown else "") +
                 (f" [{', '.join(o['codes'])}]" if o["codes"] else ""))
    if "rule_trace" in example:
        lines.append(f"{indent}  rule there: {example['rule_trace']}")
    if "accepted_alternative" in example:
        alt = ", ".join(f"{k}={v}" for k, v in example["accepted_alternative"].items())
        lines.append(f"{indent}  accepted instead: {alt}")
    return lines


def render_text(report: CheckReport) -> str:
    kind = "compat" if report.compat else "policy"
    head = (f"check {report.bundle} ({kind}, {report.digest}): {report.inputs} inputs in {report.seconds:.1f} s - "
            + ("OK" if report.ok else f"{len(report.issues)} finding(s)"))
    lines = [head]
    for issue in report.issues:
        count = f" ({issue.count} inputs)" if issue.count else ""
        lines.append(f"  [{issue.kind}] {issue.subject}{count}: {issue.message}")
        lines.extend(_example_lines(issue.example))
    if report.coverage:
        lines.extend(render_coverage(report.coverage))
    return "\n".join(lines)


def render_coverage(cov: dict) -> list[str]:
    lines = [f"  case coverage: {cov['exercised']} of {cov['rules']} rules exercised by {cov['cases']} cases"]
    for rid, names in cov["by_rule"].items():
        shown = ", ".join(n.split(":", 1)[-1] for n in names[:3]) + (f" (+{len(names) - 3})" if len(names) > 3 else "")
        lines.append(f"    {rid:<48} {shown if names else '-- not exercised'}")
    for note in cov.get("skipped", []):
        lines.append(f"    skipped: {note}")
    return lines


def render_markdown(report: CheckReport) -> str:
    found = "no findings" if report.ok else f"{len(report.issues)} findings"
    lines = [f"## check `{report.bundle}`", "", f"{report.inputs} inputs, {len(report.rules)} rules, {found}.", ""]
    for issue in report.issues:
        lines.append(f"- **{issue.kind}** `{issue.subject}`: {issue.message}")
        if issue.example:
            lines.append(f"  - example: `{issue.example['command']}`")
    return "\n".join(lines)


def render_json(reports: list[CheckReport]) -> str:
    return json.dumps({"ok": all(r.ok for r in reports), "bundles": [r.to_dict() for r in reports]}, default=str)
