"""A value an engine release renames with settings of its own (args.yaml choice_aliases, distinct_before):
sglang 0.5.23 turns --attention-backend tokenspeed_mla into cutedsl_mla with fp8_e4m3 KV, and 0.5.15-0.5.22
run tokenspeed_mla as a backend of its own. What launch does with it: tests/startup/test_launch.py."""
from nsa_policy.api import build_facts, decide
from nsa_policy.engines.sglang.config import config_at_release, config_from


def test_the_config_keeps_the_value_as_given_and_the_release_renames_it() -> None:
    given = config_from({"attention_backend": "tokenspeed_mla", "kv_cache_dtype": "bf16"})
    assert given.attention_backend == "tokenspeed_mla"
    assert config_at_release(given, "0.5.22") is given
    for release in ("0.5.23", None):  # None: the newest release
        renamed = config_at_release(given, release)
        assert (renamed.attention_backend, renamed.kv_cache_dtype) == ("cutedsl_mla", "fp8_e4m3")


def test_a_decision_reads_the_release_the_policy_targets() -> None:
    facts = build_facts({"attention_backend": "tokenspeed_mla", "kv_cache_dtype": "bf16"}, device="b200",
                        model="zai-org/GLM-5.1", env={}, packages={})
    old = decide(facts, "sglang-0.5.22")
    new = decide(facts, "sglang-0.5.23")  # answered by the same bundle
    assert old.policy == new.policy == "sglang-0.5.22"
    assert old.attention_backend == "tokenspeed_mla" and [e.code for e in old.errors] == ["NSA324"]
    assert "requires kv-cache-dtype=fp8_e4m3" in old.errors[0].message
    assert (new.attention_backend, new.kv_cache_dtype, new.errors) == ("cutedsl_mla", "fp8_e4m3", ())
