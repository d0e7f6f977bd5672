"""The machinery check stands on: points reproduce as commands/inputs, and the probe sees what the trace sees."""
from __future__ import annotations

from types import SimpleNamespace

from nsa_policy.catalog.store import load_catalog
from nsa_policy.core.bundle import get_bundle
from nsa_policy.core.evaluator import evaluate
from nsa_policy.verify.coverage import facts_from_case_input
from nsa_policy.verify.run import Probe, probe_bundle, record_of
from nsa_policy.verify.space import FactsBuilder, device_groups, standard_space


def sample(space, step=211):
    return [space.point(i) for i in range(0, len(space), step)]


def test_device_groups_are_proved_equivalent():
    cat = load_catalog()
    groups = device_groups(cat, [get_bundle(n) for n in ("default", "sglang-0.5.10")])
    assert sorted(c for g in groups for c in g) == sorted(cat.device_doc.classes)
    for group in groups:  # members agree on vendor and on every cell of the capability matrix
        rows = {(cat.device(c).vendor, tuple(cat.capability(b, c, kv, ph).status for b in cat.backends
                                             for kv in ("bfloat16", "fp8_e4m3") for ph in ("prefill", "decode")))
                for c in group}
        assert len(rows) == 1, group
    # a rule that names one class of a group splits it off
    naming = SimpleNamespace(rules=[SimpleNamespace(when={"device.class": {"in": ["sm121"]}})])
    assert ["sm121"] in device_groups(cat, [naming])
    assert ["sm120", "sm121"] in device_groups(cat, [SimpleNamespace(rules=[])])


def test_points_rebuild_as_case_inputs():
    """The example shown for a finding (as_input / command) gives the same decision as the space point."""
    bundle = get_bundle("default")
    space = standard_space([bundle])
    cat = load_catalog()
    builder = FactsBuilder(cat)
    for point in sample(space):
        a = evaluate(bundle, builder.facts(point), cat, trace=False)
        b = evaluate(bundle, facts_from_case_input(point.as_input()), cat, trace=False)
        assert record_of(a) == record_of(b), point.command()


def test_probe_matches_the_trace():
    """What the probe records as matched is exactly what the evaluator's own trace reports."""
    cat = load_catalog()
    for name in ("default", "sglang-0.5.10"):
        bundle = get_bundle(name)
        probe = Probe(bundle, cat)
        probed = probe_bundle(bundle, probe)
        space = standard_space([bundle])
        builder = FactsBuilder(cat)
        for point in sample(space, 409):
            facts = builder.facts(point)
            traced = evaluate(bundle, facts, cat, trace=True)
            probe.reset()
            fast = evaluate(probed, facts, cat, trace=False)
            assert record_of(fast) == record_of(traced)
            seen = {t.rule for t in traced.trace if t.outcome != "not_matched"}
            assert {probe.rules[i].id for i in probe.matched} == seen, point.command()


def test_memoised_catalog_decides_the_same():
    from nsa_policy.verify.run import memo_catalog

    plain, memo = load_catalog(), memo_catalog()
    for name in ("default", "sglang-pre-21783"):
        bundle = get_bundle(name)
        space = standard_space([bundle])
        builder = FactsBuilder(plain)
        for point in sample(space, 97):
            facts = builder.facts(point)
            a = evaluate(bundle, facts, plain, trace=False)
            b = evaluate(bundle, facts, memo, trace=False)
            assert record_of(a) == record_of(b) and a.findings == b.findings, point.command()
