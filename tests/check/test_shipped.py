"""`check` over every shipped bundle: no findings, every rule fires and takes effect somewhere."""
from __future__ import annotations

from nsa_policy.core.bundle import concrete_bundles, get_bundle


def test_every_shipped_bundle_is_checked(shipped_reports):
    from nsa_policy import engines

    assert set(shipped_reports) == set(concrete_bundles()) >= {
        "default", "sglang-0.5.10", "sglang-pre-21783", "vllm-0.33", "vllm-default"}
    # every registered engine has its space and invariants: no shipped bundle is left out
    assert {"sglang", "vllm"} <= set(engines.names())
    assert {get_bundle(n).engine for n in shipped_reports} <= set(engines.names())


def test_shipped_bundles_have_no_findings(shipped_reports):
    for name, report in shipped_reports.items():
        assert report.ok, f"{name}: " + "; ".join(f"[{i.kind}] {i.subject}: {i.message}" for i in report.issues)


def test_every_rule_fires_and_takes_effect_somewhere(shipped_reports):
    for name, report in shipped_reports.items():
        assert [r["id"] for r in report.rules] == [r.id for r in get_bundle(name).rules]
        for row in report.rules:
            assert row["matched"] > 0 and row["effective"] > 0, (name, row)
            assert row["evidence"], (name, row["id"])


def test_the_space_is_the_documented_size(shipped_reports):
    report = shipped_reports["default"]
    sizes = {b["block"]: b["inputs"] for b in report.space}
    assert sum(sizes.values()) == report.inputs > 20000
    dims = {b["block"]: b["dimensions"] for b in report.space}
    # one capability spec per group of classes that no rule and no catalog cell tells apart
    from nsa_policy.catalog.store import load_catalog

    assert {"sm90", "sm100", "gfx942"} <= set(dims["backends"]["device"]) <= set(load_catalog().device_doc.classes)
    assert dims["backends"]["kv_cache_dtype"] == ["auto", "bfloat16", "fp8_e4m3"]
    assert "fp8_e5m2" in dims["input"]["kv_cache_dtype"]
    assert len(dims["backends"]["prefill"]) == 1 + len(load_catalog().backend_names)  # unset + every backend name
