"""The evaluator: facts + compiled bundle → Decision. Deterministic and pure."""
from __future__ import annotations

from functools import lru_cache
from typing import Any, Optional

from nsa_policy.engine.bundle import STAGES, CompiledBundle, CompiledRule
from nsa_policy.catalog.store import KV_DTYPES, Catalog
from nsa_policy.engine.decision import Decision, Finding, Provenance, RuntimeThresholds, TraceEntry
from nsa_policy.errors import closest
from nsa_policy.engine.facts import Facts
from nsa_policy.engine.namespace import FactNamespace, build_namespace, threshold_detail

_USER_OUTPUTS = (("kv_cache_dtype", "--kv-cache-dtype"), ("prefill_backend", "--nsa-prefill-backend"),
                 ("decode_backend", "--nsa-decode-backend"), ("page_size", "--page-size"))


@lru_cache(maxsize=1024)
def _provenance(source: str, detail: str, overwrote: Optional[str]) -> Provenance:
    return Provenance.model_construct(source=source, detail=detail, overwrote=overwrote)


@lru_cache(maxsize=64)
def _runtime(capacity: int, ratio: int, one_shot: bool) -> RuntimeThresholds:
    return RuntimeThresholds.model_construct(mha_chunk_capacity=capacity, flashmla_auto_ratio=ratio, mha_one_shot=one_shot)


def _seed_user_values(ns: FactNamespace, prov: dict) -> None:
    """Explicit user values are outputs from the start; fill rules then never touch them."""
    kv = ns["config.kv_cache_dtype"]
    seeds = {
        "kv_cache_dtype": kv if kv in KV_DTYPES else None,
        "prefill_backend": ns["config.nsa_prefill_backend"],
        "decode_backend": ns["config.nsa_decode_backend"],
        "page_size": ns["config.page_size"],
    }
    for out, flag in _USER_OUTPUTS:
        if seeds[out] is not None:
            ns[f"out.{out}"] = seeds[out]
            ns[f"prov.{out}"] = "user"
            prov[out] = _provenance("user", flag, None)
    if ns["input.threshold"] is not None:
        src = ns["input.threshold_source"]
        ns["out.dense_attn_kv_len_threshold"] = ns["input.threshold"]
        ns["prov.dense_attn_kv_len_threshold"] = "user" if src == "flag" else "env"
        prov["dense_attn_kv_len_threshold"] = _provenance("user" if src == "flag" else "env",
                                                          threshold_detail(ns) or "", None)


def _value(spec: Any, ns: FactNamespace, catalog: Catalog) -> Any:
    if isinstance(spec, dict):
        if "fact" in spec:
            return ns[spec["fact"]]
        fv = spec["first_valid"]
        kv = ns["out.kv_cache_dtype"]
        if kv is None:
            return None
        for cand in fv["candidates"]:
            if catalog.runs(cand, ns["device.class"], kv, fv["phase"], ns["model.index_topk"], ns.packages):
                return cand
        return None
    return spec


def _alternatives(spec: Optional[dict], ns: FactNamespace, catalog: Catalog) -> tuple[str, ...]:
    if not spec:
        return ()
    kind, arg = next(iter(spec.items()))
    dev, kv, topk = ns["device.class"], ns["out.kv_cache_dtype"], ns["model.index_topk"]
    if kind == "values":
        return tuple(str(v) for v in arg)
    if kind == "catalog_backends":  # every backend name of the catalog
        return tuple(catalog.backend_names)
    if kind == "sglang_choices":  # the backends sglang release `arg` lists as --nsa/--dsa-*-backend choices
        return tuple(catalog.sglang_choices(str(arg)))
    if kind == "backends":
        if kv is None:
            return ()
        current = ns[f"out.{arg}_backend"]
        return tuple(b for b in catalog.valid_backends(arg, dev, kv, topk, ns.packages) if b != current)
    if kind == "kv_dtypes":
        return tuple(k for k in KV_DTYPES if k != kv and all(
            catalog.valid_backends(p, dev, k, topk, ns.packages) for p in ("prefill", "decode")))
    if kind == "device_classes":
        seen = []
        for cls in catalog.device_doc.classes:
            if any(all(catalog.valid_backends(p, cls, k, topk) for p in ("prefill", "decode")) for k in KV_DTYPES):
                seen.append(cls)
        return tuple(seen)
    if kind == "backends_or_kv_dtypes":
        # The valid backends of this phase; when none runs this KV dtype here, the KV dtypes that would.
        found = _alternatives({"backends": arg}, ns, catalog)
        if found or kv is None:
            return found
        return tuple(f"kv_cache_dtype {k}" for k in _alternatives({"kv_dtypes": True}, ns, catalog))
    if kind == "parallel":
        return _parallel_alternatives(arg, ns)
    return ()


def _parallel_alternatives(what: str, ns: FactNamespace) -> tuple[str, ...]:
    """Shapes that divide evenly: dp sizes for this tp_size, or attention-TP sizes for these heads."""
    heads = ns["model.num_attention_heads"]
    dp, dp_attn = ns["config.dp_size"], ns["config.enable_dp_attention"]
    tp = ns["config.tp_size"] or (dp if dp_attn else 1)
    if what == "dp_size":
        return tuple(f"dp_size {d}" for d in range(1, tp + 1)
                     if tp % d == 0 and (not heads or heads % (tp // d) == 0))
    if not heads:
        return ()
    flag = "tp_size/dp_size" if dp_attn else "tp_size"
    return tuple(f"{flag} {a}" for a in range(1, heads + 1) if heads % a == 0)


def _render(rule: CompiledRule, ns: FactNamespace, alts: tuple[str, ...]) -> str:
    out = []
    for part in rule.message_parts:
        if isinstance(part, tuple):
            name = part[0]
            if name == "alternatives":
                out.append(", ".join(alts) if alts else "none")
            else:
                v = ns[name]
                out.append("unset" if v is None else (f"{v:g}" if isinstance(v, float) else str(v)))
        else:
            out.append(part)
    text = "".join(out)
    if rule.emit and rule.emit.suggest:
        near = closest(ns[rule.emit.suggest], alts) if ns[rule.emit.suggest] is not None else None
        if near:
            text += f" (did you mean {near!r}?)"
    return text


_PLANS: dict = {}


def _device_plan(bundle: CompiledBundle, ns: FactNamespace, device) -> dict[str, tuple[CompiledRule, ...]]:
    """The rules whose top-level device tests hold on this device, per stage: decided once per device."""
    key = (bundle.digest, bundle.files, device)
    plan = _PLANS.get(key)
    if plan is None:
        plan = {stage: tuple(r for r in rules if r.device_check is None or r.device_check(ns))
                for stage, rules in bundle.stages.items()}
        if len(_PLANS) > 4096:
            _PLANS.clear()
        _PLANS[key] = plan
    return plan


def evaluate(bundle: CompiledBundle, facts: Facts, catalog: Catalog, *, trace: bool = True,
             device_label: Optional[str] = None) -> Decision:
    ns = build_namespace(facts, catalog)
    prov: dict[str, Provenance] = {}
    findings: dict[str, list[Finding]] = {"error": [], "warning": [], "info": []}
    steps: list[TraceEntry] = []
    _seed_user_values(ns, prov)
    applies = facts.model.family is not None
    stages = ("not_dsa",) if not applies else _DSA_STAGES
    # Without a trace, rules ruled out by the device alone are skipped; with one, every rule is reported.
    plan = bundle.stages if trace else _device_plan(bundle, ns, facts.device)

    for stage in stages:
        for rule in plan.get(stage, ()):
            if trace:
                if not rule.check(ns):
                    steps.append(TraceEntry.model_construct(rule=rule.id, stage=stage, outcome="not_matched",
                                                            why=rule.explain(ns) or "condition false"))
                    continue
            elif rule.rest_check is not None and not rule.rest_check(ns):
                continue
            outcome, why = "fired", ""
            if rule.sets:
                changed, blocked, none_valid = [], [], []
                for out, spec in rule.sets:
                    key = "out." + out
                    current = ns[key]
                    if current is not None and not rule.overwrite:
                        if trace:
                            blocked.append(f"{out} already {current!r} ({ns['prov.' + out]})")
                        else:
                            blocked.append(out)
                        continue
                    value = _value(spec, ns, catalog)
                    if value is None:
                        none_valid.append(out)
                        continue
                    ns[key] = value
                    ns["prov." + out] = "rule"
                    replaced = None
                    if current is not None and current != value:
                        replaced = f"{current!r} ({prov[out].source}: {prov[out].detail})" if out in prov else repr(current)
                    if isinstance(spec, dict) and str(spec.get("fact", "")).startswith("model."):
                        prov[out] = _provenance("model", f"{spec['fact']} (rule {rule.id})", replaced)
                    else:
                        prov[out] = _provenance("rule", rule.id, replaced)
                    if trace:
                        changed.append(f"{out}={value!r}" + (f" over {current!r}" if replaced else ""))
                    else:
                        changed.append(out)
                if not changed:
                    if trace:
                        steps.append(TraceEntry.model_construct(
                            rule=rule.id, stage=stage, outcome="already_set" if blocked else "no_valid_candidate",
                            why="; ".join(blocked) or f"no candidate runs here for {', '.join(none_valid)}"))
                    if not rule.emit:
                        continue
                    outcome = "emitted"
                    if trace:
                        why = "; ".join(blocked)
                elif trace:
                    why = "set " + ", ".join(changed)
            if rule.emit:
                alts = _alternatives(rule.emit.alternatives, ns, catalog)
                f = Finding.model_construct(code=rule.emit.code, level=rule.level, message=_render(rule, ns, alts),
                                            rule=rule.id, fields=tuple(rule.emit.fields), alternatives=alts,
                                            evidence=rule.evidence)
                findings[rule.level].append(f)
                if outcome == "fired" and not rule.sets:
                    outcome = "emitted"
                if trace:
                    why = (why + "; " if why else "") + f"{f.code}: {f.message}"
            if trace:
                steps.append(TraceEntry.model_construct(rule=rule.id, stage=stage, outcome=outcome, why=why))
        if stage == "input" and findings["error"]:
            break  # malformed input: later stages would only repeat the problem

    get = ns.get
    runtime = None
    if applies and get("out.mha_one_shot") is not None:
        runtime = _runtime(get("out.mha_chunk_capacity") or 131072, get("out.flashmla_auto_ratio") or 512,
                           bool(get("out.mha_one_shot")))
    padded = {}
    if applies:
        for phase in ("prefill", "decode"):
            p = ns["pad." + phase]
            if p is not None:
                padded[phase] = int(p)
    for out, source in (("index_topk", "model"), ("attention_backend", "rule")):
        if get("out." + out) is not None and out not in prov:
            prov[out] = _provenance(source, "", None)
    return Decision.model_construct(
        applies=applies, policy=bundle.name, policy_digest=bundle.digest,
        device=device_label or facts.device.name, device_class=facts.device.device_class,
        model=facts.model.model_id, model_family=facts.model.family, architecture=facts.model.architecture,
        kv_cache_dtype=get("out.kv_cache_dtype"), prefill_backend=get("out.prefill_backend"),
        decode_backend=get("out.decode_backend"), page_size=get("out.page_size"),
        attention_backend=get("out.attention_backend"),
        dense_attn_kv_len_threshold=get("out.dense_attn_kv_len_threshold"), index_topk=get("out.index_topk"),
        kv_cache_layout=get("out.kv_cache_layout"), heads_per_rank=facts.derived.heads_per_rank, padded_heads=padded,
        runtime=runtime, warnings=tuple(findings["warning"]), errors=tuple(findings["error"]),
        notes=tuple(findings["info"]), provenance=prov, trace=tuple(steps), inputs=facts,
    )


_DSA_STAGES = tuple(s for s in STAGES if s != "not_dsa")
