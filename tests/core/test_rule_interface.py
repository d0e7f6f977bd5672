"""The public interface of compiled rules (engine/bundle.py): what a rule reads, what it can set,
what it emits and what its alternatives are. Consumers (lint, verify, render, docs) use only this;
these tests hold the interface to what evaluation actually does."""
from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import pytest

from nsa_policy.base.errors import InputError
from nsa_policy.catalog.store import load_catalog
from nsa_policy.core.alternatives import compile_alternatives, kinds
from nsa_policy.core.bundle import FirstValid, Fixed, FromFact, concrete_bundles, get_bundle
from nsa_policy.core.decision import OUTPUT_FIELDS, Decision
from nsa_policy.core.evaluator import evaluate
from nsa_policy.core.facts import Facts
from nsa_policy.core.namespace import INPUTS, build_namespace, inputs_of, known_path, outputs_read
from nsa_policy.engines.vllm.values import VllmFirstValid
from nsa_policy.verify.space import FactsBuilder, space_for

ROOT = Path(__file__).resolve().parents[2]
BUNDLES = concrete_bundles()


@cache
def _sample(engine: str = "sglang") -> tuple[Facts, ...]:
    """Facts from every 97th point of the engine's space (all devices, models, flags and dtypes appear):
    the standard space for sglang's bundles, vLLM's (its argument names) for the vllm-* bundles."""
    bundles = [b for b in (get_bundle(n) for n in BUNDLES) if b.engine == engine]
    space = space_for(bundles)
    builder = FactsBuilder(load_catalog())
    return tuple(builder.facts(space.point(i)) for i in range(0, len(space), 97))


@pytest.mark.parametrize("policy", BUNDLES)
def test_every_rule_describes_itself_in_known_terms(policy: str) -> None:
    bundle = get_bundle(policy)
    for rule in bundle.rules:
        assert all(known_path(p) for p in rule.all_reads), rule.id
        assert set(rule.reads) <= set(rule.all_reads)
        assert set(rule.outputs) <= set(OUTPUT_FIELDS), rule.id
        assert rule.inputs <= set(INPUTS), rule.id
        assert (rule.code is None) == (rule.emit is None) == (rule.level is None)
        if rule.emit and rule.emit.alternatives:
            assert rule.emit.alternatives.kind in kinds()
            assert set(rule.emit.alternatives.reads) <= set(rule.emit.reads)
        for out, value in rule.sets:
            assert isinstance(value, (Fixed, FromFact, FirstValid, VllmFirstValid)), (rule.id, out)
            assert set(value.reads) <= set(rule.all_reads)
        json.dumps(rule.describe())  # plain data, for docs and tools


def _facts_on(facts: Facts, **update) -> Facts:
    return facts.model_copy(update=update)


def _by_rule(decision: Decision) -> dict:
    """rule id → (matched?, its findings) for every rule the evaluation reached."""
    found: dict = {}
    for f in decision.findings:
        found.setdefault(f.rule, []).append((f.code, f.message, f.alternatives))
    return {t.rule: (t.outcome != "not_matched", tuple(found.get(t.rule, ()))) for t in decision.trace}


@pytest.mark.parametrize("policy", BUNDLES)
@pytest.mark.parametrize("what", ["device", "model"])
def test_a_rule_that_does_not_read_the_device_or_model_says_the_same_on_every_one(policy: str, what: str) -> None:
    """`inputs` is what lint relies on to keep a finding when a launch names no device or model:
    a rule without `device`/`packages` (or `model`) in its inputs matches, and words its finding,
    the same whichever device (or DSA model) the facts name."""
    bundle, catalog = get_bundle(policy), load_catalog()
    if what == "device":
        others = [catalog.device(c) for c in catalog.device_doc.classes]
        independent = {r.id for r in bundle.rules if r.emit and not r.inputs & {"device", "packages"}}
    else:
        others = [catalog.model(m) for m in catalog.model_ids if catalog.model(m).family is not None]
        independent = {r.id for r in bundle.rules if r.emit and "model" not in r.inputs}
    assert independent, "no rule to check"
    compared = 0
    for facts in _sample(bundle.engine)[::3]:
        if facts.model.family is None:
            continue
        seen: dict = {}
        for other in others:
            if what == "device":
                variant = _facts_on(facts, device=other)
            else:
                from nsa_policy.core.facts import derive

                variant = _facts_on(facts, model=other, derived=derive(other, facts.config))
            for rid, outcome in _by_rule(evaluate(bundle, variant, catalog, trace=True)).items():
                if rid in independent:
                    assert seen.setdefault(rid, outcome) == outcome, (rid, other)
                    compared += 1
    assert compared > 0


@pytest.mark.parametrize("policy", BUNDLES)
def test_the_values_a_rule_sets_are_what_its_value_spec_gives(policy: str) -> None:
    """Replaying the trace: for each output a rule set, ValueSpec.value on the namespace as it was
    gives the decided value (the namespace is rebuilt from the facts and the rule's inputs only)."""
    bundle, catalog = get_bundle(policy), load_catalog()
    checked = 0
    for facts in _sample(bundle.engine)[::5]:
        d = evaluate(bundle, facts, catalog, trace=False)
        ns = build_namespace(facts, catalog)
        for out, p in d.provenance.items():
            if p.rule is None or out not in Decision.model_fields:
                continue
            rule = bundle.rule(p.rule)
            assert out in rule.outputs
            spec = dict(rule.sets)[out]
            if isinstance(spec, FirstValid):
                ns["out.kv_cache_dtype"] = d.kv_cache_dtype  # the dtype decided before the backends
            for path in spec.reads:  # a fact computed from outputs (vllm.block_size): the outputs as decided
                if not path.startswith("out."):
                    for o in outputs_read(path):
                        ns[f"out.{o}"] = getattr(d, o)
            if not any(path.startswith("out.") for path in spec.reads):
                assert spec.value(ns, catalog) == getattr(d, out), (rule.id, out)
                checked += 1
    assert checked > 0


def test_provenance_names_the_rule_for_rule_and_model_sources() -> None:
    from nsa_policy import build_facts, decide

    d = decide(build_facts({}, device="b200", model="deepseek-ai/DeepSeek-V3.2", env={}, packages={}))
    bundle = get_bundle("default")
    threshold = d.provenance["dense_attn_kv_len_threshold"]
    assert threshold.source == "model" and threshold.rule is not None
    assert "dense_attn_kv_len_threshold" in bundle.rule(threshold.rule).outputs
    assert d.provenance["prefill_backend"].rule == d.provenance["prefill_backend"].detail
    env = decide(build_facts({"dense_attn_kv_len_threshold": 4096}, device="b200",
                             model="deepseek-ai/DeepSeek-V3.2", env={}, packages={}))
    assert env.provenance["dense_attn_kv_len_threshold"].rule is None  # the user's flag


@pytest.mark.parametrize("policy", BUNDLES)
def test_trace_on_and_off_decide_the_same(policy: str) -> None:
    bundle, catalog = get_bundle(policy), load_catalog()
    for facts in _sample(bundle.engine)[::4]:
        with_trace = evaluate(bundle, facts, catalog, trace=True)
        without = evaluate(bundle, facts, catalog, trace=False)
        assert with_trace.model_copy(update={"trace": ()}) == without
        assert without.trace == () and len(with_trace.trace) >= len(with_trace.findings)


def test_fact_dependencies() -> None:
    assert inputs_of("device.class") == {"device"}
    assert inputs_of("config.tp_size") == {"config"}
    assert inputs_of("pkg.flashinfer-python") == {"packages"}
    assert inputs_of("out.prefill_backend") == set(INPUTS)
    assert inputs_of("prov.page_size") == {"config", "env"}
    assert inputs_of("prov.page_size", overwrite=True) == set(INPUTS)
    assert outputs_read("cap.decode.status") == ("decode_backend", "kv_cache_dtype")
    assert outputs_read("pad.prefill_factor") == ("prefill_backend",)
    assert outputs_read("out.page_size") == ("page_size",)
    assert outputs_read("model.index_topk") == ()


def test_alternatives_kinds_check_their_argument() -> None:
    assert compile_alternatives(None) == (None, None)
    alt, problem = compile_alternatives({"backends": "prefil"})
    assert alt is None and "backends takes a phase" in problem
    alt, problem = compile_alternatives({"backend": "prefill"})
    assert alt is None and "takes one of" in problem
    alt, problem = compile_alternatives({"backends": "decode"})
    assert problem is None and alt.kind == "backends" and "out.decode_backend" in alt.reads


def test_a_bad_alternatives_argument_is_a_rule_file_error(tmp_path) -> None:
    from nsa_policy.base.errors import RuleFileError

    (tmp_path / "bundle.yaml").write_text("name: t\ndescription: t\n")
    (tmp_path / "70-validate.yaml").write_text(
        "stage: validate\nrules:\n  - id: t.bad\n    description: d\n    when: {device.class: sm90}\n"
        "    emit: {code: NSA100, message: m, alternatives: {kv_dtypes: maybe}}\n")
    with pytest.raises(RuleFileError, match=r"70-validate.yaml:\d+: rule 't.bad': emit.alternatives.kv_dtypes takes"):
        get_bundle(str(tmp_path))


def test_input_error_reason_is_the_message_without_field_and_value() -> None:
    hinted = InputError("tp_size", 3, hint="must divide 8")
    assert hinted.reason == "must divide 8" and str(hinted) == "tp_size: 3 is not valid (must divide 8)"
    listed = InputError("x", "ab", ["abc", "xyz"])
    assert listed.reason == f"did you mean {listed.suggestion!r}?; valid: abc, xyz"
    assert str(listed) == "x: 'ab' is not valid; " + listed.reason
    both = InputError("y", "q", ["z"], hint="h")
    assert both.reason == "h; valid: z" and str(both) == "y: 'q' is not valid (h); valid: z"


CONSUMERS = [p for p in sorted((ROOT / "nsa_policy").rglob("*.py")) if "engine" not in p.parts] + \
    sorted((ROOT / "scripts").rglob("*.py"))
# What consumers used to do instead of asking the interface.
FORBIDDEN = [
    (re.compile(r"from nsa_policy\.engine\.evaluator import [^\n]*\b_"), "a private evaluator helper"),
    (re.compile(r"(\.message|\.detail|str\(exc\))\.split\(\s*[\"']"), "parsing message text"),
    (re.compile(r"\[4:-8\]"), "slicing fact names"),
    (re.compile(r"\.spec\.(when|wins_over|set|emit)\b"), "the raw rule document instead of the compiled rule"),
    (re.compile(r"\.message_parts\b"), "the compiled message template"),
    (re.compile(r"startswith\(\(?\"(out|cap|pad|req|prov)\."), "namespace prefixes"),
]


def test_consumers_use_only_the_interface() -> None:
    hits = []
    for path in CONSUMERS:
        text = path.read_text(encoding="utf-8")
        for pattern, what in FORBIDDEN:
            for m in pattern.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                hits.append(f"{path.relative_to(ROOT)}:{line}: {what}")
    assert hits == []


def test_vllm_bundles_are_evaluated_over_vllm_s_own_space() -> None:
    """A vllm-* bundle refuses sglang's facts; its space (space.vllm_space) gives vLLM facts, every device
    class the vLLM catalog describes, and `check` says it does not check vLLM bundles rather than erring."""
    from nsa_policy.engines.vllm.catalog import load_vllm
    from nsa_policy.verify.exhaustive import check_bundle

    vllm = [get_bundle(b) for b in BUNDLES if get_bundle(b).engine == "vllm"]
    assert vllm
    space = space_for(vllm)
    assert {b.engine for b in space.blocks} == {"vllm"} and len(space) > 10000
    vendors = set(load_vllm().doc.indexer.block_sizes)
    assert {load_catalog().device(c).vendor for c in space.summary()[0]["dimensions"]["device"]} == vendors
    assert all(f.config.engine == "vllm" for f in _sample("vllm"))
    assert "--engine vllm" in space.point(0).command("vllm-default")
    with pytest.raises(InputError, match="different engines"):
        space_for([vllm[0], get_bundle("default")])
    # check runs vLLM's invariants over that space; XPU and CPU are in it, refused with NSA155
    assert {"xpu", "cpu"} <= {d for b in space.summary() for d in b["dimensions"]["device"]}
    assert check_bundle("vllm-0.33", quiet=True).ok
