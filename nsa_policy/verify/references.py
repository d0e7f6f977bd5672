"""Static checks of a compiled bundle: every name a rule uses exists, every rule has evidence.

The compiler already rejects unknown fact paths, outputs, codes and backends in `set`; these checks
cover what it cannot: literal values inside conditions (a misspelt device class makes a rule silently
dead), codes used outside their range, `wins_over` declarations, and evidence.
"""
from __future__ import annotations

import fnmatch
import re
from pathlib import Path
from typing import Any, Iterator, Optional

from nsa_policy.base.errors import closest
from nsa_policy.base.yaml_lines import load_yaml
from nsa_policy.catalog.codes import CodeRegistry
from nsa_policy.catalog.store import KV_DTYPES, Catalog
from nsa_policy.core.bundle import CompiledBundle, CompiledRule, Fixed
from nsa_policy.core.conditions import leaves
from nsa_policy.inputs import PACKAGES

# A description that cites where its behaviour comes from counts as evidence.
CITATION = re.compile(r"(sglang|flashinfer|vllm)\s*(PR\s*)?#\d+|PR\s*#\d+|POLICY\.md|rules/catalog|flashinfer\s*>=",
                      re.IGNORECASE)


def value_domains(catalog: Catalog, engine: str) -> dict[str, tuple[list[str], str]]:
    """fact path → (valid literal values, what they are), in the engine's own vocabulary: the catalog's
    names, then what the engine narrows or adds (its KV dtype and backend names)."""
    from nsa_policy import engines

    backends = catalog.backend_names
    domains: dict[str, tuple[list[str], str]] = {
        "device.class": (list(catalog.device_doc.classes), "device class"),
        "device.name": (catalog.device_choices, "catalog device"),
        "device.vendor": (list(dict.fromkeys(c.vendor for c in catalog.device_doc.classes.values())), "vendor"),
        "model.family": (list(catalog.model_doc.families), "model family"),
        "model.id": (catalog.model_ids, "catalog model"),
        "config.kv_cache_dtype": (["auto", *KV_DTYPES], "KV dtype"),
        "out.kv_cache_dtype": (list(KV_DTYPES), "KV dtype"),
        "config.prefill_backend": (backends, "backend"),
        "config.decode_backend": (backends, "backend"),
        "out.prefill_backend": (backends, "backend"),
        "out.decode_backend": (backends, "backend"),
        "cap.prefill.status": (["supported", "degraded", "unsupported"], "capability status"),
        "cap.decode.status": (["supported", "degraded", "unsupported"], "capability status"),
    }
    engines.get(engine).value_domains(catalog, domains)
    return domains


def _literals(pred: Any) -> list:
    if isinstance(pred, dict):
        out = []
        for op, arg in pred.items():
            if op in ("eq", "ne") and not isinstance(arg, dict):
                out.append(arg)
            elif op in ("in", "not_in") and isinstance(arg, list):
                out.extend(arg)
        return out
    if isinstance(pred, (list, tuple)) or pred is None:
        return []
    return [pred]


def literal_problems(rule: CompiledRule, catalog: Catalog, engine: str) -> Iterator[str]:
    domains = value_domains(catalog, engine)
    known_pkgs = set(PACKAGES) | {spec.package for spec in catalog.backends.values()}
    for path, pred in leaves(rule.when):
        if path.startswith("pkg.") and path[4:] not in known_pkgs:
            yield f"condition reads {path}, a package nothing installs; known: {', '.join(sorted(known_pkgs))}"
        dom = domains.get(path)
        if dom is None:
            continue
        valid, what = dom
        for lit in _literals(pred):
            if lit is not None and lit not in valid:
                near = closest(lit, valid)
                yield (f"condition on {path} names {lit!r}, not a {what}"
                       + (f"; did you mean {near!r}?" if near else f"; valid: {', '.join(map(str, valid))}"))
    kv_valid = domains["out.kv_cache_dtype"][0]
    for out, value in rule.sets:
        if out == "kv_cache_dtype" and isinstance(value, Fixed) and isinstance(value.literal, str) \
                and value.literal not in kv_valid:
            yield f"set.kv_cache_dtype {value.literal!r} is not one of {', '.join(kv_valid)}"


def code_problems(rule: CompiledRule, bundle: CompiledBundle, codes: CodeRegistry) -> Iterator[str]:
    code = rule.code
    if code is None:
        return
    if code.startswith("NSA4"):
        yield f"emits {code}, a lint-only code (NSA4xx); policy bundles use NSA0xx-NSA3xx"
    if code.startswith("NSA3") and not bundle.compat:
        yield f"emits {code}, an sglang-bug code (NSA3xx) meant for compatibility bundles only"
    doc = codes.codes.get(code)
    if doc is not None and rule.level != doc.level:
        yield f"emits {code} at level {rule.level}, but rules/codes.yaml says {doc.level}"


def wins_over_problems(bundle: CompiledBundle) -> Iterator[tuple[CompiledRule, str]]:
    for stage, rules in bundle.stages.items():
        ids = [r.id for r in rules]
        for pos, rule in enumerate(rules):
            for pattern in rule.wins_over:
                later = [i for i in ids[pos + 1:] if fnmatch.fnmatchcase(i, pattern)]
                if not later:
                    earlier = [i for i in ids[:pos] if fnmatch.fnmatchcase(i, pattern)]
                    why = (f"{', '.join(earlier)} comes before it, so it cannot win over it by order" if earlier
                           else f"no rule of stage {stage!r} matches it")
                    near = closest(pattern, ids)
                    yield rule, (f"wins_over {pattern!r}: {why}"
                                 + (f"; did you mean {near!r}?" if near and not earlier else ""))


def declared_wins(rule: CompiledRule, other_id: str) -> bool:
    return any(fnmatch.fnmatchcase(other_id, p) for p in rule.wins_over)


def _folder_source(origin: str, bundle: CompiledBundle) -> Optional[str]:
    """The `source:` of the bundle folder a rule is declared in."""
    folder = origin.rsplit(":", 1)[0].rsplit("/", 1)[0].rsplit("/", 1)[-1]
    for f in bundle.files:
        p = Path(f)
        if p.name == "bundle.yaml" and p.parent.name == folder:
            data = load_yaml(p)
            return data.get("source") if isinstance(data, dict) else None
    return None


def evidence_basis(rule: CompiledRule, bundle: CompiledBundle, codes: CodeRegistry) -> Optional[str]:
    """Where a rule's evidence is, or None: its own evidence, its code's, a citation, its bundle's source."""
    if rule.evidence:
        return "evidence: " + "; ".join(rule.evidence)
    if rule.code is not None:
        doc = codes.codes.get(rule.code)
        if doc is not None and doc.evidence:
            return f"code {rule.code}: " + "; ".join(doc.evidence)
    m = CITATION.search(rule.description)
    if m:
        return f"description cites {m.group(0)}"
    source = _folder_source(rule.origin, bundle)
    if source:
        return f"bundle source: {source}"
    return None
