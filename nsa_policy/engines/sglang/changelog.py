"""`nsa-policy diff --releases`: the changelog sglang never wrote (docs/sglang-releases.md).

Each release bundle (`sglang-<version>`) is diffed against the one before it over ONE enumerated
space, the standard space of all release bundles together, so every release's counts are over the
same inputs and a release's section does not depend on which other releases are rendered. Each
bundle is evaluated once and only two runs are held at a time (a run of ~60k inputs is tens of MB).

For every release: what changed per decision output and per refusal (the diff's change classes,
with the rules behind them and where in the space), how many inputs it affects, and a few inputs
with the decision before and after. Releases without a bundle of their own (0.5.15, 0.5.23, …)
are listed under the bundle that answers for them. Output is deterministic: no dates, no timings,
every order fixed.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from itertools import zip_longest
from typing import Any, Optional

from nsa_policy.core.bundle import CompiledBundle, get_bundle, list_bundles, release_bundle
from nsa_policy.core.bundle import release_owners as _all_owners
from nsa_policy.core.decision import field_title
from nsa_policy.verify.diff import ChangeClass, DiffReport, diff_runs, fmt_value, region_of, region_text
from nsa_policy.verify.run import RECORD_FIELDS, run_space
from nsa_policy.verify.space import Space, standard_space

COMMAND = "nsa-policy diff --releases --format markdown --out docs/sglang-releases.md"
TITLE = "sglang releases and their DSA start-up policy"
MAX_EXAMPLES = 6  # per release: the largest refusal and output classes first
_RELEASE = re.compile(r"^sglang-(\d+(?:\.\d+)+(?:(?:a|b|rc)\d+)?(?:\.post\d+)?)$")

# Hand-written context, kept next to the generator so the doc stays one generated file. Each
# statement was checked against the code on 2026-11-30; edit it here when it stops being true.
INTRO = """\
`--policy sglang-X` takes any release name: it resolves to the newest bundle at or below X
(`sglang-0.5.23` → `sglang-0.5.22`, `sglang-0.5.15.post1` → `sglang-0.5.15`, `sglang-0.5.12.post1` →
`sglang-0.5.12`); the decision's `policy` names the bundle that answered. `nsa-policy policies` lists
each bundle with the releases it answers for. Each bundle extends the previous one with a small diff
(`rules/policy/sglang-<version>/`).

Refusals (sglang raises at start-up) are errors, so the decision is rejected; sglang's bugs and
questionable outcomes are warnings with an NSA3xx code (`nsa-policy rule NSA3xx`, `rules/codes.yaml`).
How far each bundle agrees with its release's own start-up code is recorded in
`benchmarks/results/sglang-releases.md`.

Not reproduced (yet):

- Flag spellings, partly: the 0.5.20+ bundles refuse (NSA319) each spelling the release's parser does
  not have (`--nsa-*-backend`, the pre-0.5.14 prefill CP flags, flags added later) and the 0.5.13+
  bundles repeat sglang's deprecation warnings (NSA320), when the input says how it was spelt
  (resolve's flags, flag-form keys such as a `--config` file's; a field name such as
  `nsa_prefill_backend` is nsa-policy's own). The 0.5.13–0.5.19 bundles do not refuse flags added
  later (`sglang-0.5.14` takes `--dcp-size`, which 0.5.15 added).
  `--config` merging in 0.5.13–0.5.19 also refuses a key whose destination a deprecated alias shares
  (`dsa-prefill-backend: …`: ValueError "Unsupported config option"; `enable-dp-attention: true` from
  0.5.22) and a deprecated switch written `key: true` ("unrecognized arguments: true"); not modelled.
"""


def _version(name: str) -> Optional[str]:
    m = _RELEASE.match(name)
    return m.group(1) if m else None


def release_chain() -> list[str]:
    """The shipped release bundles, oldest first (sglang-pre-21783 is not a release)."""
    from nsa_policy.base.versions import parse_version

    named = [(parse_version(v), b) for b in list_bundles() if (v := _version(b)) is not None]
    return [b for _, b in sorted(named)]


def _base(release: str) -> str:
    return release.split(".post")[0]


@dataclass
class Step:
    """One release bundle and what changed from the bundle before it (None for the first)."""

    bundle: str
    previous: Optional[str]
    description: str
    releases: list[str]  # the releases this bundle answers for, its own (and its .post) first
    inherited: list[str]  # those without a bundle of their own (their policy did not change)
    report: Optional[DiffReport] = None
    examples: list[dict] = field(default_factory=list)

    @property
    def own(self) -> list[str]:
        return [r for r in self.releases if r not in self.inherited]

    def to_dict(self) -> dict:
        return {"bundle": self.bundle, "previous": self.previous, "releases": self.releases,
                "inherited": self.inherited, "description": self.description,
                "diff": self.report.to_dict() if self.report else None, "examples": self.examples}


@dataclass
class Changelog:
    steps: list[Step]
    space: Space
    chain: list[str]

    def to_dict(self) -> dict:
        return {"chain": self.chain, "inputs": len(self.space), "space": self.space.summary(),
                "steps": [s.to_dict() for s in self.steps]}


def _pick(chain: list[str], name: Optional[str], default: int) -> int:
    """A position in the chain from a bundle name or any release name (sglang-0.5.23 → sglang-0.5.22)."""
    from nsa_policy.base.errors import InputError

    if name is None:
        return default
    owner = name if name in chain else release_bundle(name if name.startswith("sglang-") else f"sglang-{name}")
    if owner not in chain:
        raise InputError("diff --releases", name, chain, hint="not an sglang release or release bundle")
    return chain.index(owner)


def flags_for(release: Optional[str]) -> dict[str, str]:
    """config field → the flag sglang `release` spells it with (for commands in that release's words)."""
    from nsa_policy.engines.sglang.args import load_args

    reg = load_args()
    if release is None:
        return {}
    out = {}
    for fld, arg in reg.by_field.items():
        flag = reg.spelling_for(arg.name, release)
        if flag:
            out[fld] = flag
    return out


def release_changelog(first: Optional[str] = None, last: Optional[str] = None, *, workers: Optional[int] = None,
                      quiet: bool = False) -> Changelog:
    """The steps from `first` to `last` (bundle or release names; default: every release bundle).

    The first step of the whole chain has no diff (it is the baseline); a range that starts later
    still diffs its first bundle against the one before it."""
    from nsa_policy.progress import Progress

    chain = release_chain()
    lo, hi = _pick(chain, first, 0), _pick(chain, last, len(chain) - 1)
    if lo > hi:
        from nsa_policy.base.errors import InputError

        raise InputError("diff --releases", f"{first} {last}", chain, hint="the first release is newer than the last")
    bundles = {name: get_bundle(name) for name in chain}
    space = standard_space(list(bundles.values()))  # one space for every release: counts compare
    owners = release_owners()
    wanted = chain[max(0, lo - 1):hi + 1]
    steps: list[Step] = []
    prev_run = None
    with Progress("diff --releases", len(space) * len(wanted), quiet=quiet) as bar:
        for pos, name in enumerate(wanted):
            bar.update(bar.done, label=f"diff --releases: {name} ({pos + 1}/{len(wanted)})")
            run = run_space(bundles[name], space, workers=workers, invariants=False, progress=bar.advance)
            index = chain.index(name)
            if index >= lo:
                previous = chain[index - 1] if index > 0 else None
                own = _version(name) or ""
                releases = owners.get(name, [])
                step = Step(bundle=name, previous=previous, description=bundles[name].description,
                            releases=releases, inherited=[r for r in releases if _base(r) != _base(own)])
                if previous is not None and prev_run is not None:
                    step.report = diff_runs(bundles[previous], bundles[name], space, prev_run, run,
                                            policy_a=previous, policy_b=name)
                    step.examples = examples(step, space, bundles[previous], bundles[name])
                steps.append(step)
            prev_run = run  # only two runs held at a time
    return Changelog(steps=steps, space=space, chain=chain)


# ---------------------------------------------------------------- examples: one input, before and after

def _outcome(decision: Any, other: Any) -> str:
    """What one side decides, in the words that show the difference from the other side."""
    if not decision.applies:
        return "not a DSA model here: no DSA defaults"
    if decision.errors:
        return "rejected: " + "; ".join(f"{e.code} {e.message}" for e in decision.errors)
    shown = [f"{field_title(f)} {fmt_value(getattr(decision, f))}" for f in RECORD_FIELDS
             if other is None or not other.applies or other.errors or getattr(decision, f) != getattr(other, f)]
    codes = sorted({f.code for f in decision.findings})
    other_codes = sorted({f.code for f in other.findings}) if other is not None else None
    text = "accepted" + (": " + ", ".join(shown) if shown else "")
    if codes != other_codes:
        text += " [" + (", ".join(codes) if codes else "no findings") + "]"
    return text


def examples(step: Step, space: Space, before: CompiledBundle, after: CompiledBundle) -> list[dict]:
    """Up to MAX_EXAMPLES inputs: the minimal input of the largest refusal and output change classes."""
    from nsa_policy.catalog.store import load_catalog
    from nsa_policy.core.evaluator import evaluate
    from nsa_policy.verify.space import FactsBuilder

    report = step.report
    if report is None:
        return []
    # refusal and output classes alternately, largest first, so both kinds of change get examples
    status = [c for c in report.classes if c.kind == "status"]
    outputs = [c for c in report.classes if c.kind == "output"]
    ranked = [c for pair in zip_longest(status, outputs) for c in pair if c is not None]
    ranked += [c for c in report.classes if c.kind not in ("status", "output")]
    catalog, builder = load_catalog(), FactsBuilder()
    flags = flags_for(_version(step.bundle))
    seen: set[int] = set()
    out: list[dict] = []
    for c in ranked:
        if len(out) >= MAX_EXAMPLES:
            break
        if c.example is None or c.example.get("index") in seen:
            continue
        index = c.example["index"]
        seen.add(index)
        point = space.point(index)
        facts = builder.facts(point)
        da = evaluate(before, facts, catalog, trace=False)
        db = evaluate(after, facts, catalog, trace=False)
        out.append({"class": _class_title(c), "input": point.as_input(), "command": point.command(flags=flags),
                    "before": _outcome(da, db), "after": _outcome(db, da)})
    return out


# ---------------------------------------------------------------- rendering

def _code_about(code: Optional[str]) -> str:
    from nsa_policy.catalog.codes import load_codes

    doc = load_codes().codes.get(code) if code else None
    return f" ({doc.summary})" if doc is not None else ""


def _class_title(c: ChangeClass) -> str:
    if c.kind == "status":
        ((a, b), _), = c.transitions.most_common(1)
        code = c.cause_b or c.cause_a
        return f"{a} → {b}" + (f", first error {code}{_code_about(code)}" if code else "")
    return c.title()


def _pct(n: int, total: int) -> str:
    return f"{100.0 * n / total:.1f} %" if total else "-"


def _versions(releases: list[str]) -> str:
    return ", ".join(releases) if releases else "(none)"


def _space_text(space: Space) -> str:
    devices = space.blocks[0].dims[0]
    groups = [f"{v.label} stands for {', '.join(v.covers)}" for v in devices.values if len(v.covers) > 1]
    blocks = ", ".join(f"{b.name} {b.size}" for b in space.blocks)
    return (f"Every count is over one enumerated space of **{len(space)} inputs**, the same for every release "
            f"(the standard space of all release bundles, as `nsa-policy check` builds it: {space.description}). "
            f"Blocks: {blocks}. "
            + (f"Device classes no rule tells apart are evaluated once ({'; '.join(groups)}), so a count is "
               "per representative. " if groups else "")
            + "An input counts as changed when its status, a recorded output (KV cache dtype, prefill and "
              "decode backend, page size, attention backend, dense-attention threshold, KV cache layout) "
              "or its finding codes differ; outputs are compared only where both sides accept.")


def _step_heading(step: Step) -> str:
    own = _versions(step.own)
    if step.previous is None:
        return f"## sglang {own}: `{step.bundle}` (the baseline)"
    return f"## sglang {own}: `{step.previous}` → `{step.bundle}`"


def _class_line(c: ChangeClass, report: DiffReport, a: str, b: str) -> str:
    where = region_text(region_of(c, report.dimensions), report, c)
    if c.kind == "status":
        rules = ", ".join(sorted(c.rules))
        also = ", ".join(f"{code} ({n})" for code, n in sorted(c.also.items()))
        by = (f"; refused by {rules}" if rules else "") + (f"; alongside: {also}" if also else "")
        return f"- **{_class_title(c)}**: {c.count} inputs{by}; where: {where}"
    if c.kind == "output":
        moves = ", ".join(f"{fmt_value(x)} → {fmt_value(y)} ({k})" for (x, y), k in c.transitions.most_common(6))
        more = f" (+{len(c.transitions) - 6} more)" if len(c.transitions) > 6 else ""
        return (f"- **{moves}{more}**: {c.count} inputs; decided by {c.cause_a or '-'} (`{a}`) → "
                f"{c.cause_b or '-'} (`{b}`); where: {where}")
    return f"- **{c.title()}**: {c.count} inputs; {c.cause()}; where: {where}"


def render_step_markdown(step: Step) -> str:
    lines = [_step_heading(step), ""]
    answers = f"Answers for sglang {_versions(step.releases)}"
    if step.inherited:
        answers += f" ({_versions(step.inherited)}: no bundle of their own, answered with these rules)"
    lines += [f"{answers}. The bundle says: {step.description}", ""]
    report = step.report
    if report is None:
        lines += ["The baseline of this changelog: the sections below are diffs from it. "
                  "`nsa-policy diff sglang-pre-21783 sglang-0.5.10` shows what PR #21783 changed before it.", ""]
        return "\n".join(lines)
    a, b = report.a, report.b
    lines += [f"**{report.changed} of {report.inputs} inputs ({_pct(report.changed, report.inputs)})** decide "
              f"differently from `{a}`, in {len(report.classes)} change classes.", ""]
    if not report.classes:
        lines += [f"No input of the enumerated space decides differently from `{a}`: the bundle's changes only "
                  "show on inputs the space does not vary.", ""]
        return "\n".join(lines)
    status = [c for c in report.classes if c.kind == "status"]
    if status:
        lines += [f"### Refusals ({sum(c.count for c in status)} inputs change status)", ""]
        lines += [_class_line(c, report, a, b) for c in status] + [""]
    outputs = [c for c in report.classes if c.kind == "output"]
    for name in RECORD_FIELDS:
        members = [c for c in outputs if c.what == name]
        if members:
            lines += [f"### {field_title(name)} ({sum(c.count for c in members)} inputs)", ""]
            lines += [_class_line(c, report, a, b) for c in members] + [""]
    findings = [c for c in report.classes if c.kind.startswith("code-")]
    if findings:
        lines += ["### Findings (warnings and notes; refusals are above)", ""]
        lines += [_class_line(c, report, a, b) for c in findings] + [""]
    if step.examples:
        lines += ["### Examples (one input, before and after)", ""]
        for ex in step.examples:
            lines += [f"- {ex['class']}: `{ex['command']}`",
                      f"  - `--policy {a}`: {ex['before']}",
                      f"  - `--policy {b}`: {ex['after']}"]
        lines.append("")
    return "\n".join(lines)


def render_markdown(log: Changelog) -> str:
    lines = [f"# {TITLE}", "",
             f"<!-- generated by `{COMMAND}`; do not edit by hand: the intro is nsa_policy/verify/changelog.py INTRO -->",
             "",
             "What each sglang release since 0.5.10 changed in the DSA (formerly NSA) start-up decisions, as the "
             "compatibility bundles that reproduce each release decide it, generated by diffing consecutive "
             f"bundles. Regenerate after any rule change with `{COMMAND}` (or `python scripts/gen_docs.py --only "
             "releases`); `tests/check/test_release_changelog.py` fails when a section is stale.", "",
             INTRO.rstrip(), "", "## Releases at a glance", "",
             "| sglang release | bundle | inputs that decide differently from the previous bundle | what changed "
             "(the bundle's description) |", "|---|---|---|---|"]
    for step in log.steps:
        own = _versions(step.own)
        if step.report is None:
            changed = "baseline"
        else:
            changed = f"{step.report.changed} ({_pct(step.report.changed, step.report.inputs)})"
        lines.append(f"| {own} | `{step.bundle}` | {changed} | {step.description} |")
        if step.inherited:
            lines.append(f"| {_versions(step.inherited)} | (`{step.bundle}`) | 0: no bundle of its own, "
                         f"`{step.bundle}`'s rules | |")
    lines += ["", _space_text(log.space), ""]
    for step in log.steps:
        lines.append(render_step_markdown(step))
    return "\n".join(lines).rstrip() + "\n"


def step_section(markdown: str, bundle: str) -> Optional[str]:
    """The section of a rendered changelog that belongs to `bundle` (from its heading to the next)."""
    start = None
    lines = markdown.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.startswith("## sglang ") and (f"→ `{bundle}`" in line or f": `{bundle}` (the baseline)" in line):
            start = i
        elif start is not None and line.startswith("## "):
            return "".join(lines[start:i])
    return "".join(lines[start:]) if start is not None else None


def render_text(log: Changelog) -> str:
    from nsa_policy.verify.diff import render_text as diff_text

    out = []
    for step in log.steps:
        head = f"sglang {_versions(step.releases)} ({step.bundle})"
        out.append(f"{head}: baseline" if step.report is None else f"{head}\n{diff_text(step.report)}")
    return "\n\n".join(out)


def render_json(log: Changelog) -> str:
    return json.dumps(log.to_dict(), default=str)


def release_owners() -> dict[str, list[str]]:
    """sglang release bundle → the sglang releases it answers for."""
    return _all_owners("sglang")


__all__ = ["COMMAND", "Changelog", "Step", "release_chain", "release_changelog", "release_owners",
           "render_json", "render_markdown", "render_text", "step_section"]
