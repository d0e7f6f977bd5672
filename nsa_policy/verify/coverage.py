"""Case files as inputs, and which rules they exercise (`nsa-policy check --cases PATHS`).

A case file is the shape of tests/cases/*.yaml: `policy:` and `cases:` with `name`, `input`
(device, model or arch + index_topk + num_attention_heads, serving fields, `env:VAR`, `package:NAME`)
and `expect`. Coverage counts a rule as exercised by a case when it takes effect there (emits a
finding or sets an output the decision keeps); a rule that only matched is listed separately.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from nsa_policy.base.errors import InputError
from nsa_policy.catalog.store import load_catalog
from nsa_policy.core.bundle import CompiledBundle
from nsa_policy.core.evaluator import evaluate
from nsa_policy.core.facts import Facts


def facts_from_case_input(inp: dict, engine: str = "sglang") -> Facts:
    from nsa_policy.api import build_facts

    data = dict(inp)
    env = {k[4:]: str(data.pop(k)) for k in list(data) if k.startswith("env:")}
    packages = {k[8:]: str(data.pop(k)) for k in list(data) if k.startswith("package:")}
    if "device" not in data:
        raise InputError("device", None, hint="every case input names a device")
    device = data.pop("device")
    release = data.pop("release", None)  # the engine release targeted (a bundle answering several: which one)
    model: Any = data.pop("model", None)
    if model is None:
        if "arch" not in data:
            raise InputError("model", None, hint="a case input needs `model` or `arch`")
        model = {"architectures": [data.pop("arch")]}
        for key in ("index_topk", "num_attention_heads", "learnable_sink", "index_kpool", "index_topk_freq",
                    "index_topk_pattern", "qk_rope_head_dim", "model_type", "index_head_dim"):
            if key in data:
                model[key] = data.pop(key)
    # A case's underscored keys are the cases' own input vocabulary (nsa_prefill_backend, as the policy's
    # tables name it), not an engine's attribute: only flag-form keys are spellings a release judges.
    from nsa_policy.inputs import spellings_from

    flags = tuple(s for s in spellings_from(data, engine=engine) if s.startswith("--"))
    return build_facts(data, device=device, model=model, env=env, packages=packages, engine=engine, spellings=flags,
                       release=None if release is None else str(release))


def load_case_files(paths: list[str]) -> list[tuple[Optional[str], str, dict[str, Any]]]:
    """(file policy, case name, input) for every case of every file."""
    import yaml

    from nsa_policy.base.safe_io import load_yaml_text, read_text

    out = []
    for path in paths:
        p = Path(path)
        files = sorted(p.glob("*.yaml")) if p.is_dir() else [p]
        for f in files:
            try:  # regular files only, size cap, UTF-8, bounded nesting and aliases (safe_io)
                doc = load_yaml_text(read_text(f, field="--cases"), str(f), field="--cases")
            except yaml.YAMLError as exc:
                raise InputError("--cases", str(f), hint=f"unreadable: {exc}") from None
            if not isinstance(doc, dict) or not isinstance(doc.get("cases"), list):
                raise InputError("--cases", str(f), hint="a case file has `cases:` (a list)")
            for i, case in enumerate(doc["cases"]):
                if not isinstance(case, dict) or not isinstance(case.get("input"), dict):
                    raise InputError(f"--cases {f}: case {i}", case, hint="each case has an `input` mapping")
                out.append((doc.get("policy"), f"{f.stem}:{case.get('name', i)}", case["input"]))
    return out


def case_coverage(bundle: CompiledBundle, cases: list[tuple[str, str, dict]]) -> dict:
    """Which rules of the bundle the cases written for it exercise."""
    from nsa_policy.verify.run import probed_bundle

    catalog = load_catalog()
    probe, probed = probed_bundle(bundle, catalog)
    by_rule: dict[str, list[str]] = {r.id: [] for r in bundle.rules}
    matched_only: dict[str, list[str]] = {r.id: [] for r in bundle.rules}
    used, skipped = 0, []
    for policy, name, inp in cases:
        if policy not in (None, bundle.name):
            continue
        try:
            facts = facts_from_case_input(inp)
        except InputError as exc:  # a case of bad input (e.g. a misspelt name) stops before the rules
            skipped.append(f"{name}: {exc}")
            continue
        used += 1
        probe.reset()
        decision = evaluate(probed, facts, catalog, trace=False)
        if probe.pending is not None:
            probe.settle()
        took = {f.rule for f in decision.findings} | {probe.rules[i].id for i in probe.setter.values()}
        for rid in took:
            by_rule[rid].append(name)
        for i in probe.matched:
            rid = probe.rules[i].id
            if rid not in took:
                matched_only[rid].append(name)
    exercised = sum(1 for v in by_rule.values() if v)
    return {"bundle": bundle.name, "cases": used, "rules": len(by_rule), "exercised": exercised,
            "by_rule": by_rule, "matched_only": {k: v for k, v in matched_only.items() if v and not by_rule[k]},
            "not_exercised": [k for k, v in by_rule.items() if not v], "skipped": skipped}
