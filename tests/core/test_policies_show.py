"""`nsa-policy policies --show BUNDLE`: the compiled bundle flattened, in evaluation order."""
from __future__ import annotations

import json

from typer.testing import CliRunner

from nsa_policy.cli import app
from nsa_policy.core.bundle import STAGES, get_bundle


def test_show_lists_every_rule_in_evaluation_order_with_its_bundle():
    r = CliRunner().invoke(app, ["policies", "--show", "sglang-0.5.23", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    compiled = get_bundle("sglang-0.5.22")  # 0.5.23 is answered by 0.5.22's rules
    assert data["name"] == compiled.name and data["chain"][0] == "base" and data["chain"][-1] == "sglang-0.5.22"
    assert [x["id"] for x in data["rules"]] == [r.id for r in compiled.rules]
    order = [STAGES.index(x["stage"]) for x in data["rules"]]
    assert order == sorted(order)
    assert {x["bundle"] for x in data["rules"]} <= set(data["chain"])
    assert len({x["bundle"] for x in data["rules"]}) > 3  # a 12-deep chain contributes from many levels


def test_show_text_names_stages_and_files():
    r = CliRunner().invoke(app, ["policies", "--show", "default"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].startswith("policy default (") and "chain base → default" in lines[0]
    assert "stage input" in lines and any(ln.strip().startswith("input.kv-dtype-known") and "base/10-input.yaml:" in ln
                                          for ln in lines)


def test_show_unknown_bundle_is_one_line_naming_the_flag():
    r = CliRunner().invoke(app, ["policies", "--show", "defualt"])
    assert r.exit_code == 2
    assert "--show" in r.output and "did you mean 'default'" in r.output and len(r.output.strip().splitlines()) == 1
