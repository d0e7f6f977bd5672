"""The plugins' engine-neutral part and their "off" path, without the engines installed."""
from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest

from nsa_policy.base.errors import InputError
from nsa_policy.integration import plugin_common as pc


@pytest.mark.parametrize("raw, expected", [(None, "off"), ("", "off"), ("off", "off"), ("0", "off"),
                                           ("audit", "audit"), ("FILL", "fill"), (" enforce ", "enforce")])
def test_mode(raw, expected):
    env = {} if raw is None else {"NSA_POLICY": raw}
    assert pc.mode(env) == expected


def test_bad_mode_names_the_variable_and_the_valid_values():
    with pytest.raises(InputError) as err:
        pc.mode({"NSA_POLICY": "enforcing"})
    text = str(err.value)
    assert "NSA_POLICY" in text and "enforcing" in text and "audit" in text and "enforce" in text


def test_decision_id_created_once_and_inherited():
    env: dict[str, str] = {}
    first = pc.decision_id(env)
    assert first and env["NSA_POLICY_DECISION_ID"] == first
    assert pc.decision_id(env) == first  # the ranks of one start-up share it
    assert pc.decision_id({"NSA_POLICY_DECISION_ID": "group-7"}) == "group-7"
    assert pc.decision_id({}, create=False) is None


def test_guarded_never_raises_outside_enforce(caplog):
    def boom():
        raise RuntimeError("kaput")

    with caplog.at_level(logging.ERROR):
        assert pc.guarded(logging.getLogger("t"), "fill", "decide", boom) is None
        assert pc.guarded(logging.getLogger("t"), "audit", "decide", boom) is None
    assert "kaput" in caplog.text and "continues" in caplog.text
    with pytest.raises(pc.PluginRefused, match="could not decide.*kaput"):
        pc.guarded(logging.getLogger("t"), "enforce", "decide", boom)


def test_one_line_explanation_and_agreement():
    from nsa_policy.api import resolve

    bad = resolve({"nsa_decode_backend": "trtllm", "kv_cache_dtype": "bfloat16"}, device="h200",
                  model="deepseek-ai/DeepSeek-V3.2", raise_on_error=False)
    line = pc.one_line(bad)
    assert "\n" not in line and line.startswith("nsa-policy refused to start") and bad.errors[0].code in line
    good = resolve({}, device="h200", model="deepseek-ai/DeepSeek-V3.2")
    env: dict[str, str] = {}
    pc.export_view(good, env)
    assert pc.compare_with_parent(good, 1, env) is None
    other = resolve({}, device="b200", model="deepseek-ai/DeepSeek-V3.2")
    message = pc.compare_with_parent(other, 1, env)
    assert message is not None and "disagree" in message


def test_log_decision_has_the_decision_id_and_rank(tmp_path):
    from nsa_policy.api import resolve
    from nsa_policy.integration.decision_log import read_decision_log

    path = tmp_path / "log.jsonl"
    env = {"NSA_POLICY_LOG": str(path), "NSA_POLICY_DECISION_ID": "abc", "LOCAL_RANK": "3"}
    d = resolve({}, device="h200", model="deepseek-ai/DeepSeek-V3.2")
    pc.log_decision(d, engine="sglang", current="fill", context={"status": "applied"}, env=env)
    pc.log_decision(d, engine="sglang", current="fill", context={"status": "applied"},
                    env={**env, "NSA_POLICY_LOG": str(tmp_path / "missing" / "x.jsonl")})  # logged as an error, no raise
    [entry] = read_decision_log(path)
    assert entry.origin == "plugin.sglang"
    assert entry.context["decision_id"] == "abc" and entry.context["local_rank"] == "3"


@pytest.mark.parametrize("module", ["nsa_policy.engines.sglang.plugin", "nsa_policy.engines.vllm.plugin"])
def test_off_loads_nothing(module):
    # installed but not enabled: the entry point's call touches neither the engine nor the policy
    code = (f"import os, sys, json; os.environ.pop('NSA_POLICY', None); import {module} as p; p.register(); "
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('sglang', 'vllm', 'torch', 'yaml', 'pydantic') or m in ('nsa_policy.api', 'nsa_policy.core.bundle'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_entry_points_declared():
    from pathlib import Path

    import tomllib

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    eps = project["entry-points"]
    assert eps["sglang.srt.plugins"] == {"nsa_policy": "nsa_policy.engines.sglang.plugin:register"}
    assert eps["vllm.general_plugins"] == {"nsa_policy": "nsa_policy.engines.vllm.plugin:register"}
