"""Issue 23, C and D: deployment files that hang lint, exhaust its memory, lose the whole run, or make it read
(and publish) files outside the linted tree. Each case is a real deployment file; each runs under a deadline."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hostile.bounded import run_bounded

SECRET = "sk-SECRET-0123456789"
# A launch lint must still report (NSA103: fp8 KV with trtllm prefill and flashmla_kv decode on b200), so a
# test sees that the hostile file beside it did not cost the other files' findings.
GOOD = """#!/usr/bin/env bash
# nsa-policy: device=b200
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 --kv-cache-dtype fp8_e4m3 \\
  --nsa-prefill-backend trtllm --nsa-decode-backend flashmla_kv
"""


def lint(*args: str, cwd: Path | None = None):
    from nsa_policy.cli import app

    old = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        return CliRunner().invoke(app, ["lint", *args])
    finally:
        os.chdir(old)


def lint_bounded(*args: str, cwd: Path | None = None, timeout: float = 20.0):
    box = run_bounded(lambda: lint(*args, cwd=cwd), timeout)
    assert "error" not in box, box.get("error")
    result = box["value"]
    assert result.exit_code in (0, 1, 2), (result.exit_code, result.output, result.exception)
    return result


def codes(result) -> list[str]:
    return [d["code"] for d in json.loads(result.output)["diagnostics"]]


@pytest.fixture()
def tree(tmp_path):
    """A checkout (deploy/, with a good launch) and, beside it, a folder of secrets outside the linted tree."""
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "creds.env").write_text(f"MODEL={SECRET}\nBACKEND=trtllm\n")
    (tmp_path / "secret" / "cfg.yaml").write_text(f"model: {SECRET}\nattention-backend: FLASHMLA_SPARSE\n")
    deploy = tmp_path / "repo" / "deploy"
    deploy.mkdir(parents=True)
    (deploy / "good.sh").write_text(GOOD)
    return deploy


# C: hangs and memory --------------------------------------------------------------------------------
@pytest.mark.parametrize("line", [". /dev/zero", "source /dev/zero", ". ./zero.env"])
def test_sourcing_a_device_neither_hangs_nor_reads_it(tree, line):
    (tree / "zero.env").symlink_to("/dev/zero")
    (tree / "serve.sh").write_text(f"#!/bin/bash\n{line}\npython -m sglang.launch_server --model-path m\n")
    start = time.perf_counter()
    result = lint_bounded(str(tree), "--format", "json")
    assert time.perf_counter() - start < 20
    found = codes(result)
    assert "NSA409" in found and "NSA103" in found  # reported, and the good file still checked


def test_compose_env_file_that_is_a_device_or_a_fifo(tree):
    os.mkfifo(tree / "pipe.env")
    (tree / "compose.yaml").write_text(
        "services:\n  a:\n    image: lmsysorg/sglang:v0.5.23\n    env_file: /dev/zero\n"
        "    command: python3 -m sglang.launch_server --model-path m\n"
        "  b:\n    image: lmsysorg/sglang:v0.5.23\n    env_file: [pipe.env]\n"
        "    command: python3 -m sglang.launch_server --model-path m\n")
    result = lint_bounded(str(tree), "--format", "json")
    assert "NSA103" in codes(result)


@pytest.mark.parametrize("kind", ["devzero", "fifo"])
def test_a_gitignore_that_is_a_device_or_a_fifo(tree, kind):
    target = tree / ".gitignore"
    if kind == "devzero":
        target.symlink_to("/dev/zero")
    else:
        os.mkfifo(target)
    result = lint_bounded(str(tree), "--format", "json")
    assert "NSA103" in codes(result)


def test_a_backtracking_gitignore_pattern(tree):
    (tree / ".gitignore").write_text("*a" * 40 + "*b\n")
    (tree / ("a" * 200 + ".sh")).write_text(GOOD)
    start = time.perf_counter()
    result = lint_bounded(str(tree), "--format", "json")
    assert time.perf_counter() - start < 20
    assert codes(result).count("NSA103") == 2  # the pattern matches neither file


@pytest.mark.parametrize("name,text", [
    ("server.json", '{"model-path": "deepseek-ai/DeepSeek-V3.2", "kv-cache-dtype": "fp8_e4m3", "tp-size": '
                    + "1" * 5000 + "}\n"),
    ("server.toml", 'model-path = "deepseek-ai/DeepSeek-V3.2"\nkv-cache-dtype = "fp8_e4m3"\ntp-size = '
                    + "1" * 5000 + "\n"),
    ("values.yaml", "sglang:\n  model-path: deepseek-ai/DeepSeek-V3.2\n  tp-size: " + "1" * 5000 + "\n"),
    ("serve.sh", "#!/bin/bash\nX=${A:-" * 1 + "${A:-" * 3000 + "x" + "}" * 3001
                 + "\npython -m sglang.launch_server --model-path $X\n"),
])
def test_one_bad_file_never_loses_the_others(tree, name, text):
    (tree / name).write_text(text)
    result = lint_bounded(str(tree), "--format", "json")
    report = json.loads(result.output)
    assert result.exit_code in (1, 2), result.output  # never 3
    found = [(d["code"], Path(d["path"]).name) for d in report["diagnostics"]]
    assert ("NSA103", "good.sh") in found, found
    bad = [d for d in report["diagnostics"] if Path(d["path"]).name == name]
    assert all(d["code"] != "NSA404" or d["line"] >= 1 for d in bad)
    if name != "values.yaml":  # YAML reads the long number as text: no input error, just no launch value
        assert any(d["code"] == "NSA404" for d in bad), bad


def test_twenty_thousand_unknown_flags_in_one_launch(tree):
    flags = " ".join(f"--unknown-flag-{i} v" for i in range(20_000))
    (tree / "big.sh").write_text(f"#!/bin/bash\npython -m sglang.launch_server --model-path m {flags}\n")
    start = time.perf_counter()
    lint_bounded(str(tree / "big.sh"), "--format", "json", timeout=30)
    assert time.perf_counter() - start < 15  # measured 3.4 s on the 2-core CI box (38 s before)


# D: reads outside the tree, and what is printed ----------------------------------------------------------
def _outside(tree: Path) -> None:
    secret = tree.parent.parent / "secret"
    (tree / "compose.yaml").write_text(
        "services:\n  llm:\n    image: lmsysorg/sglang:v0.5.23\n    env_file: ../../secret/creds.env\n"
        "    command: sh -c 'python3 -m sglang.launch_server --model-path $$MODEL --dsa-prefill-backend $$BACKEND'\n")
    (tree / "run.sh").write_text(f"#!/bin/bash\n. {secret}/creds.env\n"
                                 "python -m sglang.launch_server --model-path $MODEL\n")
    (tree / "vllm.sh").write_text(f"#!/bin/bash\nvllm serve deepseek-ai/DeepSeek-V3.2 --config {secret}/cfg.yaml\n")
    (tree / "link.sh").write_text("#!/bin/bash\n. ./creds.env\npython -m sglang.launch_server --model-path $MODEL\n")
    (tree / "creds.env").symlink_to(secret / "creds.env")  # a link out of the tree is outside it too


@pytest.mark.parametrize("fmt", ["text", "json", "github", "sarif"])
def test_files_outside_the_tree_are_reported_never_read(tree, fmt):
    _outside(tree)
    result = lint_bounded(str(tree), "--format", fmt, cwd=tree.parent)
    assert SECRET not in result.output
    assert result.output.count("outside the linted tree") >= 4, result.output


def test_outside_reads_are_nsa409_at_the_line_that_names_them(tree):
    _outside(tree)
    report = json.loads(lint_bounded(str(tree), "--format", "json", cwd=tree.parent).output)
    where = {(Path(d["path"]).name, d["line"]) for d in report["diagnostics"]
             if d["code"] == "NSA409" and "outside the linted tree" in d["message"]}
    assert {("compose.yaml", 4), ("run.sh", 2), ("vllm.sh", 2), ("link.sh", 2)} <= where, where


def test_a_file_inside_the_tree_is_still_read(tree):
    (tree / "common.env").write_text("BACKEND=trtllm\nKV=fp8_e4m3\n")
    (tree / "serve.sh").write_text("#!/bin/bash\n# nsa-policy: device=b200\n. ./common.env\n"
                                   "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 "
                                   "--kv-cache-dtype $KV --nsa-prefill-backend $BACKEND --nsa-decode-backend flashmla_kv\n")
    report = json.loads(lint_bounded(str(tree / "serve.sh"), "--format", "json").output)
    assert [d["line"] for d in report["diagnostics"] if d["code"] == "NSA103"] == [4]


def test_text_output_escapes_terminal_controls(tree):
    (tree / "esc.sh").write_text("#!/bin/bash\n# nsa-policy: device=\x1b]0;owned\x07\x1b[31mred\n"
                                 "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2\n")
    for fmt in ("text", "github"):
        out = lint_bounded(str(tree / "esc.sh"), "--format", fmt).output
        assert "\x1b" not in out and "\x07" not in out
        assert "\\x1b" in out
