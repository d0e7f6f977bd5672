"""Each rule of each bundle, tested from data: the cases in rules/policy/<bundle>/tests/*.yaml
(docs/rule-tests.md) run through one parametrised test, and a check that those cases fire every rule
of every shipped bundle (a new rule without a case fails here)."""
from __future__ import annotations

from functools import cache

import pytest

from nsa_policy import build_facts, decide
from nsa_policy.core.bundle import concrete_bundles, get_bundle
from nsa_policy.verify.rule_tests import CaseResult, facts_of, run_case, shipped_plan

PAIRS = [(run.policy, case) for run in shipped_plan() for case in run.cases]
IDS = [f"{policy}:{case.file.split('/')[-3]}/{case.file.split('/')[-1][:-5]}:{case.name}" for policy, case in PAIRS]


@cache
def _result(index: int) -> CaseResult:
    policy, case = PAIRS[index]
    return run_case(case, policy)


def test_the_data_files_hold_cases_for_every_shipped_bundle() -> None:
    assert {policy for policy, _ in PAIRS} == set(concrete_bundles())
    assert len(PAIRS) >= 94  # the hand-written rows these files replaced


@pytest.mark.parametrize("index", range(len(PAIRS)), ids=IDS)
def test_rule_case(index: int) -> None:
    result = _result(index)
    assert result.bundle == PAIRS[index][0]
    assert result.ok, f"{result.case.where} {result.case.name}: " + "; ".join(result.problems)


@pytest.mark.parametrize("bundle", concrete_bundles())
def test_every_rule_of_every_bundle_fires_in_the_data(bundle: str) -> None:
    fired: set[str] = set()
    for i, (policy, _) in enumerate(PAIRS):
        if policy == bundle:
            fired |= _result(i).fired
    missing = [r.id for r in get_bundle(bundle).rules if r.id not in fired]
    assert not missing, f"rules of {bundle} that no case in rules/policy/*/tests fires: {missing}"


def test_user_choice_never_overwritten_in_default() -> None:
    checked = 0
    for i, (policy, case) in enumerate(PAIRS):
        if policy != "default":
            continue
        d = _result(i).decision
        for out, p in d.provenance.items():
            assert p.overwrote is None, (case.name, out, p)
        for field, out in (("nsa_prefill_backend", "prefill_backend"), ("nsa_decode_backend", "decode_backend")):
            if case.input.get(field) and not any(e.code == "NSA002" for e in d.errors):
                assert getattr(d, out) == case.input[field], (case.name, field)
                checked += 1
    assert checked > 0


def test_trace_explains_passed_over_rules() -> None:
    d = decide(build_facts({}, device="h200", model="deepseek-ai/DeepSeek-V3.2", env={}), "default")
    by_rule = {t.rule: t for t in d.trace}
    assert by_rule["kv.hopper-bf16"].outcome == "fired"
    assert by_rule["kv.blackwell-fp8"].outcome == "already_set" or "device.class is 'sm90'" in by_rule["kv.blackwell-fp8"].why
    assert by_rule["backends.blackwell-fp8"].outcome == "not_matched"
    assert "sm90" in by_rule["backends.blackwell-fp8"].why
    assert d.provenance["prefill_backend"].detail == "backends.hopper-bf16"


def test_trace_off_gives_the_same_decision() -> None:
    for policy, case in PAIRS:
        facts = facts_of(case, get_bundle(policy).engine)  # a vllm-* bundle's cases use vLLM's names
        with_trace = decide(facts, policy, trace=True).model_dump(exclude={"trace"})
        without = decide(facts, policy, trace=False).model_dump(exclude={"trace"})
        assert with_trace == without, (policy, case.name)
