"""`check --cases`: which rules the contract cases exercise."""
from __future__ import annotations

from cases_support import case_files

from nsa_policy.core.bundle import get_bundle
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


def test_cli_check_with_cases():
    import json

    from typer.testing import CliRunner

    from nsa_policy.cli import app

    files = [str(p) for p in case_files()]
    args = ["check", "--policy", "sglang-0.5.10", "--json"] + [x for f in files for x in ("--cases", f)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    [report] = json.loads(result.output)["bundles"]
    cov = report["coverage"]
    assert cov["bundle"] == "sglang-0.5.10" and cov["cases"] > 0
    assert "sglang-0.5.10:b200-fp8-user-prefill-overwritten" in cov["by_rule"]["sglang.backends.blackwell-fp8"]
