"""The support matrix data agrees with the catalog and with the default bundle's own decisions."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from nsa_policy.api import build_facts, decide
from nsa_policy.catalog.store import load_catalog
from nsa_policy.verify.matrix import data_digest, matrix_data, picture_digest, render_markdown, render_picture


@pytest.fixture(scope="module")
def data():
    return matrix_data()


def test_cells_are_the_capability_matrix(data):
    cat = load_catalog()
    for row in data["rows"]:
        for key, cell in row["cells"].items():
            dev, kv = key.split("/")
            assert cell["status"] == cat.capability(row["backend"], dev, kv, row["phase"]).status


def test_default_marks_are_the_default_decisions(data):
    for dev in data["devices"]:
        for kv in data["kv_dtypes"]:
            d = decide(build_facts({"kv_cache_dtype": kv}, device=dev, model=data["model"], env={}, packages={}))
            for row in data["rows"]:
                marked = row["cells"][f"{dev}/{kv}"]["default"]
                chosen = not d.errors and getattr(d, f"{row['phase']}_backend") == row["backend"]
                assert marked == chosen, (dev, kv, row["backend"], row["phase"])
                if marked:
                    assert row["cells"][f"{dev}/{kv}"]["status"] != "unsupported"


def test_known_picks(data):
    def picked(dev, kv, phase):
        return [r["backend"] for r in data["rows"] if r["phase"] == phase and r["cells"][f"{dev}/{kv}"]["default"]]

    assert picked("sm90", "bfloat16", "decode") == ["fa3"]
    assert picked("sm100", "fp8_e4m3", "prefill") == ["trtllm"]
    assert picked("sm120", "fp8_e4m3", "decode") == ["flashinfer_sparse_mla"]
    assert picked("sm120", "bfloat16", "decode") == []  # rejected: no bf16 kernel there
    assert data["auto_kv"]["sm90"] == "bfloat16" and data["auto_kv"]["sm100"] == "fp8_e4m3"
    assert data["auto_kv"]["sm80"] is None


def test_picture_carries_the_data_digest(tmp_path, data):
    pytest.importorskip("matplotlib")
    for suffix in (".png", ".svg"):
        path = tmp_path / f"m{suffix}"
        render_picture(data, path)
        assert picture_digest(path) == data_digest(data)


def test_cli_matrix():
    from nsa_policy.cli import app

    result = CliRunner().invoke(app, ["matrix", "--format", "json"])
    assert result.exit_code == 0
    assert json.loads(result.output)["rows"]
    result = CliRunner().invoke(app, ["matrix"])
    assert result.exit_code == 0 and "| `trtllm` | prefill |" in result.output
    assert CliRunner().invoke(app, ["matrix", "--format", "png"]).exit_code == 2


def test_sglang_since_is_the_catalogs_first_listing_release(data):
    """'sglang since' comes from backends.yaml sglang_choice (and the registry's oldest release), never typed."""
    from nsa_policy.base.versions import parse_version
    from nsa_policy.engines.sglang.args import load_args

    cat = load_catalog()
    oldest = load_args().oldest
    seen = set()
    for row in data["rows"]:
        since = cat.sglang_since(row["backend"], row["phase"])
        if since is None:
            assert row["sglang"] is None
            continue
        assert row["sglang"] == (f"≤ {since}" if since == oldest else since), row["backend"]
        # the first release that lists it does, and the one before does not (unless it is the oldest)
        assert cat.sglang_lists(row["backend"], row["phase"], since)
        earlier = [r for r in load_args().releases if parse_version(r) < parse_version(since)]
        assert since == oldest or not cat.sglang_lists(row["backend"], row["phase"], earlier[-1])
        seen.add(row["sglang"])
    assert {"≤ 0.5.10", "0.5.17", "0.5.22"} <= seen  # e.g. flashinfer_sparse_mla from 0.5.17, intel_xpu from 0.5.22
    md = render_markdown(data)
    assert "| backend | phase | sglang since |" in md and "| `flashinfer_sparse_mla` | decode | 0.5.17 |" in md


def test_cli_backends_says_since_which_release():
    from nsa_policy.cli import app

    result = CliRunner().invoke(app, ["backends", "--json"])
    assert result.exit_code == 0
    rows = {r["backend"]: r for r in json.loads(result.output)}
    assert rows["triton_sparse_mla"]["sglang_since"] == {"prefill": "0.5.22"}
    assert rows["trtllm"]["sglang_since"] == {"prefill": "≤ 0.5.10", "decode": "≤ 0.5.10"}
    text = CliRunner().invoke(app, ["backends"]).output
    assert "    sglang  0.5.17" in text
