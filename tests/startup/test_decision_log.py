"""The decision log: JSON lines that parse back into the Decision model."""
from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nsa_policy import Decision, InputError, resolve
from nsa_policy.engines.sglang.startup import apply
from nsa_policy.integration.decision_log import LOG_FORMAT, DecisionLogHandler, append_decision, parse_entry, read_decision_log

from .sglang_args import sglang_parser

DS = "deepseek-ai/DeepSeek-V3.2"
REPO = Path(__file__).resolve().parents[2]


def test_lines_round_trip_into_the_decision_model(tmp_path: Path) -> None:
    log = tmp_path / "decisions.jsonl"
    first = resolve({"tp_size": 8}, device="b200", model=DS, env={})
    second = resolve({"kv_cache_dtype": "fp8_e4m3"}, device="h200", model=DS,
                     env={"SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD": "4096"})
    append_decision(log, first, origin="test", context={"why": "round trip"})
    append_decision(log, second, origin="test", include_trace=False)
    lines = log.read_text().splitlines()
    assert len(lines) == 2
    raw = json.loads(lines[0])
    assert raw["format"] == LOG_FORMAT and raw["decision"]["policy_digest"] == first.policy_digest
    assert Decision.model_validate_json(json.dumps(raw["decision"])) == first
    entries = read_decision_log(log)
    assert entries[0].decision == first and entries[0].context == {"why": "round trip"}
    assert entries[1].decision == second.model_copy(update={"trace": ()}) and second.trace
    assert entries[1].decision.provenance["dense_attn_kv_len_threshold"].source == "env"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00", entries[0].time)


def test_the_documented_example_parses(repo: Path) -> None:
    text = (repo / "docs" / "decision-log.md").read_text()
    [block] = re.findall(r"```json\n(.*?)\n```", text, flags=re.S)
    entry = parse_entry(block)
    assert entry.format == LOG_FORMAT and entry.decision.prefill_backend == "trtllm"
    assert entry.decision.provenance["prefill_backend"].detail == "backends.blackwell-fp8"


def test_handler_logs_what_startup_apply_decided(tmp_path: Path) -> None:
    log = tmp_path / "startup.jsonl"
    handler = DecisionLogHandler(log, include_trace=False)
    logger = logging.getLogger("nsa_policy.startup.test-handler")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        args = sglang_parser().parse_args(["--model-path", DS])
        applied = apply(args, device="h200", env={}, logger=logger)
        logger.info("a record without a decision is not logged")
    finally:
        logger.removeHandler(handler)
    [entry] = read_decision_log(log)
    assert entry.origin == "nsa_policy.startup.test-handler"
    assert entry.decision == applied.decision.model_copy(update={"trace": ()})
    assert entry.context["written"]["kv_cache_dtype"] == "bfloat16"
    assert entry.context["previous"]["kv_cache_dtype"] == "auto"


def test_cli_log_decisions_appends_one_line_per_device(tmp_path: Path) -> None:
    from nsa_policy.cli import app

    log = tmp_path / "cli.jsonl"
    env = {"SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD": None, "SGLANG_DSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD": None}
    runner = CliRunner()
    logged = ["--model", DS, "--log-decisions", str(log)]
    assert runner.invoke(app, ["resolve", "--device", "h200", *logged], env=env).exit_code == 0
    assert runner.invoke(app, ["resolve", "--device", "h200,b200", *logged], env=env).exit_code == 1
    entries = read_decision_log(log)
    assert [e.decision.device for e in entries] == ["h200", "h200", "b200"]
    assert all(e.origin == "cli.resolve" for e in entries)
    assert entries[2].context == {"fleet": ["h200", "b200"], "agrees": False}
    bad = runner.invoke(app, ["resolve", "--device", "h200", "--model", DS,
                              "--log-decisions", str(tmp_path / "no" / "x")], env=env)
    assert bad.exit_code == 2 and "does not exist" in bad.stderr


def test_malformed_line_names_file_and_line(tmp_path: Path) -> None:
    log = tmp_path / "bad.jsonl"
    append_decision(log, resolve({}, device="h200", model=DS, env={}), include_trace=False)
    with log.open("a") as fh:
        fh.write("\n" + json.dumps({"format": LOG_FORMAT, "time": "x", "origin": "o", "host": "h", "pid": 1,
                                    "decision": {"applies": True}}) + "\n")
    with pytest.raises(InputError) as exc:
        read_decision_log(log)
    assert exc.value.field == f"{log}:3" and "decision.policy" in str(exc.value)


def test_a_line_logged_under_the_legacy_input_names_still_reads(tmp_path):
    """Logs written while the canonical field was sglang's old spelling (nsa_prefill_backend) stay readable."""
    import json

    import nsa_policy
    from nsa_policy.integration.decision_log import append_decision, read_decision_log

    d = nsa_policy.resolve({"prefill_backend": "flashmla_sparse"}, device="h200", model="deepseek-ai/DeepSeek-V3.2",
                           env={})
    log = tmp_path / "d.jsonl"
    append_decision(log, d)
    data = json.loads(log.read_text())
    config = data["decision"]["inputs"]["config"]
    config["nsa_prefill_backend"] = config.pop("prefill_backend")
    config["nsa_decode_backend"] = config.pop("decode_backend")
    log.write_text(json.dumps(data) + "\n")
    (entry,) = read_decision_log(log)
    assert entry.decision.inputs.config.prefill_backend == "flashmla_sparse"
    assert entry.decision.inputs.config.decode_backend is None
