"""`check --cases`: which rules the contract cases exercise."""
from __future__ import annotations

from cases_support import case_files

from nsa_policy.bundle import get_bundle
from nsa_policy.verify.coverage import case_coverage, load_case_files


def test_case_coverage_of_default():
    cases = load_case_files([str(p) for p in case_files()])
    cov = case_coverage(get_bundle("default"), cases)
    assert cov["cases"] == sum(1 for policy, _, _ in cases if policy == "default")
    assert "default:h200-deepseek-auto" in cov["by_rule"]["backends.hopper-bf16"]
    assert "default:b200-fp8-mixed-trtllm-rejected" in cov["by_rule"]["validate.fp8-trtllm-both-or-neither"]
    assert cov["exercised"] + len(cov["not_exercised"]) == cov["rules"]
    # cases written for another policy are not counted against this one
    assert all(not name.startswith("sglang-0.5.10:") for names in cov["by_rule"].values() for name in names)
