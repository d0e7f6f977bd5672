"""`nsa-policy diff A B`: every input whose decision differs between two bundles, in change classes.

A change class is one kind of change with one cause: an output that went from some values to others
because rule X (in A) and rule Y (in B) decided it; a finding code that appeared or disappeared,
with the rule that emits it, or whose level changed (a note that became sglang's warning); or
accepted ↔ rejected (a refusal: a finding at level error). Each class lists its transitions (from → to,
with counts), the region of the space it covers (device / dtype / flag values seen, omitting
dimensions where every value is affected) and a minimal example input.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

from nsa_policy.core.bundle import CompiledBundle
from nsa_policy.core.decision import field_title
from nsa_policy.verify.run import RECORD_FIELDS, SpaceRun, record_of, run_space
from nsa_policy.verify.space import Space, space_for


@dataclass
class ChangeClass:
    kind: str  # output | code-added | code-removed | code-level | status
    what: str  # the output name, the code, or "status"
    cause_a: Optional[str]
    cause_b: Optional[str]
    count: int = 0
    transitions: Counter = field(default_factory=Counter)
    region: dict = field(default_factory=dict)  # dimension → set of labels
    blocks: set = field(default_factory=set)  # blocks of the space it has inputs in
    rules: set = field(default_factory=set)  # the rules behind a status or finding change
    also: Counter = field(default_factory=Counter)  # status changes: the other error codes alongside
    best: Optional[tuple] = None
    example: Optional[dict] = None
    example_move: Optional[tuple] = None  # the example's own transition (from, to)

    def title(self) -> str:
        if self.kind == "output":
            moves = ", ".join(f"{fmt_value(a)} → {fmt_value(b)}" for (a, b), _ in self.transitions.most_common(4))
            more = f" (+{len(self.transitions) - 4} more)" if len(self.transitions) > 4 else ""
            return f"{field_title(self.what)}: {moves}{more}"
        if self.kind == "status":
            ((a, b), _), = self.transitions.most_common(1)
            if self.cause_b:
                return f"{a} → {b} (first error {self.cause_b})"
            return f"{a} → {b}" + (f" (was {self.cause_a})" if self.cause_a else "")
        from nsa_policy.catalog.codes import load_codes

        doc = load_codes().codes.get(self.what)
        about = f" ({doc.summary})" if doc is not None else ""
        if self.kind == "code-level":
            moves = ", ".join(f"{a} → {b}" for (a, b), _ in self.transitions.most_common())
            return f"{self.what}{about}: {moves}"
        return f"{'new' if self.kind == 'code-added' else 'no longer'} {self.what}{about}"

    def cause(self) -> str:
        rules = ", ".join(sorted(self.rules))
        if self.kind == "code-added":
            return f"emitted by {rules}"
        if self.kind == "code-removed":
            return f"was emitted by {rules}"
        if self.kind == "code-level":
            return f"emitted by {rules}"
        if self.kind == "status":
            also = ", ".join(f"{code} ({n})" for code, n in sorted(self.also.items()))
            return (f"{self.cause_a or self.cause_b} from {rules}" + (f"; alongside: {also}" if also else "")
                    if rules else "no errors any more")
        return f"{self.cause_a or '-'} → {self.cause_b or '-'}"


@dataclass
class DiffReport:
    a: str
    b: str
    inputs: int
    changed: int
    classes: list
    dimensions: dict  # block → dimension → all its labels, in order (to leave out "any value")
    source: str  # "space" or the inputs file

    def to_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "inputs": self.inputs, "changed": self.changed, "source": self.source,
                "classes": [{"kind": c.kind, "what": c.what, "title": c.title(), "cause_a": c.cause_a,
                             "cause_b": c.cause_b, "rules": sorted(c.rules), "inputs": c.count,
                             "transitions": [{"from": a, "to": b, "inputs": n}
                                             for (a, b), n in c.transitions.most_common()],
                             "region": region_of(c, self.dimensions), "example": c.example} for c in self.classes]}


def fmt_value(v: Any) -> str:
    return "unset" if v is None else str(v)


def _errors(codes: tuple) -> tuple[Optional[str], set, set]:
    """(the primary error code — the lowest, the most basic —, the rules emitting it, the other error codes).

    Errors are findings at level error, whatever their code: a compat bundle's refusals are NSA3xx."""
    errs = [(code, rule) for code, rule, level in codes if level == "error"]
    if not errs:
        return None, set(), set()
    first = min(c for c, _ in errs)
    return first, {r for c, r in errs if c == first}, {c for c, _ in errs if c != first}


def changes(rec_a: tuple, rec_b: tuple) -> list[tuple]:
    """(class key, transition, rules behind it) for every way two decisions of one input differ.

    A status change (accepted ↔ rejected) is one class per primary error code; outputs are compared
    only where both sides accept (a rejected decision's outputs are never used), and findings only
    where both sides agree on the status."""
    out = []
    sa, va, ca, codes_a = rec_a
    sb, vb, cb, codes_b = rec_b
    if sa != sb:
        ea, ra, xa = _errors(codes_a) if sa == "rejected" else (None, set(), set())
        eb, rb, xb = _errors(codes_b) if sb == "rejected" else (None, set(), set())
        out.append((("status", "status", ea, eb), (sa, sb), (ra | rb, xa | xb)))
        return out
    if sa == "accepted":
        for i, name in enumerate(RECORD_FIELDS):
            if va[i] != vb[i]:
                out.append((("output", name, ca[i], cb[i]), (va[i], vb[i]), (set(), set())))
    by_code_a: dict[str, set] = {}
    by_code_b: dict[str, set] = {}
    levels_a: dict[str, set] = {}
    levels_b: dict[str, set] = {}
    for code, rule, level in codes_a:
        by_code_a.setdefault(code, set()).add(rule)
        levels_a.setdefault(code, set()).add(level)
    for code, rule, level in codes_b:
        by_code_b.setdefault(code, set()).add(rule)
        levels_b.setdefault(code, set()).add(level)
    for code in sorted(set(by_code_a) - set(by_code_b)):
        out.append((("code-removed", code, None, None), (code, None), (by_code_a[code], set())))
    for code in sorted(set(by_code_b) - set(by_code_a)):
        out.append((("code-added", code, None, None), (None, code), (by_code_b[code], set())))
    for code in sorted(set(by_code_a) & set(by_code_b)):
        if levels_a[code] != levels_b[code]:
            move = ("/".join(sorted(levels_a[code])), "/".join(sorted(levels_b[code])))
            out.append((("code-level", code, None, None), move, (by_code_b[code], set())))
    return out


def _group(pairs: Iterable[tuple[tuple, tuple, str, dict[str, str], tuple[int, int], dict[str, Any]]]) -> list[ChangeClass]:
    """pairs: (record A, record B, block, region labels, sort key, example) → change classes."""
    classes: dict[tuple, ChangeClass] = {}
    for rec_a, rec_b, block, region, key, example in pairs:
        for ckey, move, (rules, also) in changes(rec_a, rec_b):
            c = classes.get(ckey)
            if c is None:
                c = classes[ckey] = ChangeClass(*ckey)
            c.rules |= rules
            c.also.update(also)
            c.count += 1
            c.transitions[move] += 1
            c.blocks.add(block)
            for dim, label in region.items():
                c.region.setdefault(dim, set()).update(label if isinstance(label, tuple) else (label,))
            if c.best is None or key < c.best:
                c.best, c.example, c.example_move = key, example, move
    order = {"status": 0, "output": 1, "code-removed": 2, "code-added": 3, "code-level": 4}
    return sorted(classes.values(), key=lambda c: (order[c.kind], -c.count, c.what, str(c.cause_a), str(c.cause_b)))


def region_of(c: ChangeClass, dimensions: dict) -> dict:
    """The dimensions the class does not cover completely (within the blocks it touches), with the
    values it does cover. A per-dimension projection: an over-approximation of the exact set."""
    out = {}
    for dim, labels in c.region.items():
        order: list = []
        for block in sorted(c.blocks):
            order.extend(label for label in dimensions.get(block, {}).get(dim, []) if label not in order)
        if not set(order) <= labels:
            out[dim] = [label for label in order if label in labels] + sorted(labels - set(order))
    return out


def _space_dimensions(space: Space) -> dict:
    return {block.name: {d.name: [x for v in d.values for x in (v.covers or (v.label,))] for d in block.dims}
            for block in space.blocks}


def diff_space(a: CompiledBundle, b: CompiledBundle, space: Optional[Space] = None, *,
               workers: Optional[int] = None, policy_a: Optional[str] = None,
               policy_b: Optional[str] = None, quiet: bool = False) -> DiffReport:
    """Diff two bundles over the space (by default their engine's: space_for). A progress line
    shows on a terminal's stderr unless `quiet`."""
    from nsa_policy.progress import Progress

    space = space or space_for([a, b])
    runs = []
    with Progress(f"diff {a.name} → {b.name}", 2 * len(space), quiet=quiet) as bar:
        for bundle in (a, b):
            runs.append(run_space(bundle, space, workers=workers, invariants=False, progress=bar.advance))
    return diff_runs(a, b, space, runs[0], runs[1], policy_a=policy_a, policy_b=policy_b)


def diff_runs(a: CompiledBundle, b: CompiledBundle, space: Space, run_a: SpaceRun, run_b: SpaceRun, *,
              policy_a: Optional[str] = None, policy_b: Optional[str] = None) -> DiffReport:
    """The diff of two bundles' runs over the same space (each run once, reused across diffs)."""
    def pairs():
        for i, (ra, rb) in enumerate(zip(run_a.records, run_b.records)):
            if ra == rb or (ra[0] == rb[0] == "n/a" and ra[3] == rb[3]):
                continue
            if ra[:2] == rb[:2] and ra[3] == rb[3]:
                continue  # only the provenance differs: the same decision
            point = space.point(i)
            region = {}
            for d, v in zip(point.block.dims, point.values):
                region[d.name] = v.covers or (v.label,)
            example = {"index": i, "input": point.as_input(), "command_a": point.command(policy_a or a.name),
                       "command_b": point.command(policy_b or b.name)}
            yield ra, rb, point.block.name, region, point.sort_key, example

    materialised = list(pairs())
    classes = _group(materialised)
    return DiffReport(a=a.name, b=b.name, inputs=len(space), changed=len(materialised), classes=classes,
                      dimensions=_space_dimensions(space), source="space")


def diff_inputs(a: CompiledBundle, b: CompiledBundle, inputs: list[dict], source: str) -> DiffReport:
    """Diff over the inputs of a file (case-file style mappings)."""
    from nsa_policy.catalog.store import load_catalog
    from nsa_policy.core.evaluator import evaluate
    from nsa_policy.verify.coverage import facts_from_case_input

    catalog = load_catalog()
    pairs: list[tuple[tuple, tuple, str, dict[str, str], tuple[int, int], dict[str, Any]]] = []
    dims: dict[str, set[str]] = {}
    for n, inp in enumerate(inputs):
        facts = facts_from_case_input(inp, a.engine)  # vLLM cases use vLLM's argument names
        ra = record_of(evaluate(a, facts, catalog, trace=False))
        rb = record_of(evaluate(b, facts, catalog, trace=False))
        region = {k: str(v) for k, v in inp.items()}
        for k, v in region.items():
            dims.setdefault(k, set()).add(v)
        if ra[:2] == rb[:2] and ra[3] == rb[3]:
            continue
        pairs.append((ra, rb, "inputs", region, (0, n), {"input": inp}))
    keys = set(dims)
    for _, _, _, region, _, _ in pairs:
        for k in keys - set(region):
            region[k] = "unset"
    return DiffReport(a=a.name, b=b.name, inputs=len(inputs), changed=len(pairs), classes=_group(pairs),
                      dimensions={"inputs": {k: sorted(v | {"unset"}) for k, v in dims.items()}}, source=source)


def load_inputs(path: str) -> list[dict]:
    """A case file (`cases: [{input: …}]`) or a YAML/JSON list of input mappings."""
    import yaml

    from nsa_policy.base.errors import InputError
    from nsa_policy.base.safe_io import load_yaml_text, read_text

    p = Path(path)
    try:  # regular files only, size cap, UTF-8, bounded nesting and aliases (safe_io)
        doc = load_yaml_text(read_text(p, field="--inputs"), path, field="--inputs")
    except yaml.YAMLError as exc:
        raise InputError("--inputs", path, hint=f"unreadable: {exc}") from None
    items = doc.get("cases") if isinstance(doc, dict) else doc
    if not isinstance(items, list) or not items:
        raise InputError("--inputs", path, hint="expected a list of inputs, or a case file with `cases:`")
    out = []
    for i, item in enumerate(items):
        inp = item.get("input", item) if isinstance(item, dict) else None
        if not isinstance(inp, dict) or "device" not in inp:
            raise InputError(f"--inputs {path}: item {i}", item, hint="each input is a mapping with at least `device`")
        out.append(inp)
    return out


# ---------------------------------------------------------------- rendering

def region_text(region: dict, report: Optional[DiffReport] = None, c: Optional[ChangeClass] = None) -> str:
    if not region:
        return "every input of the space"
    parts = []
    for dim, labels in region.items():
        universe: list = []
        if report is not None and c is not None:
            for block in sorted(c.blocks):
                universe.extend(label for label in report.dimensions.get(block, {}).get(dim, []) if label not in universe)
        rest = [label for label in universe if label not in labels]
        if rest and len(rest) < len(labels):
            parts.append(f"{dim} ∉ {{{', '.join(rest)}}}")
        else:
            parts.append(f"{dim} ∈ {{{', '.join(labels)}}}")
    return "; ".join(parts)


def render_text(report: DiffReport) -> str:
    lines = [f"diff {report.a} → {report.b}: {report.changed} of {report.inputs} inputs decide differently, "
             f"{len(report.classes)} change classes"]
    for n, c in enumerate(report.classes, 1):
        lines.append(f"{n:>3}. {c.title()}  [{c.count} inputs; {c.cause()}]")
        lines.append(f"     where: {region_text(region_of(c, report.dimensions), report, c)}")
        if c.example:
            lines.append(f"     e.g.:  {c.example.get('command_b') or c.example['input']}")
    return "\n".join(lines)


def render_markdown(report: DiffReport, title: Optional[str] = None) -> str:
    lines = [f"# {title or f'What changes from `{report.a}` to `{report.b}`'}", "",
             f"Generated by `nsa-policy diff {report.a} {report.b} --format markdown` over "
             + ("the enumerated input space" if report.source == "space" else f"the inputs of `{report.source}`")
             + f": **{report.changed} of {report.inputs} inputs** decide differently, in "
               f"**{len(report.classes)} change classes**. Each class is one kind of change with one cause "
               "(the rule that decided it on each side); *where* lists only the dimensions that are not "
               "affected across all their values.", ""]
    sections = (("status", "Accepted / rejected"), ("output", "Outputs"), ("code-removed", "Findings that go away"),
                ("code-added", "New findings"), ("code-level", "Findings whose level changes"))
    lines += [f"| # | change | decided by (`{report.a}` → `{report.b}`) | inputs |", "|---|---|---|---|"]
    n = 0
    for kind, _ in sections:
        for c in (c for c in report.classes if c.kind == kind):
            n += 1
            by = c.cause() if kind == "output" else ", ".join(sorted(c.rules))
            lines.append(f"| {n} | {c.title()} | {by} | {c.count} |")
    lines.append("")
    n = 0
    for kind, heading in sections:
        members = [c for c in report.classes if c.kind == kind]
        if not members:
            continue
        lines += [f"## {heading}", ""]
        for c in members:
            n += 1
            lines.append(f"### {n}. {c.title()}")
            lines.append("")
            lines.append(f"- inputs: {c.count}")
            lines.append(f"- cause: {c.cause().replace('→', f'({report.a}) →')} ({report.b})"
                         if kind in ("output", "status") else f"- cause: {c.cause()}")
            if kind == "output" and len(c.transitions) > 1:
                lines.append("- transitions: " + ", ".join(f"{fmt_value(a)} → {fmt_value(b)} ({k})"
                                                           for (a, b), k in c.transitions.most_common(8)))
            lines.append(f"- where: {region_text(region_of(c, report.dimensions), report, c)}")
            if c.example and "command_b" in c.example:
                lines.append(f"- example: `{c.example['command_b']}`")
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def render_json(report: DiffReport) -> str:
    return json.dumps(report.to_dict(), default=str)
