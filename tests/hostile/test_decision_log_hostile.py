"""A decision log on a FIFO, a device or a full disk fails at once with a clear error; it never blocks."""
from __future__ import annotations

import os

import pytest

import nsa_policy
from hostile.bounded import run_bounded
from nsa_policy.integration.decision_log import DecisionLogError, append_decision, read_decision_log


def _decision():
    return nsa_policy.resolve({}, device="h200", model="deepseek-ai/DeepSeek-V3.2", env={})


def test_fifo_log_fails_at_once(tmp_path):
    fifo = tmp_path / "log"
    os.mkfifo(fifo)
    box = run_bounded(lambda: append_decision(fifo, _decision()))
    assert isinstance(box.get("error"), DecisionLogError), box


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_full_disk_is_a_decision_log_error():
    box = run_bounded(lambda: append_decision("/dev/full", _decision()))
    assert isinstance(box.get("error"), DecisionLogError), box


def test_reading_a_fifo_log_is_refused(tmp_path):
    fifo = tmp_path / "log"
    os.mkfifo(fifo)
    box = run_bounded(lambda: read_decision_log(fifo))
    assert "FIFO" in str(box.get("error")), box


def test_a_regular_log_still_appends(tmp_path):
    path = tmp_path / "log.jsonl"
    append_decision(path, _decision())
    append_decision(path, _decision())
    assert len(read_decision_log(path)) == 2
