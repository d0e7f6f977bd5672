"""Every example in README.md and docs/ runs: each shell command and Python snippet is executed
(unless marked `<!-- not-run: reason -->`), and shown output is compared with the real output after
normalising digests, times, paths and column padding. `nsa-policy …` commands run in-process through
the Typer app (CI has 2 cores: no interpreter start per command). Conventions: tests/docs/doc_blocks.py."""
from __future__ import annotations

import importlib
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from docs.doc_blocks import (
    REPO,
    Block,
    blocks,
    command_lines,
    doc_files,
    dotted_names,
    literal_checks,
    normalise,
    output_matches,
    session_steps,
)

ALL = [b for f in doc_files() for b in blocks(f)]
EXAMPLES = [b for b in ALL if b.kind is not None]
RUNNABLE = [b for b in EXAMPLES if b.not_run is None]


def _params() -> list:
    # every runnable example must pass: none is let off as pending (mark it not-run, with the reason)
    return [pytest.param(b, id=b.where) for b in RUNNABLE]


def _workdir(tmp_path: Path) -> Path:
    """A working folder that sees the repository's files read-only by name (docs/…, tests/data/…) and
    keeps what a command writes out of the checkout: each top-level entry is a link."""
    work = tmp_path / "work"
    work.mkdir()
    for entry in REPO.iterdir():
        if entry.name not in (".git",):
            (work / entry.name).symlink_to(entry)
    return work


def _split_env(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    env: dict[str, str] = {}
    while argv and "=" in argv[0] and argv[0].split("=", 1)[0].isidentifier():
        k, v = argv.pop(0).split("=", 1)
        env[k] = v
    return env, argv


def _run(command: str, work: Path) -> tuple[int, list[str]]:
    """Run one documented command: `nsa-policy …` in-process, anything else in bash. The output is
    stderr, then stdout: what a terminal shows for a command that reports on stderr as it goes and
    prints its result last."""
    from nsa_policy.cli import app

    try:
        argv = shlex.split(command)
    except ValueError:  # not one simple command: bash reads it
        argv = ["bash"]
    env, argv = _split_env(argv)
    if argv[:3] == ["python", "-m", "nsa_policy.cli"]:
        argv = ["nsa-policy", *argv[3:]]
    plain = not any(tok in command for tok in ("|", ">", "<", "&&", ";", "$(", "`"))
    if plain and argv and argv[0] == "nsa-policy":
        cwd = os.getcwd()
        os.chdir(work)
        try:
            result = CliRunner().invoke(app, argv[1:], env=env or None)
        finally:
            os.chdir(cwd)
        if result.exit_code not in (0, 1, 2) and result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return result.exit_code, (result.stderr + result.stdout).splitlines()
    bin_dir = str(Path(sys.executable).parent)
    proc = subprocess.run(["bash", "-c", command], cwd=work, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""), **env})
    return proc.returncode, (proc.stderr + proc.stdout).splitlines()


def _check_session(block: Block, work: Path, tmp: str) -> None:
    for step in session_steps(block.text):
        rc, real = _run(step.command, work)
        shows_error = any("error" in ln for ln in step.shown)
        assert rc in (0, 1) or shows_error, f"{block.where}: `{step.command}` exited {rc}:\n" + "\n".join(real[-15:])
        if step.shown:
            want = [normalise(ln) for ln in step.shown]
            have = [normalise(ln, tmp) for ln in real]
            assert output_matches(want, have), (
                f"{block.where}: `{step.command}` prints something else than the page shows.\n--- page\n"
                + "\n".join(step.shown) + "\n--- real\n" + "\n".join(real))


def _check_commands(block: Block, work: Path) -> None:
    for command in command_lines(block.text):
        rc, real = _run(command, work)
        assert rc in (0, 1), f"{block.where}: `{command}` exited {rc}:\n" + "\n".join(real[-15:])


def _check_python(block: Block, work: Path) -> None:
    namespace: dict[str, object] = {"__name__": "__doc_example__"}
    cwd = os.getcwd()
    os.chdir(work)
    try:
        exec(compile(block.text, block.where, "exec"), namespace)  # noqa: S102 - the docs' own snippet
        for line, expr, expected in literal_checks(block.text):
            got = eval(compile(expr, f"{block.where}+{line}", "eval"), namespace)  # noqa: S307
            if isinstance(got, tuple) and isinstance(expected, list):
                expected = tuple(expected)
            assert got == expected, f"{block.where} line {line}: {expr} is {got!r}, the page shows {expected!r}"
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("block", _params())
def test_example_runs(block: Block, tmp_path: Path) -> None:
    work = _workdir(tmp_path)
    if block.kind == "session":
        _check_session(block, work, str(work))
    elif block.kind == "commands":
        _check_commands(block, work)
    else:
        _check_python(block, work)


def test_every_skipped_example_says_why() -> None:
    for b in EXAMPLES:
        if b.not_run is not None:
            assert len(b.not_run) >= 10, f"{b.where}: `<!-- not-run: … -->` needs a reason, not {b.not_run!r}"


def test_the_docs_have_examples_and_most_run(capsys: pytest.CaptureFixture[str]) -> None:
    """How many ran: printed for the CI log; a guard against a parser that silently finds nothing."""
    skipped = [b for b in EXAMPLES if b.not_run is not None]
    with capsys.disabled():
        print(f"\ndocs examples: {len(RUNNABLE)} run, {len(skipped)} marked not-run, in {len(doc_files())} files")
    assert len(RUNNABLE) >= 15 and len(RUNNABLE) > len(skipped)


def _importable(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def _logger_names() -> set[str]:
    """The logger names the code uses (`nsa_policy.startup`): documented, though not always modules."""
    import re

    found: set[str] = set()
    for path in (REPO / "nsa_policy").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        found.update(re.findall(r'getLogger\("(nsa_policy[\w.]*)"\)', text))
        found.update(re.findall(r'^LOGGER_NAME = "(nsa_policy[\w.]*)"', text, flags=re.M))
    return found


def test_every_dotted_name_the_docs_give_imports() -> None:
    missing = []
    loggers = _logger_names()
    for f in doc_files():
        for name in sorted(dotted_names(f.read_text(encoding="utf-8"))):
            if name not in loggers and not _importable(name):
                missing.append(f"{f.relative_to(REPO)}: {name}")
    assert not missing, "the docs name paths that do not import:\n" + "\n".join(missing)


def _cite_params() -> list:
    return [pytest.param(f, id=str(f.relative_to(REPO))) for f in doc_files()]


@pytest.mark.parametrize("page", _cite_params())
def test_docs_cite_nothing_outside_the_repository(page: Path) -> None:
    """A clone must be able to follow every reference: no spec file outside the repository."""
    banned = ("../shared", "POLICY.md", "SGLANG-RELEASES.md", "VLLM.md", "RUNTIME.md", "ENGINE-PLUGINS.md")
    text = page.read_text(encoding="utf-8")
    hits = [b for b in banned if b in text]
    assert not hits, f"{page.relative_to(REPO)} cites {hits}"


def test_readme_fits_a_first_screen_budget() -> None:
    readme = (REPO / "README.md").read_bytes()
    assert len(readme) <= 12_000, f"README.md is {len(readme)} bytes; the budget is 12 KB (12,000 bytes)"
    first = [b for b in blocks(REPO / "README.md") if b.kind is not None][0]
    assert command_lines(first.text)[1].endswith("python -m pytest"), "the README's second command runs the tests"


def _report_examples() -> list:
    """The `- example: `nsa-policy resolve …`` commands the generated migration reports give per change class."""
    import re

    out = []
    for name in ("migration-from-sglang.md", "migration-from-vllm.md"):
        text = (REPO / "docs" / name).read_text(encoding="utf-8")
        for k, m in enumerate(re.finditer(r"^- example: `([^`]+)`", text, flags=re.M)):
            out.append(pytest.param(m.group(1), id=f"{name}#{k + 1}"))
    return out


@pytest.mark.parametrize("command", _report_examples())
def test_generated_report_examples_run(command: str, tmp_path: Path) -> None:
    """Each change class's example reproduces its input: a command the CLI accepts (exit 0 or 1)."""
    rc, real = _run(command, _workdir(tmp_path))
    assert rc in (0, 1), f"`{command}` exited {rc}: " + "\n".join(real[-5:])
