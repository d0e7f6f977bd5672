"""The CLI keeps the README's promises: a usage error is one line naming what is wrong (exit 2), in
every command; flags that take no value show no placeholder; every option has help."""
from __future__ import annotations

import pytest
import typer
from typer.main import get_command
from typer.testing import CliRunner

from nsa_policy.cli import app

ROOT = get_command(app)
COMMANDS = sorted(ROOT.list_commands(typer.Context(ROOT)))


def _command(name: str):
    return ROOT.get_command(typer.Context(ROOT), name)


@pytest.mark.parametrize("name", COMMANDS)
def test_a_usage_error_is_one_line(name: str) -> None:
    result = CliRunner().invoke(app, [name, "--no-such-option"])
    assert result.exit_code == 2
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("nsa-policy: error: ") and "--no-such-option" in lines[0]
    assert "╭" not in result.output and "Usage:" not in result.output


def test_a_missing_value_and_a_bad_value_are_one_line_each() -> None:
    for argv in (["resolve", "--device"], ["resolve", "--device", "b200", "--tp-size", "x"], ["no-such-command"]):
        result = CliRunner().invoke(app, argv)
        assert result.exit_code == 2, argv
        assert len([ln for ln in result.stderr.splitlines() if ln.strip()]) == 1, result.stderr


@pytest.mark.parametrize("name", COMMANDS)
def test_flags_show_no_placeholder_and_every_option_has_help(name: str) -> None:
    cmd = _command(name)
    for param in cmd.params:
        if param.param_type_name == "option":
            assert getattr(param, "help", None), f"{name} {param.opts}: no help"
    result = CliRunner().invoke(app, [name, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "<bool>" not in result.output, result.output


def test_root_help_has_no_bool_placeholder() -> None:
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and "<bool>" not in result.output


def test_matrix_pictures_without_matplotlib_is_a_one_line_hint(tmp_path, monkeypatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ModuleNotFoundError
    result = CliRunner().invoke(app, ["matrix", "--out-dir", str(tmp_path / "out")])
    assert result.exit_code == 2
    [line] = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert "nsa-policy[plot]" in line


def test_schema_of_one_model_is_the_schema_itself() -> None:
    import json

    result = CliRunner().invoke(app, ["schema", "decision"])
    schema = json.loads(result.stdout)
    assert schema.get("title") == "Decision" and "properties" in schema


def test_catalog_tables_have_headers() -> None:
    assert CliRunner().invoke(app, ["devices"]).stdout.splitlines()[0].split()[:2] == ["NAME", "CLASS"]
    assert CliRunner().invoke(app, ["models"]).stdout.splitlines()[0].split()[:2] == ["MODEL", "FAMILY"]


def test_a_release_answered_by_an_older_bundle_says_so() -> None:
    result = CliRunner().invoke(app, ["resolve", "--device", "h200", "--model", "deepseek-ai/DeepSeek-V3.2",
                                      "--policy", "sglang-0.5.23"])
    assert result.stdout.splitlines()[0].startswith("policy sglang 0.5.23, answered by sglang-0.5.22's rules (")


def test_explain_lists_the_rejected_options_with_reasons() -> None:
    result = CliRunner().invoke(app, ["resolve", "--device", "h200", "--model", "deepseek-ai/DeepSeek-V3.2",
                                      "--kv-cache-dtype", "bfloat16", "--explain"])
    out = result.stdout
    assert "decided by rule backends.hopper-bf16" in out
    assert "rejected trtllm: unsupported - flashinfer's trtllm-gen kernels are built for sm100 and sm103 only" in out
    why = out[out.index("why:"):out.index("trace (every rule")]
    block: list[str] = []
    for line in why.splitlines()[1:] + ["  end"]:
        if line.startswith("  ") and not line.startswith("    "):  # a new output's block
            assert len(block) == len(set(block)), f"a clause is repeated: {block}"
            block = []
        block.append(line)


def _why_line(out: str, field: str) -> str:
    return next(ln for ln in out.splitlines() if ln.startswith(f"  {field} = "))


def test_explain_credits_index_topk_to_the_model_fact_not_the_attention_backend_rule() -> None:
    result = CliRunner().invoke(app, ["resolve", "--device", "b200", "--model", "deepseek-ai/DeepSeek-V3.2", "--explain"])
    out = result.stdout
    row = next(ln for ln in out.splitlines() if ln.startswith("  index_topk "))
    assert "model model.index_topk (rule layout.index-topk)" in row and "attention-backend" not in row
    line = _why_line(out, "index_topk")
    assert line.startswith("  index_topk = 2048: the model's model.index_topk (model catalog entry "
                           "deepseek-ai/DeepSeek-V3.2), set by rule layout.index-topk")
    assert "attention backend" not in line
    assert "layout.index-topk" not in _why_line(out, "attention_backend")
    # a model given by its facts: the value is the caller's, credited as given
    result = CliRunner().invoke(app, ["resolve", "--device", "b200", "--arch", "DeepseekV32ForCausalLM",
                                      "--index-topk", "1024", "--num-attention-heads", "128", "--explain"])
    assert _why_line(result.stdout, "index_topk").startswith("  index_topk = 1024: the model's model.index_topk (as given)")


def test_explain_offers_only_what_the_target_release_lists() -> None:
    from nsa_policy.catalog.store import load_catalog

    cat = load_catalog()
    args = ["resolve", "--device", "rtx-pro-6000", "--model", "deepseek-ai/DeepSeek-V3.2", "--kv-cache-dtype", "bfloat16",
            "--explain"]
    old = CliRunner().invoke(app, [*args, "--policy", "sglang-0.5.15"]).stdout
    why = old[old.index("why:"):old.index("trace (every rule")]
    prefill = why[why.index("  prefill_backend = "):why.index("  decode_backend = ")]
    unlisted = [b for b in cat.backend_names if "prefill" in cat.backends[b].phases and not cat.sglang_lists(b, "prefill", "0.5.15")]
    assert "triton_sparse_mla" in unlisted
    for b in unlisted:
        assert f"rejected {b}:" not in prefill and f"runs here, not chosen: {b} " not in prefill
    assert f"      not options: {', '.join(unlisted)} (sglang 0.5.15 does not list them for prefill)" in prefill
    # no release targeted (the default policy): every backend of the phase is an option
    new = CliRunner().invoke(app, args).stdout
    assert "NSA106 no default prefill backend runs bfloat16 KV on sm120; use triton_sparse_mla" in new
    assert "not options:" not in new
