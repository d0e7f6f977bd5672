"""Exit codes mean one thing each: 0 resolved/clean, 1 rejected, 2 unusable input, 3 internal error."""
from __future__ import annotations

import json
from unittest import mock

from typer.testing import CliRunner

from nsa_policy.cli import app

DS = ["--model", "deepseek-ai/DeepSeek-V3.2"]


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def test_internal_error_is_exit_3_with_one_line():
    with mock.patch("nsa_policy.api.decide", side_effect=RuntimeError("boom\nsecond line")):
        result = invoke("resolve", "--device", "h200", *DS)
    assert result.exit_code == 3
    assert "Traceback" not in result.output
    [line] = [ln for ln in result.output.splitlines() if ln.strip()]
    assert "internal error" in line and "RuntimeError: boom" in line and "--debug" in line


def test_debug_shows_the_traceback():
    with mock.patch("nsa_policy.api.decide", side_effect=RuntimeError("boom")):
        result = invoke("--debug", "resolve", "--device", "h200", *DS)
    assert result.exit_code == 3
    assert "Traceback" in result.output


def test_rejected_is_1_and_usage_is_2():
    assert invoke("resolve", "--device", "h200", *DS, "--nsa-prefill-backend", "trtllm").exit_code == 1
    assert invoke("resolve", "--device", "h201", *DS).exit_code == 2
    assert invoke("resolve", "--device", "h200", *DS).exit_code == 0


def test_a_failing_decision_log_still_prints_the_decision(tmp_path):
    from nsa_policy.integration.decision_log import DecisionLogError

    log = tmp_path / "d.jsonl"
    err = DecisionLogError("decision log", str(log), hint="cannot append: No space left on device")
    with mock.patch("nsa_policy.integration.decision_log.append_entry", side_effect=err):
        result = invoke("resolve", "--device", "h200", *DS, "--json", "--log-decisions", str(log))
    assert result.exit_code == 3
    decision = json.loads(result.output.splitlines()[0])
    assert decision["prefill_backend"] == "flashmla_sparse"
    assert "No space left" in result.output


def test_unusable_log_path_is_refused_before_work(tmp_path):
    for bad in (str(tmp_path / "missing" / "d.jsonl"), str(tmp_path)):
        result = invoke("resolve", "--device", "h200", *DS, "--log-decisions", bad)
        assert result.exit_code == 2, result.output
        assert "--log-decisions" in result.output


def test_every_command_help_states_the_exit_codes():
    import typer

    from nsa_policy.cli import app as typer_app

    group = typer.main.get_command(typer_app)
    for name in group.list_commands(None):  # type: ignore[arg-type]
        result = invoke(name, "--help")
        assert result.exit_code == 0, name
        assert "Exit codes" in result.output and "3 internal" in result.output.replace("\n", " "), name
