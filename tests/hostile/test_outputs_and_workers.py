"""Output paths are checked before any work, written atomically, and --workers is capped at the cores."""
from __future__ import annotations

import os
import threading
import time

import pytest
from typer.testing import CliRunner

from nsa_policy.cli import app


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.mark.parametrize("bad", ["missing/report.md", "DIR", "/dev/full"])
def test_diff_out_is_refused_before_the_work(tmp_path, bad):
    target = {"missing/report.md": str(tmp_path / "missing" / "report.md"), "DIR": str(tmp_path)}.get(bad, bad)
    if bad == "/dev/full" and not os.path.exists(bad):
        pytest.skip("no /dev/full")
    start = time.perf_counter()
    result = invoke("diff", "sglang-0.5.10", "default", "--out", target)
    assert result.exit_code == 2, result.output
    assert "--out" in result.output
    assert time.perf_counter() - start < 3  # refused before the space is evaluated


def test_matrix_out_dir_onto_a_file_is_refused(tmp_path):
    f = tmp_path / "file"
    f.write_text("keep")
    result = invoke("matrix", "--out-dir", str(f))
    assert result.exit_code == 2 and "--out-dir" in result.output
    assert f.read_text() == "keep"


def test_diff_writes_the_report_atomically(tmp_path):

    cases = tmp_path / "inputs.yaml"
    cases.write_text("- {device: b200, model: deepseek-ai/DeepSeek-V3.2}\n- {device: h200, model: deepseek-ai/DeepSeek-V3.2}\n")
    out = tmp_path / "reports" / "d.md"
    out.parent.mkdir()
    result = invoke("diff", "sglang-0.5.10", "default", "--inputs", str(cases), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert out.read_text().strip()
    assert sorted(p.name for p in out.parent.iterdir()) == ["d.md"]
    # the inputs file itself is never an output
    again = invoke("diff", "sglang-0.5.10", "default", "--inputs", str(cases), "--out", str(cases))
    assert again.exit_code == 2 and cases.read_text().startswith("- {device: b200")


def test_workers_are_capped_at_the_cores(monkeypatch):
    from nsa_policy.commands import verify

    monkeypatch.setattr(verify.os, "cpu_count", lambda: 2)
    assert verify._capped(300) == 2
    assert verify._capped(1) == 1
    assert verify._capped(None) is None


def test_case_file_fifo_does_not_block(tmp_path):
    fifo = tmp_path / "cases.yaml"
    os.mkfifo(fifo)
    box: dict = {}
    t = threading.Thread(target=lambda: box.setdefault("r", invoke("check", "--policy", "default", "--cases", str(fifo))),
                         daemon=True)
    t.start()
    t.join(20)
    assert not t.is_alive(), "check --cases blocked on a FIFO"
    assert box["r"].exit_code == 2 and "FIFO" in box["r"].output
