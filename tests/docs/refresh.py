"""Rewrite the shown output of a documented shell session with what the commands print now.

    python tests/docs/refresh.py docs/vllm.md:90 [docs/startup.md:286 …]

Each FILE:LINE names the opening fence of a session block (the line test_examples reports). The
commands run exactly as the docs test runs them; review the diff before committing."""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from docs.doc_blocks import REPO, blocks, session_steps  # noqa: E402
from docs.test_examples import _run, _workdir  # noqa: E402


def refresh(where: str) -> None:
    name, line = where.rsplit(":", 1)
    path = REPO / name
    [block] = [b for b in blocks(path) if b.line == int(line)]
    with tempfile.TemporaryDirectory() as tmp:
        work = _workdir(Path(tmp))
        out: list[str] = []
        for step in session_steps(block.text):
            _, real = _run(step.command, work)
            out.append(f"$ {step.command}")
            out.extend(ln.rstrip().replace(str(work) + "/", "") for ln in real)
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    start = block.line  # index of the first body line
    end = start + len(block.text.splitlines())
    lines[start:end] = [ln + "\n" for ln in out]
    path.write_text("".join(lines), encoding="utf-8")
    print(f"refreshed {where}: {len(out)} lines")


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        refresh(arg)
