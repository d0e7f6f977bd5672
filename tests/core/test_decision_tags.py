"""The tags on the Decision fields are the one registry of outputs: every list of output, agreed,
recorded and shown fields is read from them, and each consumer behaves by the tags."""
from __future__ import annotations

import json

import pytest

from nsa_policy import build_facts, decide
from nsa_policy.commands._render import render_explain, render_table
from nsa_policy.core.bundle import get_bundle
from nsa_policy.core.decision import (
    AGREED_FIELDS,
    DECISION_OUTPUTS,
    OUTPUT_FIELDS,
    RECORDED_FIELDS,
    SHOWN_FIELDS,
    Decision,
    RuntimeThresholds,
    Tags,
    field_title,
    of_engine,
    outputs_for,
    tagged,
)
from nsa_policy.core.namespace import known_path
from nsa_policy.integration.fleet import agreement_digest, agreement_view
from nsa_policy.verify.run import record_of

DS = "deepseek-ai/DeepSeek-V3.2"


@pytest.fixture(scope="module")
def decision() -> Decision:
    return decide(build_facts({}, device="b200", model=DS, env={}, packages={}), "default", trace=False)


@pytest.fixture(scope="module")
def vllm_decision() -> Decision:
    return decide(build_facts({}, device="b200", model=DS, env={}, packages={}, engine="vllm"), "default", trace=False)


# Outputs only one engine decides (tagged engine=...): an sglang decision leaves vLLM's unset.
VLLM_ONLY = tuple(f for f in DECISION_OUTPUTS if f not in outputs_for("sglang"))


def test_outputs_are_the_fields_tagged_output_of_the_decision_and_its_runtime() -> None:
    assert OUTPUT_FIELDS == tagged("output") + tagged("output", RuntimeThresholds)
    assert set(DECISION_OUTPUTS) <= set(Decision.model_fields)
    assert set(OUTPUT_FIELDS) - set(DECISION_OUTPUTS) <= set(RuntimeThresholds.model_fields)
    for out in OUTPUT_FIELDS:  # each output is a fact the rules read and can set
        assert known_path(f"out.{out}") and known_path(f"prov.{out}")


def test_a_rule_setting_an_untagged_field_is_refused_at_compile_time(tmp_path) -> None:
    from nsa_policy.base.errors import RuleFileError

    (tmp_path / "bundle.yaml").write_text("name: t\ndescription: t\n")
    (tmp_path / "30-backends.yaml").write_text(
        "stage: backends\nrules:\n  - id: t.sets-device\n    description: d\n    set: {device_class: sm90}\n")
    with pytest.raises(RuleFileError, match="unknown output 'device_class'"):
        get_bundle(str(tmp_path))


def test_a_dsa_decision_sets_every_output(decision: Decision, vllm_decision: Decision) -> None:
    assert decision.applies and not decision.errors
    for out in outputs_for(decision.engine, decision.dsa_scope):
        assert getattr(decision, out) is not None, out
    assert VLLM_ONLY and all(getattr(decision, out) is None for out in VLLM_ONLY)
    assert vllm_decision.applies and not vllm_decision.errors
    assert all(getattr(vllm_decision, out) is not None for out in VLLM_ONLY)
    for out in set(OUTPUT_FIELDS) - set(DECISION_OUTPUTS):
        assert getattr(decision.runtime, out) is not None, out


def test_the_agreement_view_holds_exactly_the_agreed_fields(decision: Decision, vllm_decision: Decision) -> None:
    # an engine's view holds the agreed fields its decisions have (no vLLM-only keys for sglang)
    assert tuple(agreement_view(decision)) == of_engine(AGREED_FIELDS, "sglang")
    assert tuple(agreement_view(vllm_decision)) == of_engine(AGREED_FIELDS, "vllm")
    assert set(VLLM_ONLY) <= set(agreement_view(vllm_decision)) and not set(VLLM_ONLY) & set(agreement_view(decision))
    assert agreement_view(decision)["error_codes"] == []  # errors, projected to their codes


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
@pytest.mark.parametrize("name", [n for n in Decision.model_fields if n not in ("inputs",)])
def test_only_agreed_fields_move_the_agreement_digest(decision: Decision, vllm_decision: Decision, name: str,
                                                      engine: str) -> None:
    if engine == "vllm":
        if name not in VLLM_ONLY:
            return  # the vLLM decision is here for the fields only vLLM decides
        decision = vllm_decision
    current = getattr(decision, name)
    # an unset value is changed to a set one (the sglang decision leaves vLLM's outputs unset)
    changes = {bool: lambda v: not v, str: lambda v: v + "-x", int: lambda v: v + 1, dict: lambda v: {"prefill": 999},
               tuple: lambda v: (), type(None): lambda v: "x"}
    # isinstance, in this order: decision mappings are read-only dict subclasses, and bool is an int
    other = next((change for kind, change in changes.items() if isinstance(current, kind)), None)
    if other is None or name == "runtime":
        other = {"runtime": lambda v: v.model_copy(update={"mha_one_shot": not v.mha_one_shot})}.get(name)
    if name in ("warnings", "errors", "notes"):
        from nsa_policy.core.decision import Finding

        changed = decision.model_copy(update={name: (Finding(code="NSA999", level="error", message="m", rule="r"),)})
    elif name == "provenance":
        changed = decision.model_copy(update={name: {}})
    elif name == "trace":
        changed = decision.model_copy(update={name: ()})
        assert agreement_digest(changed) == agreement_digest(decision)
        return
    else:
        assert other is not None, name
        changed = decision.model_copy(update={name: other(current)})
    # agreed by the ranks of this decision's engine: another engine's field is not part of it
    agreed = name in of_engine(tagged("agreed"), decision.engine)
    assert (agreement_digest(changed) != agreement_digest(decision)) == agreed, name


def test_check_and_diff_record_the_recorded_fields(decision: Decision) -> None:
    status, values, causes, _ = record_of(decision)
    assert status == "accepted"
    assert values == tuple(getattr(decision, f) for f in RECORDED_FIELDS)
    assert len(causes) == len(RECORDED_FIELDS)


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_the_resolve_table_and_explain_have_one_row_per_shown_field(decision: Decision, vllm_decision: Decision,
                                                                    engine: str) -> None:
    d = vllm_decision if engine == "vllm" else decision
    shown = of_engine(SHOWN_FIELDS, engine)  # each engine's table leaves out the other engine's rows
    other_only = {"sglang": "indexer_cache_dtype", "vllm": "prefill_backend"}[engine]
    assert other_only in SHOWN_FIELDS and other_only not in shown
    rows = [line.split()[0] for line in render_table(d).splitlines() if line.startswith("  ")]
    assert tuple(rows[:len(shown)]) == shown  # then heads per rank and the planner
    why = render_explain(d).split("\nwhy:\n", 1)[1].split("\n\n")[0]
    assert tuple(line.split()[0] for line in why.splitlines() if not line.startswith("      ")) == shown


def test_tags_change_neither_validation_nor_the_json_schema(decision: Decision) -> None:
    text = json.dumps(Decision.model_json_schema())
    assert "Tags" not in text and '"agreed"' not in text
    assert Decision.model_validate_json(decision.model_dump_json()) == decision


def test_titles_and_unknown_tags() -> None:
    assert field_title("kv_cache_dtype") == "KV cache dtype"
    assert field_title("heads_per_rank") == "heads_per_rank"  # no title: the name
    with pytest.raises(ValueError, match="unknown field tag"):
        Tags("outptu")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown field tag"):
        tagged("outptu")  # type: ignore[arg-type]
