"""--model takes any path: special files, huge or deeply nested configs are one-line input errors, never a hang."""
from __future__ import annotations

import os

import pytest

import nsa_policy
from hostile.bounded import run_bounded
from nsa_policy.base.errors import InputError


def _resolve(model):
    return run_bounded(lambda: nsa_policy.resolve({}, device="h200", model=model, env={}), timeout=10)


@pytest.mark.parametrize("special", ["/dev/zero", "/dev/urandom", "fifo"])
def test_special_files_as_model(tmp_path, special):
    path = str(tmp_path / "config.json") if special == "fifo" else special
    if special == "fifo":
        os.mkfifo(path)
    elif not os.path.exists(path):
        pytest.skip(f"{path} missing")
    box = _resolve(path)
    assert isinstance(box.get("error"), InputError), box
    assert "only regular files" in str(box["error"])


def test_deeply_nested_config(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text("[" * 100_000 + "]" * 100_000)
    box = _resolve(str(tmp_path))
    assert isinstance(box.get("error"), InputError) and "deeper" in str(box["error"])


def test_bad_json_names_the_line(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text('{\n  "architectures": ["DeepseekV32ForCausalLM"],\n  "index_topk": 2048,,\n}\n')
    box = _resolve(str(cfg))
    assert isinstance(box.get("error"), InputError) and f"{cfg}:3" in str(box["error"])


def test_a_real_config_still_resolves(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text('{"architectures": ["DeepseekV32ForCausalLM"], "index_topk": 2048, "num_attention_heads": 128}')
    box = _resolve(str(tmp_path))
    assert box["value"].prefill_backend == "flashmla_sparse"
